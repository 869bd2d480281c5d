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

from stateops import progress
from stateops.audit.inventory import operator_meta
from stateops.checkpoint import Checkpoint
from stateops.errors import StateOpsError
from stateops.explain import (REASONS, ExplainError, ExplainTarget, InputSource, JoinSpec, KeyExplanation,
                              explain_key, resolve_batch)
from stateops.fs import filesystem
from stateops.layout import Layout

from jobs.catalog import get_job
from jobs.sink import query_app_id
from jobs.spec import JobSpec

# The kind of state each operator keeps (operator names as in Spark's state metadata); deduplication may
# come first, in front of any kind.
OPERATOR_KINDS = {
    "symmetricHashJoin": "join",
    "sessionWindowStateStoreSaveExec": "session",
    "stateStoreSave": "window",
    "applyInPandasWithState": "custom",
    "flatMapGroupsWithState": "custom",
    "transformWithStateExec": "custom",
    "transformWithStateInPandasExec": "custom",
    "transformWithStateInPySparkExec": "custom",
}
DEDUP_OPERATORS = ("dedupe", "dedupeWithinWatermark")


def state_kind(spec: JobSpec, checkpoint: Checkpoint) -> str:
    """The one kind of state the job's checkpoint keeps; ExplainError naming the operators otherwise."""
    names = [meta.operator_name for meta in map(lambda op: operator_meta(checkpoint, op), checkpoint.operator_ids())
             if meta is not None]
    kinds = {OPERATOR_KINDS.get(name) for name in names if name not in DEDUP_OPERATORS}
    if len(kinds) != 1 or None in kinds:
        unknown = sorted({n for n in names if n not in OPERATOR_KINDS and n not in DEDUP_OPERATORS})
        why = (f"has operators explain-key has no rules for ({', '.join(unknown)})" if unknown else
               "keeps deduplication state only" if names and not kinds else
               f"keeps {' and '.join(sorted(k for k in kinds if k))} state in one query" if kinds else
               "has no stateful operator in its checkpoint yet")
        raise ExplainError(f"explain-key does not support job {spec.name}: it {why} (operators: "
                           f"{', '.join(names) or 'none'}); it explains one kind of state per job (join, window, "
                           "session or custom state, optionally after a deduplication). Read its state with "
                           f"`stateops audit {spec.name}` or Spark's statestore reader instead")
    (kind,) = kinds
    if kind == "join" and spec.join is None:
        raise ExplainError(f"job {spec.name} joins two streams but its spec declares no join bound: add "
                           f"join = {{ left = ..., right = ..., upper = ... }} to [jobs.{spec.name}]")
    return kind


def explain_target(spec: JobSpec, layout: Layout) -> ExplainTarget:
    """Everything explain_key needs to know about a job: checkpoint, kind of state, inputs and the columns
    that carry the key, output table, join condition."""
    checkpoint = spec.checkpoint_path(layout)
    kind = state_kind(spec, Checkpoint.open(checkpoint))
    keys = spec.explain
    try:
        app_id = query_app_id(spec.name, checkpoint)
    except (OSError, ValueError, KeyError):
        app_id = None
    inputs = tuple(InputSource(inp.name, layout.landing(inp.name), inp.schema, inp.time_column,
                               keys.key_columns.get(inp.name), spec.future_tolerance_seconds)
                   for inp in spec.inputs) if spec.source == "json" else ()
    join = spec.join and JoinSpec(left=spec.join.left, right=spec.join.right,
                                  left_time=spec.input(spec.join.left).time_column,
                                  right_time=spec.input(spec.join.right).time_column, bound=spec.join.bound)
    return ExplainTarget(job=spec.name, checkpoint=checkpoint, output_table=layout.table(spec.sink_table),
                         output_app_id=app_id, output_key_columns=keys.output_key_columns or spec.merge_keys,
                         inputs=inputs, join=join if kind == "join" else None, kind=kind,
                         late_margin_seconds=keys.late_margin_seconds, progress_table=layout.ops_table(progress.TABLE))


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
@click.option("--batch-id", type=int, default=None, help="Committed batch to explain at (default: the latest).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: job, key, batch_id, watermark, in_state, "
              "reason, explanation (and history, inputs, output_rows, change_feed).")
@click.pass_context
def explain_key_command(ctx: click.Context, job: str, key: str, batch_id: int | None, as_json: bool) -> None:
    """Why is a key in state (or not), where, with which value, and why it has not been emitted."""
    obj = ctx.obj or {}
    layout: Layout = obj.get("layout") or Layout.from_env()
    try:
        spec = get_job(job, obj.get("config"))
        fs, path = filesystem(spec.checkpoint_path(layout))
        if not fs.exists(path):
            raise ExplainError(f"job {job} has no checkpoint yet ({spec.checkpoint_path(layout)}); run it first: "
                               f"stateops jobs run {job}")
        # Usage errors before anything else: no committed batch means no operators to judge either.
        resolve_batch(Checkpoint.open(spec.checkpoint_path(layout)), batch_id)
        target = explain_target(spec, layout)
        from jobs.session import get_session

        result = explain_key(get_session(), target, key, batch_id)
    except StateOpsError as err:
        click.echo(f"Error: {err}", err=True)
        ctx.exit(2)
        return
    click.echo(result.to_json(indent=2) if as_json else render(result))
