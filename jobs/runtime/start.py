"""Starting a job's query: the job's transformation over its valid, watermarked rows, its rejected rows collected in
the same scan (stateops.jobs.runtime.sources), into its sink fenced by the run's lease, in the `stateful` pool."""
from __future__ import annotations

import contextlib
from typing import Any, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from stateops.checkpoints import state_store
from stateops.control.fence.writes import BatchWriter
from stateops.durations import spark_interval
from stateops.layout import Layout
from stateops.storage import makedirs

from stateops.jobs.definition import transformation
from stateops.jobs.definition.settings import kept_formats
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime.session import STATEFUL_POOL
from stateops.jobs.runtime.sources import valid_rows


def session_state_conf(spark: SparkSession) -> dict[str, str]:
    """The state store settings the session sets (STATEOPS_SPARK_CONF's, through the session factory)."""
    return {key: value for key in state_store.DEFAULTS if (value := spark.conf.get(key, None)) is not None}


def state_conf(spark: SparkSession, spec: JobSpec, layout: Layout) -> dict[str, str]:
    """The state store settings the job's stateful query starts with (stateops.checkpoints.state_store.run_conf):
    the job's state_store, the formats a rebuild kept (its `state_formats` override), the session's values."""
    return state_store.run_conf(spec.checkpoint_path(layout), spec.state_store, kept_formats(layout, spec.name)[0],
                                session_state_conf(spark))


def ensure_landing(spec: JobSpec, layout: Layout) -> None:
    if spec.source == "json":
        for inp in spec.inputs:
            makedirs(inp.landing(layout))


def stateful_frame(spark: SparkSession, spec: JobSpec, layout: Layout,
                   deadletters: Mapping[str, Any] | None = None) -> DataFrame:
    """The job's transformation applied to its valid input rows, each stream watermarked on its time column
    with the delay in force; each input's rejected rows collected by `deadletters[input]`
    (stateops.jobs.runtime.sources.collector; default: collected for nobody)."""
    delay = spark_interval(spec.watermark_seconds)
    streams = {inp.name: valid_rows(spark, spec, layout, inp, (deadletters or {}).get(inp.name))
               .withWatermark(inp.time_column, delay) for inp in spec.inputs}
    transformation.ship(spec, spark.sparkContext.environment)
    return transformation.apply(spec, streams)


NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SCHEDULER_POOL = "spark.scheduler.pool"


@contextlib.contextmanager
def in_pool(spark: SparkSession, pool: str):
    """Spark jobs of a query started inside the block run in fair-scheduler pool `pool`: the query's thread
    inherits the starting thread's local properties (jobs/runtime/scheduler_pools.xml says why two pools)."""
    context = spark.sparkContext
    before = context.getLocalProperty(SCHEDULER_POOL)
    context.setLocalProperty(SCHEDULER_POOL, pool)
    try:
        yield
    finally:
        context.setLocalProperty(SCHEDULER_POOL, before)  # type: ignore[arg-type]  # None removes it


def start_query(frame: DataFrame, name: str, sink: BatchWriter | None, mode: str, output_mode: str, spec: JobSpec,
                checkpoint: str, no_data_batches: bool = True, pool: str = STATEFUL_POOL,
                state_conf: Mapping[str, str] | None = None) -> StreamingQuery:
    """Start one of a job's queries (foreachBatch into `sink`, or Spark's `noop` without one) in `pool`, with its
    state store and formats (`state_conf`: stateops.checkpoints.state_store.run_conf)."""
    conf = frame.sparkSession.conf
    # Read by Spark only as the query starts (it runs on its own copy of the session), the partitions and the
    # store's settings only when the checkpoint is new (afterwards the checkpoint's own values win, but for the two
    # the state store module keeps): the caller's session gets its own values back, or a job's would leak into the
    # next job, audit or query of that session.
    wanted = {SHUFFLE_PARTITIONS: str(spec.shuffle_partitions), NO_DATA_BATCHES: str(no_data_batches).lower(),
              **(state_conf or {})}
    caller = {key: conf.get(key, None) for key in wanted}
    writer = frame.writeStream.queryName(name).outputMode(output_mode).option("checkpointLocation", checkpoint)
    writer = writer.foreachBatch(sink) if sink is not None else writer.format("noop")
    if mode == "bounded":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.trigger_interval)
    for key, value in wanted.items():
        conf.set(key, value)
    try:
        with in_pool(frame.sparkSession, pool):
            return writer.start()
    finally:
        for key, value in caller.items():
            if value is None:
                conf.unset(key)
            else:
                conf.set(key, value)
