"""Locks held with a heartbeat, and the one rule when one is lost.

A runbook (recovery, a home move) holds its own lock for as long as it acts, a retention run one lock per root. The
storage layer's lock (stateops.storage.locks) renews itself from a heartbeat thread and notes in `lost` when another
process took it over (a holder frozen, or cut off from the store, past the lock's TTL). What the holder does then is
decided here, once for all of them: before its next write (a journal entry, a copied file, a deleted item) it stops,
says so in one line (RunbookStopped, exit 1), and tells `on_lost` once (a mirror journals it); it writes nothing
more, since the process that took the lock over acts now. A lock another process holds when this one asks is
RunbookBusy (exit 2, nothing done), naming the holder and when its lock frees itself.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops.storage.holders import identity
from stateops.clock import now_iso
from stateops.errors import OperationFailed, StateOpsError
from stateops.storage import Lock, LockBusy, describe


class RunbookBusy(StateOpsError):
    """Another process holds the runbook's lock (or wrote its journal first): nothing was done (exit 2)."""


class RunbookStopped(OperationFailed):
    """The runbook's lock was taken over while it acted: it stopped before its next write (exit 1)."""


class Holding:
    """The locks one run holds (taken in order, released in reverse) and the lost-lock rule (see the module doc).
    `title` names the run in its lines ("runbook rb-1 of user_activity"), `fix` says what to do about a refusal
    or a stop."""

    def __init__(self, title: str, *, fix: str, on_lost: Callable[[str, str], None] | None = None):
        self.title, self.fix, self.on_lost = title, fix, on_lost
        self.locks: list[Lock] = []
        self._stopped: str | None = None  # why the runbook stopped, once a lock was lost

    def take(self, lock: Lock, record: dict[str, Any],
             busy: Callable[[LockBusy], StateOpsError] | None = None) -> None:
        """Acquire `lock` without waiting, its record naming this process; `busy` (default: RunbookBusy) is what a
        lock held elsewhere raises."""
        try:
            lock.acquire({**identity(), "since": now_iso(), **record})
        except LockBusy as err:
            raise (busy or self.busy)(err) from None
        self.locks.append(lock)

    def busy(self, err: LockBusy) -> RunbookBusy:
        gone = (f"; if that process is gone, its lock is free once {err.ttl:g} s old (now {err.age:.0f} s): run it "
                "again then") if err.age is not None else ""
        return RunbookBusy(f"{self.title} is being executed by another process now ({describe(err.holder)}). "
                           f"Fix: {self.fix}{gone}")

    def ensure_held(self, step: str = "") -> None:
        """Call before each write (of `step`): RunbookStopped when one of the locks was lost (`on_lost` told
        once, with the step and the line)."""
        if self._stopped is None:
            lost = next((lock.lost for lock in self.locks if lock.lost), None)
            if lost is None:
                return
            where = f" ({step})" if step else ""
            self._stopped = (f"{self.title} stopped before its next write{where}: {lost}; the process that took it "
                             f"over acts now. Fix: {self.fix}")
            if self.on_lost is not None:
                self.on_lost(step, self._stopped)
        # a fresh exception each time: one instance raised again carries the first raise's traceback along
        raise RunbookStopped(self._stopped)

    def release(self) -> None:
        """Give every lock up (a lost one is left to its new holder: the storage layer never removes it)."""
        while self.locks:
            self.locks.pop().release()

    @contextmanager
    def held(self) -> Iterator["Holding"]:
        try:
            yield self
        finally:
            self.release()
