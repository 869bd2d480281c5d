"""The run's progress listener: every progress event of a job's two queries into the `progress` ops table in
small groups (each with its batch's time in parts, stateops.profile.parts), the stateful query's totals for the
run result, its new events for the caller's callback (handed over on the run's own thread), and the idle reports a
runbook's verification reads."""
from __future__ import annotations

import logging
import threading
import time
from array import array
from typing import Any, Callable

from pyspark.sql.streaming import StreamingQuery

from stateops import progress as progress_table
from stateops.errors import StateOpsError, first_line
from stateops.layout import Layout
from stateops.profile.parts import CORES, PARTS, Laps, attribute
from stateops.checkpoints.checkpoint import Checkpoint

from stateops.jobs.runtime.query_events import JsonEvents

log = logging.getLogger(__name__)

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
                 flush: progress_table.FlushSettings, rows_tracked: bool = True,
                 guard: Callable[[], None] | None = None, laps: Laps | None = None, cores: int = 1):
        self.layout, self.job, self.run_id, self.query_names = layout, job, run_id, query_names
        self.rows_tracked = rows_tracked  # False: the state stores do not count rows (session.TRACK_ROWS)
        self.totals = RunTotals()
        # the batch writer's stopwatch and the cores its tasks share: each batch's parts (stateops.profile.parts)
        self.laps, self.cores = laps, cores
        self._reported: dict[str, int] = {}          # Spark query id -> its newest batch reported in this run
        # `guard` (the run's lease check) before every write: a holder that resumes after a takeover writes no row
        self.guard = guard
        self.buffer = progress_table.ProgressBuffer(layout, flush, name=job, guard=guard)
        self._silenced = False
        # re-entrant: an idle report's lease check (`guard`, under this lock) may be what finds the lease lost, and
        # the loss's at-once callbacks then silence this recorder on the same thread (a plain lock hung the run)
        self._lock = threading.RLock()
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
        if not self.rows_tracked:
            progress_table.rows_untracked(progress)
        try:  # on Spark's listener thread an exception would vanish
            timed = self.laps is not None and progress.get("name") == self.job  # the query the writer runs
            laps = self.laps.take(progress.get("batchId")) if timed else None
            progress[PARTS] = attribute(progress, laps, self.cores)  # the observation's too (the callback's event)
            progress[CORES] = self.cores
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
            if self._idle == self._idle_written or self._silenced:
                return
            try:
                if self.guard is not None:
                    self.guard()
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

    def silence(self) -> None:
        """Record nothing more in the ops tables (the run lost its lease): progress rows and idle reports."""
        with self._lock:
            self._silenced = True
        self.buffer.silence("the run lost its lease and writes nothing more")

    def close(self, write: bool = True) -> None:
        self.buffer.close(write)

    def wait_for(self, query: StreamingQuery, checkpoint: str, timeout: float = 10.0) -> None:
        """Progress events arrive asynchronously; wait until the event of the query's last batch was recorded.
        A trigger that found no data leaves, as the query's last progress, the batch it would have run next:
        that batch never ran (no offsets entry in the checkpoint) and no event for it ever comes (measured on
        Spark 4.2: a run with nothing new waited the whole timeout for each of its two queries, 20 s), so the
        last batch is the newest progress that names a planned batch. A checkpoint out of reach (a run stopping
        because its store is cut off) leaves nothing to wait for: its progress rows cannot be written either, and
        the run must end with the store's failure, not a second one on its way out."""
        try:
            ran = next((p for p in reversed(query.recentProgress)
                        if p.get("numInputRows") or Checkpoint(checkpoint).planned(p["batchId"])), None)
        except Exception as err:  # noqa: BLE001 - s3fs raises botocore's connection errors as they are
            log.warning("%s: could not read %s/offsets (%s): not waiting for its last progress event", self.job,
                        checkpoint, first_line(err))
            return
        if ran is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._reported.get(ran["id"], -1) >= ran["batchId"]:
                    return
            time.sleep(0.05)


def deliver(recorder: ProgressRecorder, on_progress: ProgressCallback | None) -> None:
    """Hand the new progress events to the callback, on the run's own thread; a failing callback is logged."""
    for progress in recorder.take_new():
        try:
            if on_progress is not None:
                on_progress(progress)
        except Exception as err:  # noqa: BLE001 - a reporting problem never stops the job
            log.warning("%s: progress callback failed for batch %s: %s", recorder.job, progress.get("batchId"), err)
