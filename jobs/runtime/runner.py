"""The one place that starts and stops a job's queries, and reads the job's effective settings: a run is
started (stateops.jobs.runtime.start), polled, stopped and settled (stateops.jobs.runtime.stop), its progress recorded as it comes
(stateops.jobs.runtime.listener); this module holds the order and the run's result. A run's checks (placement, the
query and its fit to the state, the progress gap) are made first as a plan (stateops.jobs.runtime.run_plan): a run
refused there has retired, journaled and started nothing.

A job runs as one query (checkpoint `checkpoints/<job>`: the job's transformation over its valid, watermarked input
rows; refused before it starts unless it is a stateful streaming frame, stateops.jobs.runtime.plan). Its scan reads
and parses each line once; the rows it rejects (parsing, a time too far ahead) are collected in the same scan and
written to the dead-letter table by the batch's writer (stateops.jobs.runtime.deadletters). A home where StateOps
ran a second, dead-letter query has it retired at the run's start (stateops.jobs.runtime.retirement). Every progress
event goes to the `progress` ops table in small groups
(stateops.progress.ProgressBuffer: at most STATEOPS_PROGRESS_FLUSH_SECONDS late, all written when the run
ends; rows that cannot be written are counted and logged, and never stop the query), and to the caller's
progress callback, if any. A run notes, at its start, batches an earlier run
committed without a progress row (a crash lost its buffer). The query is polled with a short awaitTermination
so an interrupt (a Dagster run termination) stops it within seconds, and it is always stopped in
`finally`. A failed query raises QueryFailed: one line, with the full trace in the run's log.

One writer per job: a run holds the job's lease (stateops.control) from before its first query starts
until after its last one stopped; every batch checks it before writing (a run whose lease was taken
over stops at once). Between batches the run polls its stop request and stops gracefully: the batch in
flight completes, a hard stop comes only after the request's grace period. The overrides in force
(watermark delay, shuffle partitions) are applied when the run starts.

The query runs in the fair-scheduler pool `stateful`, which gets a free core first (jobs/runtime/scheduler_pools.xml).
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from stateops import actions, control
from stateops import progress as progress_table
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import HeldLease
from stateops.control.fence.writes import fence_run
from stateops.delta import open_table
from stateops.layout import Layout
from stateops.profile.parts import DEAD_LETTERS, PLAN_RUN, SINK_WRITE, Laps
from stateops.settings import Settings
from stateops.sinkstate import sink_state

from stateops.jobs.definition.settings import effective_spec
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime import compatibility
from stateops.jobs.runtime.deadletters import DeadLetterWriter
from stateops.jobs.runtime.failures import QueryFailed, query_failed
from stateops.jobs.runtime.listener import ProgressCallback, ProgressRecorder
from stateops.jobs.runtime.retirement import retire_deadletter_query
from stateops.jobs.runtime.result import MODES, RunResult
from stateops.jobs.runtime.run_plan import ProgressGap, plan_run
from stateops.jobs.runtime.session import session_of, state_rows_tracked
from stateops.jobs.runtime.sink import DeltaSink
from stateops.jobs.runtime.start import ensure_landing, start_query, state_conf
from stateops.jobs.runtime.stop import poll, stop_and_settle

log = logging.getLogger(__name__)

TRANSIENT_ATTEMPTS = 3          # a run starts its queries at most this often after transient failures
TRANSIENT_PAUSE_SECONDS = 10.0  # before the next attempt, times the attempts so far


def run_job(
    spark: SparkSession | Callable[[], SparkSession],
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
    ConfigError, before any query starts, when the transformation returns no stateful streaming frame, and
    StateIncompatible when the query no longer fits the state in its checkpoint (nothing written).

    spark: a session, or a factory called once the lease is held: a JVM starting under load takes minutes, and a
    lease taken only after it would leave a stale holder's job without a writer all that time (the fleet soak
    measured takeovers of 7 to 19 minutes that way).
    settings: the entry point's (the lease's timing, the progress buffer's groups).
    A query failing for a transient cause (stateops.jobs.runtime.failures.TRANSIENT) is started again in this run,
    up to TRANSIENT_ATTEMPTS times in all, unless a stop was requested meanwhile; the result counts the last attempt.

    dry_run: Spark's `noop` sink instead of Delta (same query and state; measures the job without output); its dead
    letters are collected and discarded, and an old dead-letter query is not retired.
    on_progress: called on this thread with each progress event of the stateful query, within
    `poll_seconds` of its batch (a continuous run reports while it runs).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    spec.require_extras()
    run_id = run_id or uuid.uuid4().hex
    with control.acquire(layout, spec.name, run_id=run_id, dagster_run_id=dagster_run_id, runbook_id=runbook_id,
                         mode=mode, settings=settings.control) as lease:
        in_force = effective_spec(spec, layout)  # a bad override refused before a JVM starts
        session = session_of(spark)
        attempt = 1
        while True:
            try:
                return _run_queries(session, in_force, layout, lease, mode=mode, run_id=run_id,
                                    max_seconds=max_seconds, poll_seconds=poll_seconds, dry_run=dry_run,
                                    grace_seconds=settings.control.stop_grace_seconds, flush=settings.flush,
                                    on_progress=on_progress)
            except QueryFailed as failed:
                if not failed.transient or attempt == TRANSIENT_ATTEMPTS or lease.stop_request() is not None:
                    raise  # a run asked to stop does not start its queries again
                _retrying(layout, spec.name, lease, run_id, failed, attempt)
                attempt += 1


def _retrying(layout: Layout, job: str, lease: HeldLease, run_id: str, failed: QueryFailed, attempt: int) -> None:
    """A transient failure (stateops.jobs.runtime.failures.TRANSIENT): journaled as `query_retry`, then the queries
    start again in this run, after a pause, from the last committed batch (the lease and the JVM kept)."""
    pause = TRANSIENT_PAUSE_SECONDS * attempt
    log.warning("%s: %s; starting the queries again in %g s (attempt %d of %d)", job, failed, pause, attempt + 1,
                TRANSIENT_ATTEMPTS)
    actions.record(layout, job, actions.QUERY_RETRY, "noted", actor=control.default_actor(), run_id=run_id,
                   dagster_run_id=lease.lease.dagster_run_id, runbook_id=lease.lease.runbook_id,
                   details={"attempt": attempt, "batch": failed.batch_id, "query": failed.query,
                            "error_class": failed.error_class, "message": failed.message, "pause_seconds": pause})
    time.sleep(pause)
    lease.ensure_held()


def _run_queries(spark: SparkSession, spec: JobSpec, layout: Layout, lease: HeldLease, *, mode: str, run_id: str,
                 max_seconds: float | None, poll_seconds: float, dry_run: bool, grace_seconds: float,
                 flush: progress_table.FlushSettings, on_progress: ProgressCallback | None) -> RunResult:
    """The run's checks first as a plan (stateops.jobs.runtime.run_plan), then acted on: start
    (stateops.jobs.runtime.start), poll until done or stopped, stop and settle (stateops.jobs.runtime.stop)."""
    ensure_landing(spec, layout)
    planned = plan_run(spark, spec, layout, by_runbook=lease.lease.runbook_id is not None, dry_run=dry_run)
    fit = _require_fit(spec, layout, planned.fit, run_id, lease)
    checkpoint, plan = planned.checkpoint, planned.stateful
    sink = DeltaSink(spec.name, spec.sink_path(layout), checkpoint, spec.merge_keys, use_jvm=planned.use_jvm,
                     sink=sink_state(layout, spec.name), row_key=spec.idempotent_key,
                     time_column=spec.output_time_column)
    judged = retire_deadletter_query(spark, spec, layout, run_id=run_id, lease=lease) if planned.retire else None
    deadletters = DeadLetterWriter(spark, spec.name, layout.deadletter_table(spec.name), planned.collectors,
                                   sink.app_id, use_jvm=planned.use_jvm, judged=judged)
    gap = _note_progress_gap(layout, spec.name, run_id, planned.gap)
    recorder = ProgressRecorder(layout, spec.name, run_id, {spec.name}, flush,
                                rows_tracked=state_rows_tracked(spark), guard=lease.ensure_held, laps=sink.laps,
                                cores=spark.sparkContext.defaultParallelism)
    spark.streams.addListener(recorder)
    queries: list[StreamingQuery] = []
    # the moment the loss is found, no write of the JVM's under the job's folders, a batch write under way ended, no
    # progress row or idle report; then no batch (the query stops): stateops.control.fence.writes
    (writer,) = fence_run(spark, lease, (_batch_writer(sink, deadletters),),
                          [checkpoint, sink.table_uri, deadletters.table_uri], silence=recorder.silence,
                          stop=lambda: [query.stop() for query in list(queries) if query.isActive])
    started = time.monotonic()
    frame = planned.frame
    try:
        if mode == "bounded" and plan.processing_time:
            log.info("%s: %s expire state by processing time; no empty batches in bounded runs (stateops.jobs.runtime.plan)",
                     spec.name, ", ".join(plan.processing_time))
        batch_writer = _dry_writer(deadletters, sink.laps) if dry_run else writer
        queries.append(start_query(frame, spec.name, batch_writer, mode, spec.output_mode, spec, checkpoint,
                                   no_data_batches=not (mode == "bounded" and plan.processing_time),
                                   state_conf=state_conf(spark, spec, layout)))
        compatibility.remember_meaning(layout, spec.name, str(queries[0].id), fit, spec.watermark_delay)
        def deciding() -> None:  # no batch planned after the decision to stop writes (Fenced.stop_after)
            writer.stop_after(_planned(checkpoint))

        stopped = poll(queries, lease, recorder, on_progress, mode=mode, started=started, max_seconds=max_seconds,
                       poll_seconds=poll_seconds, grace_seconds=grace_seconds, deciding=deciding)
        lease.ensure_held()
        for query in queries:
            if query.exception() is not None and writer.refused is None:  # refused: the stop's own doing
                lease.ensure_not_taken_over()  # a commit point refused by a run that took the lease over: say that
                raise query_failed(query.exception(), layout=layout, job=spec.name, query=query.name,
                                   checkpoint=checkpoint, run_id=run_id) from query.exception()
    finally:
        stop_and_settle(spark, queries, (checkpoint,), recorder, on_progress, lost=lease.lost is not None)
    if stopped.reason == "stop_request":
        request = stopped.request
        actions.record(layout, spec.name, "stop", "done", actor=request.actor, run_id=run_id,
                       dagster_run_id=lease.lease.dagster_run_id, runbook_id=lease.lease.runbook_id,
                       details={"reason": request.reason, "grace_seconds": request.grace_seconds,
                                "interrupted_batch": stopped.interrupted})
    result = _result(spec, layout, run_id, queries[0], recorder, sink, deadletters)
    return replace(result, stop_reason=stopped.reason, hard_stopped=stopped.interrupted, progress_gap_batches=gap)


def _require_fit(spec: JobSpec, layout: Layout, fit: compatibility.StateFit, run_id: str,
                 lease: HeldLease) -> compatibility.StateFit:
    """Refuse the run before anything is done when the query no longer fits its checkpoint's state
    (stateops.jobs.runtime.compatibility), journaled as `state_check`/`refused` so the health sensor alerts
    instead of restarting it; a check that cannot decide leaves it to Spark's first batch."""
    if fit.status == compatibility.UNDECIDED:
        log.warning("%s", fit.line)
    if fit.status != compatibility.REFUSED:
        return fit
    actions.record(layout, spec.name, actions.STATE_CHECK, "refused", actor=control.default_actor(), run_id=run_id,
                   dagster_run_id=lease.lease.dagster_run_id, runbook_id=lease.lease.runbook_id,
                   details={"error_class": fit.error_class, "operator": fit.operator, "change": fit.change,
                            "fix": compatibility.rebuild_command(spec.name), "rebuild": fit.rebuild})
    raise compatibility.StateIncompatible(fit)


