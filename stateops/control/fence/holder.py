"""Holding a job's lease: take it (with the maintenance lock checked in the same critical section),
heartbeat it from a background thread, fence writes with it, release it. A holder learns it lost the lease at a
heartbeat or a fence check, and then writes nothing more: the callbacks it registered with `at_once` (the runner
revokes its folders in the JVM and silences its progress rows) run on the thread that found the loss, before the
loss is logged, so that nothing is issued after the line says so; the others (the runner stops its queries) then
run on a thread of their own (the fence runs on a query's own thread, which a callback stopping that query would
wait for).

Taking it: under the job's control lock, refuse while a runbook other than the caller's holds the
maintenance lock, refuse while a live lease exists, take over a stale one (journaled as
`lease_takeover` in `actions`, with the previous holder and why it was stale), with the next epoch (lease.py).

Held or lost, judged by the epochs (`judge`) at each heartbeat and fence check: a newer epoch than the holder's own
taken since, or a record naming another lease of an epoch not older than its own, and the holder has lost the right
to write: `lost` is set and `ensure_held()` raises LeaseLostError; the runner then stops its queries. A record
naming another lease of an older epoch is a stale holder's late write: the live holder keeps its lease and its next
heartbeat writes its own record over it, so a holder that thaws after a takeover never evicts the taker. Every
write of the record is conditional on the version read with it (the storage layer's `write_if`: refused by the
server on S3, so a frozen holder's late write does not land there at all).
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import replace
from datetime import datetime, timezone

from stateops import actions
from stateops.errors import OperationFailed, StateOpsError
from stateops.faults import fault_point, fence_off
from stateops.layout import Layout

from stateops.control.fence import lease as leases
from stateops.control import maintenance, stop
from stateops.control.fence.lease import EPOCH, Lease, LeaseHeldError, LeaseLostError
from stateops.control.maintenance import MaintenanceLockedError
from stateops.control.process import default_actor
from stateops.storage.holders import HOST, start_ticks
from stateops.clock import now_iso
from stateops.control.settings import ControlSettings
from stateops.control.store import ControlStore

log = logging.getLogger(__name__)

HELD, STALE_WRITE, LOST = "held", "a stale holder's late write", "lost"


def judge(mine: Lease, record: Lease | None, newest: int) -> str:
    """HELD, STALE_WRITE (the record is an older holder's, written late: still held) or LOST, for `mine` given the
    lease record and the newest epoch taken."""
    if newest > mine.epoch or record is None:
        return LOST
    if record.lease_id == mine.lease_id:
        return HELD
    return STALE_WRITE if record.epoch < mine.epoch else LOST


def _blocker(store: ControlStore, runbook_id: str | None,
             settings: ControlSettings) -> tuple[StateOpsError | None, Lease | None]:
    """(why a run may not start, the stale lease it would take over)."""
    lock = maintenance.read(store)
    if lock is not None and lock.runbook_id != runbook_id:
        return MaintenanceLockedError(lock), None
    holder = leases.read(store)
    if holder is None:
        return None, None
    if holder.stale_reason(settings) is None and not fence_off():
        return LeaseHeldError(holder), None
    return None, holder


def start_blocker(layout: Layout, job: str, *, settings: ControlSettings,
                  runbook_id: str | None = None) -> StateOpsError | None:
    """Why a run of `job` could not start now (maintenance lock, live lease), or None. A cheap read without
    the lock, for schedules and for failing before a JVM starts; `acquire` decides atomically."""
    return _blocker(ControlStore(layout, job), runbook_id, settings)[0]


def check_can_start(layout: Layout, job: str, *, settings: ControlSettings,
                    runbook_id: str | None = None) -> None:
    blocker = start_blocker(layout, job, runbook_id=runbook_id, settings=settings)
    if blocker is not None:
        raise blocker


class HeldLease:
    """A lease this process holds. Use as a context manager, or call release()."""

    def __init__(self, layout: Layout, store: ControlStore, lease: Lease, settings: ControlSettings):
        self.layout, self.store, self.lease, self.settings = layout, store, lease, settings
        self.lost: LeaseLostError | None = None
        self._on_lost: list = []
        self._at_once: list = []
        self._beats = 0
        self._lost_guard = threading.Lock()
        self._calling_back: threading.Thread | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"stateops-lease-{lease.job}", daemon=True)

    def __enter__(self) -> "HeldLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _beat(self) -> None:
        while not self._done.wait(self.settings.heartbeat_seconds):
            try:
                if not self.heartbeat():
                    return
            except (OSError, OperationFailed) as err:
                # keep trying: the next beat or the fence finds a takeover (a control lock taken over while this
                # process was frozen inside a beat is one: its write was refused; a store out of reach fails the
                # beat, ControlStorageError or the storage layer's own failure, and the thread goes on beating)
                log.warning("%s: lease heartbeat failed: %s", self.lease.job, err)

    def when_lost(self, callback, *, at_once: bool = False) -> None:
        """Call `callback()` once when this lease turns out lost: `at_once` on the thread that finds out, before the
        loss is logged (it stops writes, and must be quick or bounded), else on a thread of its own afterwards."""
        (self._at_once if at_once else self._on_lost).append(callback)

    def _found_lost(self, holder: Lease | None, taken_by: str | None = None) -> None:
        with self._lost_guard:
            if self.lost is not None:
                return
            self.lost = LeaseLostError(self.lease, holder, taken_by=taken_by)
        found = datetime.now(timezone.utc)
        self._run(self._at_once)
        log.warning("%s: run %s lost its lease at %s (%s); writes stopped at %s, writing nothing more", self.lease.job,
                    self.lease.run_id, found.isoformat(timespec="milliseconds"), self.lost.by,
                    datetime.now(timezone.utc).isoformat(timespec="milliseconds"))
        self._calling_back = threading.Thread(target=self._run, args=(self._on_lost,),
                                              name=f"stateops-lease-lost-{self.lease.job}", daemon=True)
        self._calling_back.start()

    def _run(self, callbacks: list) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception as err:  # noqa: BLE001 - every callback runs; the fence stops writes anyway
                log.warning("%s: after the lease was lost: %s", self.lease.job, err)

    def _lost_error(self) -> LeaseLostError:
        """A fresh copy of the held loss to raise: the one in `lost` is shared by every thread that checks the fence,
        and raising it would chain each raiser's traceback onto it."""
        return LeaseLostError(self.lost.mine, self.lost.now_held_by, taken_by=self.lost.taken_by)

    def _judge(self) -> tuple[str, Lease | None, str | None]:
        """(judge's verdict, the lease record, its version) as the store has them now."""
        record, version = leases.read_versioned(self.store)
        return judge(self.lease, record, leases.newest_epoch(self.store)), record, version

    def heartbeat(self) -> bool:
        """Rewrite the heartbeat (over a stale holder's late record too); False (and `lost` set) when the lease
        was taken over."""
        with self.store.critical():
            self._beats += 1
            beat = self._beats
            verdict, holder, version = self._judge()
            if verdict != LOST:
                if verdict == STALE_WRITE:
                    log.warning("%s: the lease record names %s (epoch %s), an older holder that wrote it late; run %s "
                                "(epoch %s) keeps the lease and writes its own", self.lease.job, holder.describe(),
                                holder.epoch, self.lease.run_id, self.lease.epoch)
                # the fault point sits between the control lock's renewal and the record's write: a holder frozen
                # there past the lease timeout resumes after a takeover with its record to write (the fence trials'
                # freeze-in-heartbeat); the write is conditional on the version read, and epochs order the rest
                # our own record keeps whatever else was written into it; over a stale holder's, ours again
                mine = holder if verdict == HELD else self.lease
                if self.store.write_if(leases.RECORD, replace(mine, heartbeat=now_iso()).to_dict(), version,
                                       between=lambda: fault_point("lease.heartbeat", job=self.lease.job, beat=beat)):
                    return True
                verdict, holder, _ = self._judge()  # written meanwhile: by whom decides
                if verdict != LOST:
                    return True  # the next beat writes it again
            if fence_off():
                return True
        self._found_lost(holder)
        return False

    def ensure_held(self) -> None:
        """The fence before a write: raises LeaseLostError once the lease was taken over (judge)."""
        if fence_off():
            return
        if self.lost is None:
            verdict, holder, _ = self._judge()
            if verdict == LOST:
                self._found_lost(holder)
        if self.lost is not None:
            raise self._lost_error()

    def ensure_not_taken_over(self) -> None:
        """ensure_held, and the `actions` journal's word too, for a run whose query failed: a `lease_takeover` row
        naming this lease as the one it replaced means lost (LeaseLostError), whatever the record says. The record
        can name this lease again after a takeover: a holder frozen between its heartbeat's renewal of the control
        lock and its write (stateops.control.store) writes that one record when it thaws. Its queries then meet
        the taker's commit points (a create-once `offsets/N` refused); the failure is the takeover's doing, and the
        run says so, its writes stopped first, instead of reporting a refused commit. Read on failure only: the
        journal is a table, the record a small file."""
        self.ensure_held()
        if fence_off():
            return
        try:
            takeovers = actions.read(self.layout, self.lease.job, "lease_takeover")
        except Exception as err:  # noqa: BLE001 - the journal out of reach: the query's own failure is what is reported
            log.warning("%s: could not read the actions journal for a takeover of this run's lease: %s",
                        self.lease.job, err)
            return
        taker = next((row for row in takeovers
                      if row["details"].get("previous", {}).get("lease_id") == self.lease.lease_id), None)
        if taker is None:
            return
        self._found_lost(None, taken_by=f"taken over by run {taker['run_id']} at {taker['at'].isoformat()} (the "
                                        "actions journal; the lease record did not show it)")
        raise self._lost_error()

    def stop_request(self) -> stop.StopRequest | None:
        """A pending stop request aimed at this lease."""
        return stop.pending(self.store, self.lease.lease_id)

    def release(self) -> None:
        """Stop heartbeating; remove the lease and its stop request, unless another run holds it now (a lease found
        lost is left alone: its holder writes nothing more)."""
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.settings.heartbeat_seconds + 10)
        if self._calling_back is not None:  # its queries stopped before the process goes on to exit
            self._calling_back.join(timeout=60)
        if self.lost is not None:  # another run holds it now: nothing of this one's to remove, nothing written
            return
        with self.store.critical():  # the request first: whoever sees the lease gone sees no request
            if stop.pending(self.store, self.lease.lease_id) is not None:
                self.store.remove(stop.RECORD)
            holder = leases.read(self.store)
            if holder is not None and holder.lease_id == self.lease.lease_id:
                self.store.remove(leases.RECORD)


