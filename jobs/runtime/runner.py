"""The one place that starts and stops a job's queries, and reads the job's effective settings.

A job runs as two queries on the same input: the stateful query (checkpoint `checkpoints/<job>`: the job's
transformation over its valid, watermarked input rows; refused before it starts unless it is a stateful
streaming frame, jobs.runtime.plan) and a stateless dead-letter query that keeps every line that failed parsing or
lies too far in the future. Every progress event of both goes to the `progress` ops table in small groups
(stateops.progress.ProgressBuffer: at most STATEOPS_PROGRESS_FLUSH_SECONDS late, all written when the run
ends; rows that cannot be written are counted and logged, and never stop the query); the stateful query's
events also go to the caller's progress callback, if any. A run notes, at its start, batches an earlier run
committed without a progress row (a crash lost its buffer). Queries are polled with a short awaitTermination
so an interrupt (a Dagster run termination) stops them within seconds, and they are always stopped in
`finally`. A failed query raises QueryFailed: one line, with the full trace in the run's log.

One writer per job: a run holds the job's lease (stateops.control) from before its first query starts
until after its last one stopped; every batch checks it before writing (a run whose lease was taken
over stops at once). Between batches the run polls its stop request and stops gracefully: the batch in
flight completes, a hard stop comes only after the request's grace period. The overrides in force
(watermark delay, shuffle partitions) are applied when the run starts.

The stateful query runs in the fair-scheduler pool `stateful`, which gets a free core first; the
dead-letter query in `deadletter`, in the gaps (jobs/runtime/scheduler_pools.xml; BENCHMARKS.md, Throughput).
"""
from __future__ import annotations

import contextlib
import logging
import statistics
import threading
import time
import uuid
from array import array
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any, Callable

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from stateops import actions, control
from stateops import progress as progress_table
from stateops.checkpoint import Checkpoint
from stateops.control import HeldLease
from stateops.delta import open_table
from stateops.durations import spark_interval
from stateops.errors import StateOpsError
from stateops.storage import filesystem
from stateops.layout import Layout
from stateops.sinkstate import sink_state
from stateops.settings import Settings

from jobs.definition import transformation
from jobs.definition.settings import effective_spec
from jobs.definition.spec import JobSpec, check_output_columns
from jobs.runtime.failures import query_failed
from jobs.runtime.plan import stateful_plan
from jobs.runtime.query_events import JsonEvents
from jobs.runtime.session import DEADLETTER_POOL, DELTA_WRITER_CONF, STATEFUL_POOL
from jobs.runtime.sink import DeltaSink
from jobs.runtime.sources import invalid_rows, raw_lines, valid_rows

MODES = ("bounded", "continuous")
log = logging.getLogger(__name__)


def deadletter_query_name(job: str) -> str:
    return f"{job}__deadletter"


@dataclass
class RunResult:
    job: str
    run_id: str
    query_id: str | None = None
    batches: int = 0
    input_rows: int = 0
    output_rows: int = 0
    deadletter_rows: int = 0
    deadletter_total: int = 0
    watermark: str | None = None
    state_operators: list[dict[str, Any]] = field(default_factory=list)
    batch_durations_ms: list[int] = field(default_factory=list)
    delta_version: int | None = None
    batches_skipped: int = 0  # batches the sink found already in Delta (re-run after a crash)
    stop_reason: str | None = None  # stop_request | max_seconds; None: the input was consumed
    hard_stopped: bool = False      # a batch was still running when the stop's grace period ran out
    progress_write_failures: int = 0
    progress_gap_batches: int = 0   # batches earlier runs committed without a progress row (noted at start)

    @property
    def median_batch_ms(self) -> float | None:
        return statistics.median(self.batch_durations_ms) if self.batch_durations_ms else None


ProgressCallback = Callable[[dict[str, Any]], None]  # gets each progress event (Spark's JSON) of the stateful query


class RunTotals:
    """What the run result needs of the stateful query's progress events, kept as they arrive instead of
    the events themselves (a continuous run reports a batch every trigger for days: its events grew the
    driver's memory with every batch): input rows, the batch time of each batch with input (8 bytes a
    batch: the median and the maximum need all of them) and the latest event."""

    def __init__(self) -> None:
        self.input_rows = 0
        self.durations_ms = array("q")  # batches with input rows, in order
        self.last: dict[str, Any] = {}

    def add(self, progress: dict[str, Any]) -> None:
        rows = progress.get("numInputRows", 0)
        self.input_rows += rows
        if rows > 0:
            self.durations_ms.append(progress.get("batchDuration", 0))
        self.last = progress