def _batch_writer(sink: DeltaSink, deadletters: DeadLetterWriter):
    """A batch's writes: its output (which runs the batch's plan, written or skipped), then its dead letters, which
    that run collected (stateops.jobs.runtime.deadletters; what was collected before it, discarded). Each step
    timed on the sink's stopwatch (stateops.profile.parts: the sink laps the plan's run itself)."""
    laps = sink.laps

    def write(df, batch_id: int) -> None:
        laps.begin(batch_id)
        deadletters.discard()
        laps.lap(DEAD_LETTERS)
        sink(df, batch_id)
        laps.lap(SINK_WRITE)
        deadletters(df, batch_id)
        laps.lap(DEAD_LETTERS)
        laps.end()
    return write


def _dry_writer(deadletters: DeadLetterWriter, laps: Laps):
    """A dry run's batch: its plan run into Spark's `noop` sink, its dead letters collected and discarded."""
    def write(df, batch_id: int) -> None:
        laps.begin(batch_id)
        df.write.format("noop").mode("overwrite").save()
        laps.lap(PLAN_RUN)
        deadletters.discard()
        laps.lap(DEAD_LETTERS)
        laps.end()
    return write


def _planned(checkpoint: str) -> int:
    """The newest batch the query has planned (its offset log), -1 before the first."""
    try:
        return (Checkpoint(checkpoint).offset_batches() or [-1])[-1]
    except FileNotFoundError:
        return -1