def acquire(layout: Layout, job: str, *, run_id: str, dagster_run_id: str | None = None,
            runbook_id: str | None = None, actor: str | None = None, mode: str | None = None,
            settings: ControlSettings) -> HeldLease:
    """Take the job's lease for this process, or raise MaintenanceLockedError / LeaseHeldError."""
    store = ControlStore(layout, job)
    with store.critical():
        blocker, previous = _blocker(store, runbook_id, settings)
        if blocker is not None:
            raise blocker
        stale_reason = previous.stale_reason(settings) if previous is not None else None
        stamp = now_iso()
        record, version = leases.read_versioned(store)
        epoch = max(leases.newest_epoch(store), record.epoch if record else 0) + 1
        mine = Lease(lease_id=uuid.uuid4().hex, job=job, run_id=run_id, dagster_run_id=dagster_run_id,
                     runbook_id=runbook_id, pid=os.getpid(), pid_started=start_ticks(os.getpid()), host=HOST,
                     started=stamp, heartbeat=stamp, mode=mode, epoch=epoch)
        store.write(EPOCH, {"epoch": epoch, "lease_id": mine.lease_id, "at": stamp})
        if not store.write_if(leases.RECORD, mine.to_dict(), version):  # a writer that read it before us wrote it
            raise LeaseHeldError(leases.read(store) or mine)
        if stop.read(store) is not None:  # aimed at an earlier lease: void now
            store.remove(stop.RECORD)
    held = HeldLease(layout, store, mine, settings)
    held._thread.start()
    if previous is not None:
        try:
            actions.record(layout, job, "lease_takeover", "done", actor=actor or default_actor(), run_id=run_id,
                           dagster_run_id=dagster_run_id, runbook_id=runbook_id,
                           details={"previous": previous.to_dict(), "stale_reason": stale_reason,
                                    "lease_id": mine.lease_id})
        except BaseException:
            held.release()  # a takeover that cannot be journaled does not happen
            raise
    return held


def wait_released(layout: Layout, job: str, lease_id: str, timeout: float, *, poll_seconds: float = 0.5,
                  settings: ControlSettings) -> bool:
    """Wait up to `timeout` s until lease `lease_id` is no longer live (released, replaced, or stale)."""
    deadline = time.monotonic() + timeout
    while True:
        holder = leases.current(layout, job)
        if holder is None or holder.lease_id != lease_id or holder.stale_reason(settings) is not None:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(poll_seconds, remaining))
