"""One asset per streaming job: its Delta table, materialized by one run of the job's query.

Built by a factory from the job catalog, so every registered job (the examples, entry points, the config
file's own jobs) becomes an asset without code here, with the spec's owners and tags, a code version
(stateops.jobs.definition.transformation.code_version) and an asset group: the job's `group`, else its team owner's name, else
`streaming_jobs` (stateops.dagster.groups.asset_group), so that a code location of a thousand jobs lists them by
team. The run's numbers become the materialization's metadata, the first thing an operator looks at, with the
standard entries Dagster shows natively (`dagster/row_count`, `dagster/column_schema`, `dagster/uri`); each new
micro-batch is reported while the run goes on, as an AssetObservation (batch, input rows, state rows, watermark, batch time) in the run's event log.

One writer per job: each job asset is in its own concurrency pool (`stateops_job_<job>`; the instance
config `concurrency: pools: default_limit: 1` makes a second run wait for the first), and the run holds
the job's lease (stateops.control): a materialization while another run holds it, or while a runbook
holds the maintenance lock, fails with one line naming the holder, before Spark starts.
"""
# No `from __future__ import annotations`: Dagster reads the asset function's annotations as types.
from collections import Counter
from typing import Literal

from dagster import (AssetExecutionContext, AssetObservation, AssetsDefinition, Config,
                     MaterializeResult, MetadataValue, TableColumn, TableColumnConstraints, TableSchema, asset)
from pydantic import Field

from stateops.jobs.definition.settings import state_store_report
from stateops.jobs.definition.spec import JobSpec, resolved
from stateops.jobs.runtime.runner import RunResult, run_job

from stateops.dagster.groups import DEFAULT_GROUP, asset_group
from stateops.jobs.definition.transformation import code_version
from stateops import control, kafka_lag
from stateops import progress as progress_table
from stateops.delta import open_table, table_columns
from stateops.errors import ConfigError
from stateops.profile.parts import PARTS

from stateops.dagster.failure import redacted_step, redacted
from stateops.dagster.resources import PathsResource, SparkResource

GROUP = DEFAULT_GROUP  # the group of jobs without a group or team owner (stateops.dagster.groups.asset_group)


class StreamingRunConfig(Config):
    """Launchpad settings of one materialization."""

    mode: Literal["bounded", "continuous"] = Field(
        "bounded", description="bounded: process the available input, then stop; continuous: keep running")
    max_seconds: float | None = Field(
        None, description="continuous only: stop after this many seconds (default: until the run is terminated)")


def pool_name(spec: JobSpec) -> str:
    """The Dagster concurrency pool shared by every run of the job."""
    return f"stateops_job_{spec.name}"


def state_rows(operators: list[dict]) -> dict[str, int]:
    """One `state_rows/<operator>` entry per operator (a name used twice in one query gets its position); none
    for an operator whose rows are not counted (stateops.progress.rows_untracked)."""
    repeated = {n for n, c in Counter(op["operator_name"] for op in operators).items() if c > 1}
    return {f"state_rows/{op['operator_name']}" + (f"#{i}" if op["operator_name"] in repeated else ""):
            op["num_rows_total"] for i, op in enumerate(operators) if op["num_rows_total"] is not None}


def table_metadata(table_path: str) -> dict[str, object]:
    """Dagster's standard table entries: row count and column schema of the Delta table, and its URI."""
    table = open_table(table_path)
    uri = {"dagster/uri": MetadataValue.text(table_path)}
    if table is None:
        return uri
    schema = TableSchema([TableColumn(name, kind, constraints=TableColumnConstraints(nullable=nullable))
                          for name, kind, nullable in table_columns(table)])
    return {"dagster/row_count": MetadataValue.int(table.count()),
            "dagster/column_schema": MetadataValue.table_schema(schema), **uri}


def progress_metadata(progress: dict) -> dict[str, object]:
    """One micro-batch, as a progress observation's metadata."""
    operators = progress_table.operator_metrics(progress)
    rows = progress_table.state_rows(operators)
    lag = kafka_lag.partition_lag(progress)
    return {
        "batch": progress.get("batchId"),
        "input_rows": progress.get("numInputRows", 0),
        **({} if rows is None else {"state_rows": rows}),
        **state_rows(operators),
        "watermark": progress.get("eventTime", {}).get("watermark"),
        "batch_time": progress.get("timestamp"),
        "batch_ms": progress.get("batchDuration"),
        # where the batch's time went (stateops.profile.parts): one plot per part on the asset page
        **{f"part_ms/{name}": ms for name, ms in (progress.get(PARTS) or {}).items()},
        **({"kafka_lag": sum(lag.values()), **{f"kafka_lag/{p}": n for p, n in sorted(lag.items())}} if lag else {}),
    }