class ProgressRecorder(JsonEvents):
    """Records every progress event of this run's queries in the `progress` ops table, in small groups
    (stateops.progress.ProgressBuffer; `close()` writes what is left), keeps the stateful query's totals
    (`totals`: RunTotals) and its new events until the run's own thread takes them (`take_new`) for its
    progress callback, and the newest batch reported per query (`wait_for`): nothing that grows with the
    number of batches. An idle query reports no progress: its idle events are recorded at once in the job's
    idle record (stateops.progress.record_idle), the first of each idle spell with the batch it followed, so
    that a runbook knows the query it restarted has looked at its source and found nothing new."""

    def __init__(self, layout: Layout, job: str, run_id: str, query_names: set[str],
                 flush: progress_table.FlushSettings):
        self.layout, self.job, self.run_id, self.query_names = layout, job, run_id, query_names
        self.totals = RunTotals()
        self._reported: dict[str, int] = {}          # Spark query id -> its newest batch reported in this run
        self.buffer = progress_table.ProgressBuffer(layout, flush, name=job)
        self._lock = threading.Lock()
        self._new: list[dict[str, Any]] = []
        self._names: dict[str, str] = {}             # Spark run id -> query name (idle events carry no name)
        self._batches: dict[str, int] = {}           # query name -> its latest batch in this run
        self._idle: dict[str, dict[str, Any]] = {}   # query name -> its latest idle report
        self._idle_written: dict[str, dict[str, Any]] = {}

    @property
    def write_failures(self) -> int:
        return self.buffer.failures

    def started(self, run_id: str, name: str | None) -> None:
        if name in self.query_names:
            with self._lock:
                self._names[run_id] = name

    def progressed(self, progress: dict[str, Any]) -> None:
        if progress.get("name") not in self.query_names:
            return
        try:  # on Spark's listener thread an exception would vanish
            self.buffer.add(progress_table.progress_row(progress, self.job, self.run_id))
        finally:
            with self._lock:
                batch = progress.get("batchId")
                self._reported[progress["id"]] = max(batch, self._reported.get(progress["id"], batch))
                self._batches[progress["name"]] = batch
                if progress.get("name") == self.job:
                    self.totals.add(progress)
                    self._new.append(progress)

    def idle(self, query_id: str, run_id: str, timestamp: str) -> None:
        """A new idle spell (the first idle event after the start or after a batch) is written at once; a
        record that could not be written is tried again at the next idle event (Spark's are 10 s apart)."""
        with self._lock:
            name = self._names.get(run_id)
            if name is None:
                return
            after = self._batches.get(name)
            if name not in self._idle or self._idle[name]["after_batch"] != after:
                self._idle[name] = {"query_id": query_id, "spark_run_id": run_id,
                                    "idle_at": timestamp, "after_batch": after}
            if self._idle == self._idle_written:
                return
            try:
                progress_table.record_idle(self.layout, self.job, self.run_id, self._idle)
                self._idle_written = dict(self._idle)  # reports are replaced, never changed
            except (OSError, StateOpsError) as err:
                log.warning("%s: idle report of %s not recorded (tried again at its next idle event): %s",
                            self.job, name, err)

    def take_new(self) -> list[dict[str, Any]]:
        """The stateful query's progress events since the last call."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def close(self) -> None:
        self.buffer.close()

    def wait_for(self, query: StreamingQuery, checkpoint: str, timeout: float = 10.0) -> None:
        """Progress events arrive asynchronously; wait until the event of the query's last batch was recorded.
        A trigger that found no data leaves, as the query's last progress, the batch it would have run next:
        that batch never ran (no offsets entry in the checkpoint) and no event for it ever comes (measured on
        Spark 4.2: a run with nothing new waited the whole timeout for each of its two queries, 20 s), so the
        last batch is the newest progress that names a planned batch."""
        ran = next((p for p in reversed(query.recentProgress)
                    if p.get("numInputRows") or _planned(checkpoint, p["batchId"])), None)
        if ran is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._reported.get(ran["id"], -1) >= ran["batchId"]:
                    return
            time.sleep(0.05)


def _planned(checkpoint: str, batch_id: int) -> bool:
    """Whether the checkpoint's offset log has an entry for the batch (Spark writes it before running it)."""
    fs, path = filesystem(checkpoint)
    return fs.exists(f"{path}/offsets/{batch_id}")


