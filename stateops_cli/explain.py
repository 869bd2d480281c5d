"""`stateops explain-key JOB --key VALUE [--batch-id N] [--json]`: why is (or isn't) this key in state?

Exit codes: 0 explained, 2 usage errors (unknown job, no checkpoint or no committed batch yet, bad batch id,
state no longer retained, a kind of state explain-key has no rules for), each as one line without a
traceback. The reasons are listed in stateops.explain.REASONS.

What to explain comes from the job's spec (its `join`, and `explain`: key columns, late margin) and from
the operators its checkpoint holds (read from the state metadata files, no JVM): one kind of state per job,
optionally behind a deduplication. A job whose operators fit none (two kinds, deduplication alone, an
operator unknown here) is refused with one line naming them, rather than explained by guesswork.
"""
from __future__ import annotations

import json

import click

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.explain import REASONS, ExplainError, KeyExplanation, explain_key, resolve_batch
from stateops.storage import exists

from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.targets import explain_target

def render(result: KeyExplanation) -> str:
    lines = [f"{result.job} key {result.key} at batch {result.batch_id} (watermark {result.watermark or 'none'})",
             f"reason: {result.reason} - {REASONS.get(result.reason, '')}",
             f"  {result.explanation}"]
    if result.in_state:
        lines.append("in state:")
        for row in result.in_state:
            lines.append(f"  operator {row['operator_id']} store {row['store_name']} partition {row['partition_id']}: "
                         f"{json.dumps(row['value'], default=str)}")
    else:
        lines.append("in state: no")
    if result.history:
        lines.append("changes:")
        for event in result.history:
            lines.append(f"  batch {event['batch_id']} {event['change_type']:6} {event['store_name']} "
                         f"partition {event['partition_id']}")
    if result.change_feed.get("error"):
        lines.append(f"change feed: {result.change_feed['error']}")
    return "\n".join(lines)


@click.command("explain-key")
@click.argument("job")
@click.option("--key", required=True, help="The key value, e.g. an order id (or FIELD=VALUE for one key field).")
@click.option("--batch-id", type=click.IntRange(min=0), default=None, help="Committed batch to explain at (default: the latest).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: job, key, batch_id, watermark, in_state, "
              "reason, explanation (and history, inputs, output_rows, change_feed).")
@click.pass_obj
def explain_key_command(obj: Environment, job: str, key: str, batch_id: int | None, as_json: bool) -> None:
    """Why is a key in state (or not), where, with which value, and why it has not been emitted."""
    layout, spec = obj.layout, obj.catalog.job(job)
    if not exists(spec.checkpoint_path(layout)):
        raise ExplainError(f"job {job} has no checkpoint yet ({spec.checkpoint_path(layout)}); run it first: "
                           f"stateops jobs run {job}")
    # Usage errors before anything else: no committed batch means no operators to judge either.
    resolve_batch(Checkpoint.open(spec.checkpoint_path(layout)), batch_id)
    target = explain_target(spec, layout)
    from stateops.jobs.runtime.session import get_session

    result = explain_key(get_session(obj.spark), target, key, batch_id)
    click.echo(result.to_json(indent=2) if as_json else render(result))