def _note_progress_gap(layout: Layout, job: str, run_id: str, gap: ProgressGap | None) -> int:
    """Batches an earlier run committed without a progress row (its buffer was lost in a crash, or could not
    be written): logged, journaled as `progress_gap` in `actions`, and counted in the run result."""
    if gap is None:
        return 0
    first, last = gap.batches[0], gap.batches[-1]
    log.warning("%s: batches %d..%d of %s have no progress row (an earlier run ended before writing them)",
                job, first, last, gap.checkpoint)
    actions.record(layout, job, "progress_gap", "noted", actor=control.default_actor(), run_id=run_id,
                   details={"checkpoint": gap.checkpoint, "query_id": gap.query_id, "first_batch": first,
                            "last_batch": last, "batches": len(gap.batches)})
    return len(gap.batches)


def _result(spec: JobSpec, layout: Layout, run_id: str, main: StreamingQuery, recorder: ProgressRecorder,
            sink: DeltaSink, deadletters: DeadLetterWriter) -> RunResult:
    totals = recorder.totals
    last = totals.last
    dl_table = open_table(layout.deadletter_table(spec.name))
    out_table = open_table(spec.sink_path(layout))
    return RunResult(
        job=spec.name,
        run_id=run_id,
        query_id=str(main.id),
        batches=len(totals.durations_ms),
        input_rows=totals.input_rows,
        output_rows=sink.rows_written,
        deadletter_rows=deadletters.rows_written,
        deadletter_total=dl_table.count() if dl_table is not None else 0,
        watermark=last.get("eventTime", {}).get("watermark"),
        state_operators=progress_table.operator_metrics(last),
        batch_durations_ms=list(totals.durations_ms),
        delta_version=out_table.version() if out_table is not None else None,
        batches_skipped=sink.batches_skipped,
        progress_write_failures=recorder.write_failures,
    )
