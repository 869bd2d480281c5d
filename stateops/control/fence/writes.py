"""A run's writes behind its lease: each batch checks the lease before it writes, and the moment the lease turns out
lost, in this order, before the loss is said: no write of the JVM's under the job's folders (revoked), a batch write
already under way ended (waited for, bounded), the run's own ops rows silenced; then, on a thread of their own, its
queries stopped."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable, Sequence

from stateops.control.fence import revocations
from stateops.storage.paths import OTHER, kind
from stateops.control.fence.holder import HeldLease

BatchWriter = Callable[[Any, int], None]  # a foreachBatch target: (DataFrame, batch id)
# How long a run that found its lease lost waits for a batch write under way (each query's) before it says it writes
# nothing more: a batch write is seconds; one held longer (a store out of reach) is not waited for.
SETTLE_SECONDS = 30.0


class RunStopping(Exception):
    """A batch planned after its run decided to stop: not written (the next run runs it)."""


class Fenced:
    """A query's foreachBatch target: each batch checks the lease before it writes (a run that lost its lease
    writes nothing more), and a run that finds its lease lost can wait for a batch write already under way
    (`settle`) before it says it writes nothing more: that write was allowed, and it ends (committed, or refused
    at its Delta commit once the job's folders are revoked) instead of landing after the line.

    A run that decides to stop (a stop request, its time limit) lets the batches planned until then complete and
    no later one: `stop_after(N)` refuses batch N+1 on, before it writes anything (RunStopping: its query ends, the
    batch stays planned without a commit, and the next run runs it). Without it, a batch the trigger started between
    the decision and the query's stop could commit its output. `refused` is the batch refused, if any."""

    def __init__(self, sink: BatchWriter, lease: HeldLease):
        self.sink, self.lease = sink, lease
        self.refused: int | None = None
        self._last: int | None = None
        self._writing = threading.RLock()  # re-entrant: the fence may find the loss on the writing thread itself

    def stop_after(self, batch_id: int) -> None:
        """Write no batch after `batch_id` (-1: none at all)."""
        self._last = batch_id

    def __call__(self, df: Any, batch_id: int) -> None:
        with self._writing:
            if self._last is not None and batch_id > self._last:
                self.refused = batch_id
                raise RunStopping(f"batch {batch_id} was planned after the run decided to stop (after batch "
                                  f"{self._last}): not written; the next run runs it")
            self.lease.ensure_held()
            self.sink(df, batch_id)

    def settle(self, timeout: float) -> bool:
        """Wait up to `timeout` s for a batch write under way to end; False: it still runs (the store is out of
        reach or that slow)."""
        if not self._writing.acquire(timeout=timeout):
            return False
        self._writing.release()
        return True


log = logging.getLogger(__name__)


def not_create_once(folders: Iterable[str]) -> str | None:
    """One line when a folder's commit points cannot be created once (StateOps' create-once writers know local disk
    and S3 through S3A; on any other filesystem Spark's and Delta's writers check, then rename: jvm/fence's
    PendingFile.supports), else None."""
    other = next((folder for folder in folders if kind(folder) == OTHER), None)
    if other is None:
        return None
    return (f"the commit points under {other} cannot be created once (StateOps' create-once writers know local disk "
            "and S3): a driver that lost its lease while frozen could still replace one of the live run's; the lease "
            "alone stops it at its next check")


def fence_run(spark: Any, lease: HeldLease, sinks: Sequence[BatchWriter], folders: Sequence[str], *,
              silence: Callable[[], None], stop: Callable[[], None]) -> tuple[Fenced, ...]:
    """Put a run's sinks behind `lease` (one Fenced each, returned in order): its `folders` restored in the JVM (it
    holds the lease), and what a loss does, in the module doc's order (`silence` the run's own rows, `stop` its
    queries)."""
    writers = tuple(Fenced(sink, lease) for sink in sinks)
    weaker = not_create_once(folders)
    if weaker:
        log.warning("%s: %s", lease.lease.job, weaker)
    revocations.restore(spark, folders)
    lease.when_lost(lambda: revocations.revoke(spark, folders), at_once=True)
    lease.when_lost(lambda: [writer.settle(SETTLE_SECONDS) for writer in writers], at_once=True)
    lease.when_lost(silence, at_once=True)
    lease.when_lost(stop)
    return writers
