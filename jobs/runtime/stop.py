"""Ending a run: between batches, polling for the reasons to stop (the queries ended or failed, the lease was
lost, a stop request, a continuous run's time limit) and stopping gracefully; then, whatever happened, stopping
every query, waiting for the last progress events, and leaving no writer of this JVM in the run's checkpoints
before the lease is released."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from stateops.control import HeldLease

from stateops.jobs.runtime.listener import ProgressCallback, ProgressRecorder, deliver


@dataclass(frozen=True)
class Stopped:
    """Why a run stopped before its input ran out (None: it did not), the stop request it honoured, and
    whether a batch was still running when the grace period ran out."""

    reason: str | None = None  # stop_request | max_seconds
    request: Any = None
    interrupted: bool = False


def poll(queries: list[StreamingQuery], lease: HeldLease, recorder: ProgressRecorder,
         on_progress: ProgressCallback | None, *, mode: str, started: float, max_seconds: float | None,
         poll_seconds: float, grace_seconds: float, deciding: Callable[[], None]) -> Stopped:
    """Wait for the queries with a short awaitTermination (an interrupt, a Dagster run's termination, stops them
    within seconds), handing progress to the callback, checking the lease (lost: stop at once, raised) and the
    stop request between polls; returns when the queries ended or failed, or after a graceful stop. `started`:
    when the run started (time.monotonic), from which a continuous run's `max_seconds` count. `deciding()` is
    called the moment the run decides to stop, before the graceful stop (the runner's writers then refuse the
    batches planned after it: writes.Fenced.stop_after)."""
    while any(q.isActive for q in queries) and not any(q.exception() for q in queries if not q.isActive):
        for query in queries:
            if query.isActive:
                with contextlib.suppress(StreamingQueryException):  # reported by the runner, as QueryFailed
                    query.awaitTermination(poll_seconds)
        deliver(recorder, on_progress)
        lease.ensure_held()  # lost: stop at once (the runner's finally); this run may no longer write
        request = lease.stop_request()
        if request is not None:
            deciding()
            return Stopped("stop_request", request, stop_gracefully(queries, request.grace_seconds))
        if mode == "continuous" and max_seconds is not None and time.monotonic() - started > max_seconds:
            deciding()
            return Stopped("max_seconds", None, stop_gracefully(queries, grace_seconds))
    return Stopped()


def stop_gracefully(queries: list[StreamingQuery], grace_seconds: float) -> bool:
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


def stop_and_settle(spark: SparkSession, queries: list[StreamingQuery], checkpoints: tuple[str, ...],
                    recorder: ProgressRecorder, on_progress: ProgressCallback | None, lost: bool = False) -> None:
    """Stop what still runs, record the last progress events, settle the state stores, write the progress
    buffer and hand the last events to the callback. A run that `lost` its lease writes nothing more: its
    buffered progress rows are dropped (counted; the next run notes the gap)."""
    for query in queries:
        if query.isActive:
            query.stop()
    for query, query_checkpoint in zip(queries, checkpoints):
        recorder.wait_for(query, query_checkpoint)
    settle_state_stores(spark)
    spark.streams.removeListener(recorder)
    recorder.close(write=not lost)
    deliver(recorder, on_progress)


def settle_state_stores(spark: SparkSession) -> None:
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