def _ensure_landing(spec: JobSpec, layout: Layout) -> None:
    if spec.source == "json":
        for inp in spec.inputs:
            fs, path = filesystem(layout.landing(inp.name))
            fs.makedirs(path, exist_ok=True)


def stateful_frame(spark: SparkSession, spec: JobSpec, layout: Layout) -> DataFrame:
    """The job's transformation applied to its valid input rows, each stream watermarked on its time column
    with the delay in force."""
    delay = spark_interval(spec.watermark_seconds)
    streams = {inp.name: valid_rows(raw_lines(spark, spec, layout, inp), inp, spec).withWatermark(inp.time_column,
                                                                                                  delay)
               for inp in spec.inputs}
    transformation.ship(spec, spark.sparkContext.environment)
    return transformation.apply(spec, streams)


def deadletter_frame(spark: SparkSession, spec: JobSpec, layout: Layout) -> DataFrame:
    frames = [invalid_rows(raw_lines(spark, spec, layout, inp), inp, spec) for inp in spec.inputs]
    return reduce(DataFrame.unionByName, frames)


BatchWriter = Callable[[DataFrame, int], None]  # a foreachBatch target


def _fenced(sink: DeltaSink, lease: HeldLease) -> BatchWriter:
    """Each batch checks the lease before it writes: a run that lost its lease writes nothing more."""
    def write(df: DataFrame, batch_id: int) -> None:
        lease.ensure_held()
        sink(df, batch_id)

    return write


def _stop_gracefully(queries: list[StreamingQuery], grace_seconds: float) -> bool:
    """Stop each query once the batch in flight has completed (no trigger active, or a new progress
    reported); past `grace_seconds`, stop it mid-batch (that batch re-runs at the next start, and Delta
    writes stay exactly-once). Returns True when a batch was interrupted."""
    deadline = time.monotonic() + grace_seconds
    interrupted = False
    for query in queries:
        seen = query.lastProgress
        while (query.isActive and query.status["isTriggerActive"] and query.lastProgress == seen
               and time.monotonic() < deadline):
            time.sleep(0.05)
        if query.isActive:
            interrupted = interrupted or (query.status["isTriggerActive"] and query.lastProgress == seen)
            query.stop()
    return interrupted


def _deliver(recorder: ProgressRecorder, on_progress: ProgressCallback | None) -> None:
    """Hand the new progress events to the callback, on the run's own thread; a failing callback is logged."""
    for progress in recorder.take_new():
        try:
            if on_progress is not None:
                on_progress(progress)
        except Exception as err:  # noqa: BLE001 - a reporting problem never stops the job
            log.warning("%s: progress callback failed for batch %s: %s", recorder.job, progress.get("batchId"), err)


NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SCHEDULER_POOL = "spark.scheduler.pool"


@contextlib.contextmanager
def _in_pool(spark: SparkSession, pool: str):
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
                checkpoint: str, no_data_batches: bool = True, pool: str = STATEFUL_POOL) -> StreamingQuery:
    """Start one of a job's queries (foreachBatch into `sink`, or Spark's `noop` without one) in `pool`."""
    conf = frame.sparkSession.conf
    # Read by Spark only when the checkpoint is new (afterwards the checkpoint's own value wins), and only as the
    # query starts (it runs on its own copy of the session): the caller's session gets its own value back, or a
    # job's count would leak into the next job, audit or query of that session.
    caller_partitions = conf.get(SHUFFLE_PARTITIONS)
    conf.set(SHUFFLE_PARTITIONS, str(spec.shuffle_partitions))
    writer = frame.writeStream.queryName(name).outputMode(output_mode).option("checkpointLocation", checkpoint)
    writer = writer.foreachBatch(sink) if sink is not None else writer.format("noop")
    if mode == "bounded":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=spec.trigger_interval)
    conf.set(NO_DATA_BATCHES, str(no_data_batches).lower())  # read once, when the query starts
    try:
        with _in_pool(frame.sparkSession, pool):
            return writer.start()
    finally:
        conf.unset(NO_DATA_BATCHES)
        conf.set(SHUFFLE_PARTITIONS, caller_partitions)


