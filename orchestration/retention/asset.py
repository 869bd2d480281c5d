"""Retention in Dagster: a daily `retention` asset that plans (and applies only when its config says so).

    retention            asset, group `retention`: inventory, plan, optionally apply; records the storage
                         history (ops table `storage`) and writes the plan as JSON next to its chart PNG
    retention_job        the asset as a job: the Launchpad's manual run (config `apply: true` to apply)
    retention_daily      its schedule, 03:30 UTC or `[retention] cron` (stopped until an operator turns it on);
                         its runs apply only with `[retention] apply_on_schedule = true` in the config file

Metadata: bytes and files the plan frees (total and per rule: numbers Dagster plots over time, and a
table), what an apply freed, storage by kind, and a chart of storage over time from the `storage` table.
"""
# No `from __future__ import annotations`: Dagster reads the asset function's annotations as types.
import json
import posixpath

from dagster import (AssetExecutionContext, AssetSelection, Config, DefaultScheduleStatus, Definitions,
                     MaterializeResult, MetadataValue, RunRequest, ScheduleEvaluationContext, SkipReason, asset,
                     ScheduleDefinition, define_asset_job, in_process_executor, schedule)
from pydantic import Field

from stateops.jobs.runtime.retention import retention_scope
from stateops import retention as core
from stateops.errors import StateOpsError, first_line
from stateops.extras import MissingExtra
from stateops.redaction import redact
from stateops.storage import write_bytes, write_text
from stateops.retention import history
from stateops.retention.model import Plan

from stateops.dagster.catalog import catalog_for
from stateops.dagster.failure import one_line_failure, redacted
from stateops.dagster.resources import PathsResource

GROUP = "retention"
CRON = "30 3 * * *"


class RetentionConfig(Config):
    apply: bool = Field(False, description="Apply the plan (delete what it lists). Default: plan only.")


def plans_dir(home: str) -> str:
    return posixpath.join(home.rstrip("/"), "ops", "_retention", "plans")


def _per_rule_markdown(plan: Plan) -> str:
    rows = plan.per_rule()
    if not rows:
        return "_Nothing to do._"
    lines = ["| rule | items | bytes | files |", "|---|---:|---:|---:|"]
    lines += [f"| {rule} | {t['items']} | {t['bytes']:,} | {t['files']:,} |" for rule, t in sorted(rows.items())]
    return "\n".join(lines)


def _save(home: str, plan: Plan, chart: bytes | None) -> str:
    """The plan as JSON (what `stateops retention apply --plan` takes) and the chart beside it."""
    folder = plans_dir(home)
    write_text(posixpath.join(folder, f"{plan.plan_id}.json"), json.dumps(plan.to_dict(), indent=1))
    if chart is not None:
        write_bytes(posixpath.join(folder, f"{plan.plan_id}.png"), chart)
    return posixpath.join(folder, f"{plan.plan_id}.json")


@asset(name="retention", group_name=GROUP, description="Checkpoint and ops-table retention: plan daily, apply "
       "when config `apply` is true (stateops retention plan / apply --yes).")
def retention_asset(context: AssetExecutionContext, config: RetentionConfig, paths: PathsResource) -> MaterializeResult:
    try:
        scope = retention_scope(paths.environment())
        inventory = core.take_inventory(scope)
        plan = core.make_plan(scope, inventory)
        report = core.apply(scope, plan, actor=f"dagster:{context.run_id}", run_id=context.run_id, fresh=True) \
            if config.apply else None
    except StateOpsError as err:
        raise one_line_failure(err) from None
    history.record(scope.layout, inventory, plan, report)
    try:
        chart, no_chart = history.storage_chart(history.read(scope.layout)), None
    except MissingExtra as err:  # the plan stands without its picture
        chart, no_chart = None, f"_{err}_"
    totals = inventory.to_dict()["totals"]
    metadata = {
        "applied": config.apply, "plan_id": plan.plan_id,
        "plan_bytes": MetadataValue.int(plan.bytes), "plan_files": MetadataValue.int(plan.files),
        "plan_items": MetadataValue.int(len(plan.items)),
        **{f"plan_bytes/{rule}": MetadataValue.int(t["bytes"]) for rule, t in plan.per_rule().items()},
        **{f"plan_files/{rule}": MetadataValue.int(t["files"]) for rule, t in plan.per_rule().items()},
        "per_rule": MetadataValue.md(_per_rule_markdown(plan)),
        "storage_bytes": MetadataValue.int(totals["bytes"]), "storage_files": MetadataValue.int(totals["files"]),
        **{f"storage_bytes/{kind[:-6]}": MetadataValue.int(totals[kind])
           for kind in ("checkpoints_bytes", "archives_bytes", "tables_bytes", "ops_tables_bytes")},
    }
    saved = _save(scope.layout.home, plan, chart)
    metadata["plan"] = MetadataValue.path(saved)
    # The chart stays out of the event log (a file beside the plan); storage_bytes plots natively over runs.
    metadata["chart"] = (MetadataValue.path(saved[:-len(".json")] + ".png") if chart else
                         MetadataValue.md(no_chart or "_Storage over time is drawn from the second retention run on._"))
    if report is not None:
        metadata.update({"freed_bytes": MetadataValue.int(report.bytes), "freed_files": MetadataValue.int(report.files),
                         "run_report": MetadataValue.md(f"```\n{report.render()}\n```")})
        if not report.ok:
            context.log.warning(redact(report.render()))
    return MaterializeResult(metadata=redacted(metadata))


retention_job = define_asset_job("retention_job", selection=AssetSelection.assets(retention_asset),
                                 executor_def=in_process_executor,
                                 description="Plan retention; apply with config `apply: true` (Launchpad).")


def retention_schedule(cron: str = CRON) -> ScheduleDefinition:
    """`retention_daily` at `cron` (`[retention] cron`; the name stays what operators and links know)."""

    @schedule(name="retention_daily", cron_schedule=cron, job=retention_job, execution_timezone="UTC",
              default_status=DefaultScheduleStatus.STOPPED)
    def retention_daily(context: ScheduleEvaluationContext, paths: PathsResource):
        """Plan on schedule; the run applies only when the config file says `[retention] apply_on_schedule = true`."""
        try:
            apply = catalog_for(paths.environment()).retention.apply_on_schedule
        except StateOpsError as err:
            return SkipReason(first_line(err))
        return RunRequest(run_config={"ops": {"retention": {"config": {"apply": apply}}}})

    return retention_daily


def build(cron: str = CRON) -> Definitions:
    """The retention asset, its job and its schedule at `cron`."""
    return Definitions(assets=[retention_asset], jobs=[retention_job], schedules=[retention_schedule(cron)])
