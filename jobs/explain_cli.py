"""`stateops explain-key JOB --key VALUE [--batch-id N] [--json]`: why is (or isn't) this key in state?

Exit codes: 0 explained, 2 usage errors (unknown job, no checkpoint or no committed batch yet, bad batch id,
state no longer retained), each as one line without a traceback. The reasons are listed in
stateops.explain.REASONS.
"""
from __future__ import annotations

import json

import click

from stateops import progress
from stateops.checkpoint import Checkpoint
from stateops.durations import parse_seconds
from stateops.errors import StateOpsError
from stateops.explain import (REASONS, ExplainError, ExplainTarget, InputSource, JoinSpec, KeyExplanation,
                              explain_key, resolve_batch)
from stateops.fs import filesystem
from stateops.layout import Layout

from jobs.catalog import get_job
from jobs.sink import query_app_id
from jobs.spec import JobSpec
from jobs.transforms import JOIN_BOUNDS, SESSION_GAP

# How each transformation's state relates to its inputs: the join's sides and time condition, the kind of
# state, how long after its event time an input row stays on time (a session stays open a gap after its
# last event), and the column that carries the key in each input and in the output table.
JOINS = {
    "order_payments": JoinSpec(left="orders", right="payments", left_time="order_time", right_time="payment_time",
                               bound=JOIN_BOUNDS["order_payments"]),
}
STATE_KINDS = {
    "order_payments": ("join", 0),
    "user_activity": ("window", 0),  # dropDuplicatesWithinWatermark first: a row is late by its event time
    "user_sessions": ("session", parse_seconds(SESSION_GAP) or 0),
    "user_actions": ("custom", 0),
}
KEY_COLUMNS = {
    "order_payments": {"orders": "order_id", "payments": "order_id", "output": ("order_id",)},
    "user_activity": {"events": "user_id", "output": ("user_id",)},
    "user_sessions": {"events": "user_id", "output": ("user_id",)},
    "user_actions": {"events": "user_id", "output": ("user_id",)},
}


def explain_target(spec: JobSpec, layout: Layout) -> ExplainTarget:
    """Everything explain_key needs to know about a job: checkpoint, inputs, output table, join condition."""
    checkpoint = spec.checkpoint_path(layout)
    keys = KEY_COLUMNS.get(spec.transformation, {})
    try:
        app_id = query_app_id(spec.name, checkpoint)
    except (OSError, ValueError, KeyError):
        app_id = None
    inputs = tuple(InputSource(inp.name, layout.landing(inp.name), inp.schema, inp.time_column, keys.get(inp.name),
                               spec.future_tolerance_seconds)
                   for inp in spec.inputs) if spec.source == "json" else ()
    kind, margin = STATE_KINDS.get(spec.transformation, ("custom", 0))
    return ExplainTarget(job=spec.name, checkpoint=checkpoint, output_table=layout.table(spec.sink_table),
                         output_app_id=app_id, output_key_columns=tuple(keys.get("output", spec.merge_keys)),
                         inputs=inputs, join=JOINS.get(spec.transformation), kind=kind,
                         late_margin_seconds=margin, progress_table=layout.ops_table(progress.TABLE))


def explain_job_key(spark, name: str, key: str, batch_id: int | None = None, layout: Layout | None = None,
                    config_path: str | None = None) -> KeyExplanation:
    """explain_key for a job by name (the API behind the command)."""
    layout = layout or Layout.from_env()
    return explain_key(spark, explain_target(get_job(name, config_path), layout), key, batch_id)


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
        target = explain_target(spec, layout)
        fs, path = filesystem(target.checkpoint)
        if not fs.exists(path):
            raise ExplainError(f"job {job} has no checkpoint yet ({target.checkpoint}); run it first: "
                               f"stateops jobs run {job}")
        resolve_batch(Checkpoint.open(target.checkpoint), batch_id)  # usage errors before starting a JVM
        from jobs.session import get_session

        result = explain_key(get_session(), target, key, batch_id)
    except StateOpsError as err:
        click.echo(f"Error: {err}", err=True)
        ctx.exit(2)
        return
    click.echo(result.to_json(indent=2) if as_json else render(result))