def run_job(
    spark: SparkSession,
    spec: JobSpec,
    layout: Layout,
    *,
    settings: Settings,
    mode: str = "bounded",
    run_id: str | None = None,
    dagster_run_id: str | None = None,
    runbook_id: str | None = None,
    max_seconds: float | None = None,
    poll_seconds: float = 2.0,
    dry_run: bool = False,
    on_progress: ProgressCallback | None = None,
) -> RunResult:
    """Run `spec` once: to the end of the available input (bounded) or until stopped (continuous), holding
    the job's lease. Raises LeaseHeldError while another run holds it, MaintenanceLockedError while a
    runbook other than `runbook_id` holds the maintenance lock, LeaseLostError when it was taken over, and
    ConfigError, before any query starts, when the transformation returns no stateful streaming frame.

    settings: the entry point's (the lease's timing, the progress buffer's groups).

    dry_run: Spark's `noop` sink instead of Delta (same queries and state; measures the job without output).
    on_progress: called on this thread with each progress event of the stateful query, within
    `poll_seconds` of its batch (a continuous run reports while it runs).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    run_id = run_id or uuid.uuid4().hex
    with control.acquire(layout, spec.name, run_id=run_id, dagster_run_id=dagster_run_id, runbook_id=runbook_id,
                         mode=mode, settings=settings.control) as lease:
        return _run_queries(spark, effective_spec(spec, layout), layout, lease, mode=mode, run_id=run_id,
                            max_seconds=max_seconds, poll_seconds=poll_seconds, dry_run=dry_run,
                            grace_seconds=settings.control.stop_grace_seconds, flush=settings.flush,
                            on_progress=on_progress)


def _run_queries(spark: SparkSession, spec: JobSpec, layout: Layout, lease: HeldLease, *, mode: str, run_id: str,
                 max_seconds: float | None, poll_seconds: float, dry_run: bool, grace_seconds: float,
                 flush: progress_table.FlushSettings, on_progress: ProgressCallback | None) -> RunResult:
    _ensure_landing(spec, layout)
    use_jvm = spark.conf.get(DELTA_WRITER_CONF, "delta-rs") == "spark"  # the session factory sets it
    checkpoint, dl_checkpoint = spec.checkpoint_path(layout), layout.deadletter_checkpoint(spec.name)
    sink = DeltaSink(spec.name, layout.table(spec.sink_table), checkpoint, spec.merge_keys, use_jvm=use_jvm,
                     sink=sink_state(layout, spec.name), row_key=spec.idempotent_key,
                     time_column=spec.output_time_column)
    dl_sink = DeltaSink(spec.name, layout.deadletter_table(spec.name), dl_checkpoint, tag_batch_id=True,
                        use_jvm=use_jvm)
    names = {spec.name, deadletter_query_name(spec.name)}
    gap = _note_progress_gaps(layout, spec.name, run_id, (checkpoint, dl_checkpoint))
    recorder = ProgressRecorder(layout, spec.name, run_id, names, flush)
    spark.streams.addListener(recorder)
    queries: list[StreamingQuery] = []
    started = time.monotonic()
    stop_reason, interrupted = None, False
    try:
        frame = stateful_frame(spark, spec, layout)
        plan = stateful_plan(frame, spec)
        check_output_columns(spec, frame.columns)
        if mode == "bounded" and plan.processing_time:
            log.info("%s: %s expire state by processing time; no empty batches in bounded runs (jobs.runtime.plan)",
                     spec.name, ", ".join(plan.processing_time))
        queries.append(start_query(frame, spec.name, None if dry_run else _fenced(sink, lease), mode, spec.output_mode,
                              spec, checkpoint, no_data_batches=not (mode == "bounded" and plan.processing_time)))
        queries.append(start_query(deadletter_frame(spark, spec, layout), deadletter_query_name(spec.name),
                              None if dry_run else _fenced(dl_sink, lease), mode, "append", spec, dl_checkpoint,
                              pool=DEADLETTER_POOL))
        while any(q.isActive for q in queries) and not any(q.exception() for q in queries if not q.isActive):
            for query in queries:
                if query.isActive:
                    with contextlib.suppress(StreamingQueryException):  # reported below, as QueryFailed
                        query.awaitTermination(poll_seconds)
            _deliver(recorder, on_progress)
            lease.ensure_held()  # lost: stop at once (finally); this run may no longer write
            request = lease.stop_request()
            if request is not None:
                stop_reason, grace = "stop_request", request.grace_seconds
            elif mode == "continuous" and max_seconds is not None and time.monotonic() - started > max_seconds:
                stop_reason, grace = "max_seconds", grace_seconds
            if stop_reason:
                interrupted = _stop_gracefully(queries, grace)
                break
        lease.ensure_held()
        for query, query_checkpoint in zip(queries, (checkpoint, dl_checkpoint)):
            if query.exception() is not None:
                raise query_failed(query.exception(), layout=layout, job=spec.name, query=query.name,
                                   checkpoint=query_checkpoint, run_id=run_id) from query.exception()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        for query, query_checkpoint in zip(queries, (checkpoint, dl_checkpoint)):
            recorder.wait_for(query, query_checkpoint)
        _settle_state_stores(spark)
        spark.streams.removeListener(recorder)
        recorder.close()
        _deliver(recorder, on_progress)
    if stop_reason == "stop_request":
        actions.record(layout, spec.name, "stop", "done", actor=request.actor, run_id=run_id,
                       dagster_run_id=lease.lease.dagster_run_id, runbook_id=lease.lease.runbook_id,
                       details={"reason": request.reason, "grace_seconds": request.grace_seconds,
                                "interrupted_batch": interrupted})
    result = _result(spec, layout, run_id, queries[0], recorder, sink, dl_sink)
    return replace(result, stop_reason=stop_reason, hard_stopped=interrupted, progress_gap_batches=gap)


def _settle_state_stores(spark: SparkSession) -> None:
    """Leave no writer of this JVM in the run's checkpoints before the lease is released.

    A stopped query's state store providers stay loaded in the JVM that ran its tasks, and Spark's state
    store maintenance thread later uploads a RocksDB snapshot (`N.zip`, new SSTs) into the checkpoint and
    only then unloads them: seconds after the query stopped, when a runbook may already be archiving or
    restoring that checkpoint (measured: a refused runbook found 4 files more than before it ran). With no
    query of this session active, the providers are unloaded, so maintenance has nothing of theirs left to
    do. (Stopping the maintenance pool instead deadlocks: its threads wait for the lock the stop holds, for
    the 300 s shutdown timeout.) Snapshots are an optimisation: the changelog files committed with each
    batch are what a restart needs. In local mode the
    executors are this JVM; on a cluster the executors' own maintenance is not reachable from the driver,
    and a run's process ends with its query there (Dagster runs one process per run).
    """
    if spark.streams.active:
        return
    package = spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state
    stores = getattr(getattr(package, "StateStore$"), "MODULE$")  # the Scala object itself
    stores.unloadAll()


def _note_progress_gaps(layout: Layout, job: str, run_id: str, checkpoints: tuple[str, ...]) -> int:
    """Batches an earlier run committed without a progress row (its buffer was lost in a crash, or could not
    be written): logged, journaled as `progress_gap` in `actions`, and counted in the run result."""
    missing = 0
    for path in checkpoints:
        try:
            checkpoint = Checkpoint.open(path)
            latest, query_id = checkpoint.latest_committed_batch(), checkpoint.query_id()
        except (StateOpsError, OSError, ValueError, KeyError):
            continue  # a new checkpoint: nothing committed before this run
        gap = progress_table.unrecorded_batches(layout, query_id, latest)
        if gap:
            log.warning("%s: batches %d..%d of %s have no progress row (an earlier run ended before writing them)",
                        job, gap[0], gap[-1], path)
            actions.record(layout, job, "progress_gap", "noted", actor=control.default_actor(), run_id=run_id,
                           details={"checkpoint": path, "query_id": query_id, "first_batch": gap[0],
                                    "last_batch": gap[-1], "batches": len(gap)})
            missing += len(gap)
    return missing


def _result(spec: JobSpec, layout: Layout, run_id: str, main: StreamingQuery, recorder: ProgressRecorder,
            sink: DeltaSink, dl_sink: DeltaSink) -> RunResult:
    totals = recorder.totals
    last = totals.last
    dl_table = open_table(layout.deadletter_table(spec.name))
    out_table = open_table(layout.table(spec.sink_table))
    return RunResult(
        job=spec.name,
        run_id=run_id,
        query_id=str(main.id),
        batches=len(totals.durations_ms),
        input_rows=totals.input_rows,
        output_rows=sink.rows_written,
        deadletter_rows=dl_sink.rows_written,
        deadletter_total=dl_table.count() if dl_table is not None else 0,
        watermark=last.get("eventTime", {}).get("watermark"),
        state_operators=progress_table.operator_metrics(last),
        batch_durations_ms=list(totals.durations_ms),
        delta_version=out_table.version() if out_table is not None else None,
        batches_skipped=sink.batches_skipped,
        progress_write_failures=recorder.write_failures,
    )