def debt_metadata(spec: JobSpec, layout) -> dict[str, object]:
    """A partial migration's boundary while it is owed (stateops.migration.debt): `migration_debt`."""
    from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError
    from stateops.migration import debt

    try:
        owed = debt.current(layout, spec.name, Checkpoint.open(spec.checkpoint_path(layout)))
    except NotACheckpointError:
        return {}
    if not owed:
        return {}
    return {"migration_debt": MetadataValue.text(owed["line"]),
            "migration_boundary_batch": owed["boundary"]["batch"], "migration_debt_settled": owed["settled"]}


def run_metadata(result: RunResult, table_path: str) -> dict[str, object]:
    """The run's numbers, and the table's standard entries, as materialization metadata."""
    durations = result.batch_durations_ms
    return {
        **table_metadata(table_path),
        "batches": result.batches,
        "input_rows": result.input_rows,
        "output_rows": result.output_rows,
        **state_rows(result.state_operators),
        "watermark": result.watermark,
        "median_batch_ms": result.median_batch_ms,
        "max_batch_ms": max(durations) if durations else None,
        "delta_version": result.delta_version,
        "batches_skipped": result.batches_skipped,
        "deadletter_rows": result.deadletter_rows,
        "deadletter_total": result.deadletter_total,
        "progress_write_failures": result.progress_write_failures,
        "progress_gap_batches": result.progress_gap_batches,
        "table_path": MetadataValue.path(table_path),
        "query_id": result.query_id,
        "stateops_run_id": result.run_id,
        "stop_reason": result.stop_reason,
        "hard_stopped": result.hard_stopped,
    }


def state_store_metadata(report: dict) -> dict:
    """The store and formats the job's checkpoint runs with, each with its source (`jobs describe`'s block)."""
    return {f"state_store/{name}": MetadataValue.text(f"{entry['value']} ({entry['source']})")
            for name, entry in report.items() if name != "notes"}


def build_job_asset(spec: JobSpec) -> AssetsDefinition:
    """The asset of one job: key = its sink table; materializing it runs the job once."""

    @asset(name=spec.output_asset, group_name=asset_group(spec), description=spec.description, kinds={"spark", "delta"},
           pool=pool_name(spec), owners=list(spec.owners), tags=dict(spec.tags), code_version=code_version(spec))
    def _materialize(context: AssetExecutionContext, config: StreamingRunConfig, spark: SparkResource,
                     paths: PathsResource) -> MaterializeResult:
        if config.mode == "bounded" and config.max_seconds is not None:
            raise ConfigError("max_seconds", "only applies to mode 'continuous'",
                              "remove max_seconds, or set mode: continuous")
        layout = paths.layout
        reported: list = [None]  # the last batch observed (not every one: a continuous run lasts days)

        def observe(progress: dict) -> None:  # idle reports repeat the last batch id: once per batch
            if progress.get("batchId") != reported[0]:
                reported[0] = progress.get("batchId")
                context.log_event(AssetObservation(asset_key=context.asset_key,
                                                   metadata=redacted(progress_metadata(progress))))

        with redacted_step():
            in_force = resolved(spec)  # its `${env:NAME}` references, read now (stateops.references)
            settings = paths.environment().settings
            # Refused before Spark starts; run_job decides atomically, and starts Spark once it holds the lease.
            control.check_can_start(layout, spec.name, settings=settings.control)
            result = run_job(lambda: spark.spark_session, in_force, layout, settings=settings, mode=config.mode,
                             max_seconds=config.max_seconds, run_id=context.run_id, dagster_run_id=context.run_id,
                             on_progress=observe)
            store = state_store_report(in_force, layout, paths.environment().spark.extra_conf)
            owed = debt_metadata(in_force, layout)
        return MaterializeResult(metadata=redacted({**run_metadata(result, spec.sink_path(layout)),
                                                    **state_store_metadata(store), **owed}))

    return _materialize

