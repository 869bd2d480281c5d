"""A job's control directory, `ops/<job>/control/`: small JSON records changed under one exclusive lock.

Every read-check-write (take a lease, beat, request a stop, take the maintenance lock, change an override)
holds the job's control lock, `control/.lock`, and records are replaced whole, so a reader without the lock
never sees half a record. Both come from the storage layer (stateops.storage), on whatever the control home
(STATEOPS_CONTROL_HOME, else STATEOPS_HOME) is: a local path or POSIX shared storage with working flock
(NFSv4), or S3 (conditional writes). Other object stores give no atomic lock, so they are refused.

A critical section takes milliseconds: the lock waits up to LOCK_WAIT_SECONDS for another holder, has no
heartbeat, and is renewed before each write. A holder that stopped inside one (dead, frozen, cut off from the
store) keeps no one out for longer than LOCK_TTL_SECONDS: its lock is then taken over (on every backend,
stateops.storage.locks), and when it resumes its renewal is refused, so it writes nothing. What remains is the
instant between a renewal and its write: a holder frozen exactly there, for longer than the TTL, writes that one
record after a takeover (docs/operations.md, One writer).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops.storage.holders import identity
from stateops.clock import now_iso
from stateops.errors import OperationFailed, StateOpsError
from stateops.layout import Layout
from stateops.storage import (SUPPORTED, LockBusy, LockLost, UnsupportedStorageError, can_lock, describe, lock_at,
                              records_at)

CONTROL_PLANE = "the control plane (lease, stop request, maintenance lock, overrides)"
LOCK_TTL_SECONDS = 30.0   # critical sections take milliseconds: a lock not renewed this long has a stopped holder
LOCK_WAIT_SECONDS = 60.0  # more than the TTL, so a waiter outlasts a dead holder's lock and takes it over


class ControlStorageError(OperationFailed):
    """The control lock was lost while held, or the control home's storage failed."""


def lockable_home(home: str, variable: str = "STATEOPS_HOME", *, user: str = CONTROL_PLANE) -> str:
    """`home` (the control home) when locks and records can live there; else refused in one line naming
    `variable`, what `user` needs and the fix."""
    if can_lock(home):
        return home
    raise UnsupportedStorageError(
        f"{variable} {home}: {user} needs {SUPPORTED}; {home.split('://', 1)[0]}:// has no atomic lock here. Fix: "
        f"point {variable} at one of those, or set STATEOPS_CONTROL_HOME to one for the control records "
        "(checkpoints may still live elsewhere: the job setting `checkpoint`)")


def control_variable(layout: Layout) -> str:
    return "STATEOPS_CONTROL_HOME" if layout.control else "STATEOPS_HOME"


class ControlStore:
    """The control records of one job, in its control home's `ops/<job>/control/`."""

    def __init__(self, layout: Layout, job: str):
        self.job = job
        home = lockable_home(layout.control_home, control_variable(layout))
        self.folder = Layout(home).control_dir(job)
        self.records = records_at(self.folder)
        self.lock = lock_at(f"{self.folder}/.lock", ttl=LOCK_TTL_SECONDS, name="control lock")
        self._held = False

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Hold the job's control lock (exclusive across processes and threads) for a read-check-write."""
        record = {**identity(), "thread": threading.current_thread().name, "since": now_iso()}
        try:
            self.lock.acquire(record, wait=LOCK_WAIT_SECONDS)
        except LockBusy as busy:
            age = "" if busy.age is None else f", last renewed {busy.age:.0f} s ago"
            raise StateOpsError(
                f"{self.job}: the control lock {busy.url} is held by {describe(busy.holder)}{age}; waited "
                f"{LOCK_WAIT_SECONDS:g} s. Fix: retry; a lock not renewed for {self.lock.ttl:g} s is taken over, so "
                "this holder is alive and renewing it: check that process") from None
        self._held = True
        try:
            yield
        finally:
            self._held = False
            self.lock.release()

    def read(self, name: str) -> dict[str, Any] | None:
        """The record, None when there is none; read without the lock (records are replaced whole)."""
        return self.records.read(name)

    def write(self, name: str, record: dict[str, Any]) -> None:
        """Replace the record whole: readers see the old or the new one, never a mix."""
        self._renew()
        self.records.write(name, record)

    def write_if(self, name: str, record: dict[str, Any], version: str | None,
                 between: Callable[[], None] | None = None) -> bool:
        """Replace the record whole only while it is at `version` (the storage layer's conditional write).
        `between` runs after the control lock's renewal and before the write: the window the module doc names
        (the fault point of a heartbeat frozen there)."""
        self._renew()
        if between is not None:
            between()
        return self.records.write_if(name, record, version)

    def read_versioned(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        return self.records.read_versioned(name)

    def remove(self, name: str) -> None:
        """Remove the record (gone already: nothing to do)."""
        self._renew()
        self.records.remove(name)

    def _renew(self) -> None:
        """Before a write under the lock: confirm this holder still holds it, so a holder paused past the TTL and
        taken over writes nothing."""
        if not self._held:  # a write without the lock (none in stateops): nothing to confirm
            return
        try:
            self.lock.renew()
        except LockLost:
            raise ControlStorageError(
                f"{self.job}: the control lock {self.lock.url} was taken over while this process held it (paused "
                f"longer than {self.lock.ttl:g} s); nothing was written. Fix: retry the command; check the host for "
                "long pauses (swap, a stopped VM)") from None

