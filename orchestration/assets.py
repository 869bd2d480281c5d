"""One asset per streaming job: its Delta table, materialized by one run of the job's query.

Built by a factory from the job catalog, so a job added to the catalog becomes an asset without code
here. The run's numbers become the materialization's metadata, the first thing an operator looks at.

One writer per job: each job asset is in its own concurrency pool (`stateops_job_<job>`; the instance
config `concurrency: pools: default_limit: 1` makes a second run wait for the first), and the run holds
the job's lease (stateops.control): a materialization while another run holds it, or while a runbook
holds the maintenance lock, fails with one line naming the holder, before Spark starts.
"""
# No `from __future__ import annotations`: Dagster reads the asset function's annotations as types.
from collections import Counter
from typing import Literal

from dagster import (AssetExecutionContext, AssetsDefinition, Config, Definitions, Failure, MaterializeResult,
                     MetadataValue, asset)
from pydantic import Field

from jobs.catalog import load_jobs
from jobs.runner import RunResult, run_job
from jobs.spec import JobSpec
from stateops import control
from stateops.errors import ConfigError, StateOpsError

from orchestration.resources import PathsResource, SparkResource

GROUP = "streaming_jobs"
SPECS: dict[str, JobSpec] = load_jobs()


class StreamingRunConfig(Config):
    """Launchpad settings of one materialization."""

    mode: Literal["bounded", "continuous"] = Field(
        "bounded", description="bounded: process the available input, then stop; continuous: keep running")
    max_seconds: float | None = Field(
        None, description="continuous only: stop after this many seconds (default: until the run is terminated)")


def pool_name(spec: JobSpec) -> str:
    """The Dagster concurrency pool shared by every run of the job."""
    return f"stateops_job_{spec.name}"


def one_line_failure(err: StateOpsError) -> Failure:
    return Failure(description=str(err).splitlines()[0], allow_retries=False)


def run_metadata(result: RunResult, table_path: str) -> dict[str, object]:
    """The run's numbers as materialization metadata (one `state_rows/<operator>` entry per operator)."""
    repeated = {n for n, c in Counter(op["operator_name"] for op in result.state_operators).items() if c > 1}
    state_rows = {  # an operator name used twice in one query gets its position appended
        f"state_rows/{op['operator_name']}" + (f"#{i}" if op["operator_name"] in repeated else ""):
            op["num_rows_total"]
        for i, op in enumerate(result.state_operators)
    }
    durations = result.batch_durations_ms
    return {
        "batches": result.batches,
        "input_rows": result.input_rows,
        "output_rows": result.output_rows,
        **state_rows,
        "watermark": result.watermark,
        "median_batch_ms": result.median_batch_ms,
        "max_batch_ms": max(durations) if durations else None,
        "delta_version": result.delta_version,
        "batches_skipped": result.batches_skipped,
        "deadletter_rows": result.deadletter_rows,
        "deadletter_total": result.deadletter_total,
        "progress_write_failures": result.progress_write_failures,
        "table_path": MetadataValue.path(table_path),
        "query_id": result.query_id,
        "stateops_run_id": result.run_id,
        "stop_reason": result.stop_reason,
        "hard_stopped": result.hard_stopped,
    }


def build_job_asset(spec: JobSpec) -> AssetsDefinition:
    """The asset of one job: key = its sink table; materializing it runs the job once."""

    @asset(name=spec.sink_table, group_name=GROUP, description=spec.description, kinds={"spark", "delta"},
           pool=pool_name(spec))
    def _materialize(context: AssetExecutionContext, config: StreamingRunConfig, spark: SparkResource,
                     paths: PathsResource) -> MaterializeResult:
        if config.mode == "bounded" and config.max_seconds is not None:
            raise ConfigError("max_seconds", "only applies to mode 'continuous'",
                              "remove max_seconds, or set mode: continuous")
        layout = paths.layout
        try:
            control.check_can_start(layout, spec.name)  # before Spark starts; run_job decides atomically
            result = run_job(spark.spark_session, spec, layout, mode=config.mode, max_seconds=config.max_seconds,
                             run_id=context.run_id, dagster_run_id=context.run_id)
        except StateOpsError as err:
            raise one_line_failure(err) from None
        return MaterializeResult(metadata=run_metadata(result, layout.table(spec.sink_table)))

    return _materialize


job_assets = [build_job_asset(spec) for spec in SPECS.values()]

defs = Definitions(assets=job_assets)
