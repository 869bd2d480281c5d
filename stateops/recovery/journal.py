"""The runbook's journal: every step recorded before and after it runs, in two places.

`journal.jsonl` in the runbook's directory (next to its archive) is the one the executor reads back to
resume: one JSON object per line, appended and fsynced before the step acts (`started`) and after it is
complete (`done`). The `actions` ops table gets the same entries (action `recovery.<step>`), so the
audit trail of a job shows its runbooks among its other control actions.

A runbook is executed by one process at a time: that process holds the runbook's lock, `.runbook.lock` in its
directory, for as long as it runs (the storage layer's lock, stateops.storage.locks, with a heartbeat), so a
second attempt can tell a runbook that is still running from one whose process crashed (and resumes it). On
local or POSIX shared storage it is a flock, which dies with the process; on S3 a lock object renewed every
LOCK_TTL_SECONDS / 4, live while younger than LOCK_TTL_SECONDS by the server's clock, taken over by the next
attempt once stale. A holder whose lock was taken over writes no further entry.

The journal itself is the storage layer's entry log: `journal.jsonl` (appended and fsynced) on local storage;
on S3, which has no append, one object per entry (`journal/<seq:08d>.json`), created only if absent, so a second
process writing the same runbook (it read the journal before the first one wrote) fails loudly on its next
entry instead of interleaving.
Why not the job's maintenance lock (control plane), which the runbook holds from its intent to its end: it
does not expire and deliberately outlives a crashed runbook (resuming relies on it), so it cannot tell a live
runbook from a dead one, which is the one question the flock answers here.
"""
from __future__ import annotations

import json
import os
import posixpath
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops import actions
from stateops.control.process import HOST
from stateops.control.records import now_iso
from stateops.faults import fault_point
from stateops.layout import Layout
from stateops.redaction import redact_tree
from stateops.storage import Lock, LockBusy, entry_log_at, lock_at

from stateops.recovery.model import RecoveryEvent, RecoveryRefused

LOCK = ".runbook.lock"
ENTRIES = "journal"          # the entry log: journal.jsonl on local storage, journal/<seq>.json on S3
LOCK_TTL_SECONDS = 60.0      # an S3 runbook lock not renewed for this long (server clock) was left by a dead process


class RunbookActive(RecoveryRefused):
    """Another process is executing this runbook now."""


def _lock(directory: str) -> Lock:
    return lock_at(posixpath.join(directory, LOCK), ttl=LOCK_TTL_SECONDS, heartbeat=True, name="runbook lock")


def running(directory: str) -> bool:
    """True while some process holds the runbook's lock (it is being executed)."""
    return _lock(directory).live()


def read_entries(directory: str) -> list[dict[str, Any]]:
    """Every journal entry, oldest first (a line cut short by a crash is ignored)."""
    return entry_log_at(directory, ENTRIES).read()


class Journal:
    def __init__(self, layout: Layout, job: str, runbook_id: str, directory: str, actor: str,
                 on_event: Callable[[RecoveryEvent], None] | None = None):
        self.layout, self.job, self.runbook_id, self.directory, self.actor = layout, job, runbook_id, directory, actor
        self.on_event = on_event
        self.log = entry_log_at(directory, ENTRIES)
        self.entries = self.log.read()
        self._lock: Lock | None = None

    @contextmanager
    def held(self) -> Iterator["Journal"]:
        """Hold the runbook's lock while executing it; refuses when another process holds it."""
        lock = _lock(self.directory)
        try:
            lock.acquire({"host": HOST, "pid": os.getpid(), "since": now_iso()})
        except LockBusy:
            raise self._active() from None
        self._lock = lock
        try:
            yield self
        finally:
            self._lock = None
            lock.release()

    def _active(self, why: str = "is being executed by another process now") -> RunbookActive:
        return RunbookActive(f"runbook {self.runbook_id} of {self.job} {why}. Fix: wait for it to end (stateops "
                             f"jobs status {self.job}; stateops archives show {self.runbook_id})")

    def phase(self, step: str) -> str | None:
        """The latest phase journaled for `step` (started, done, failed), or None."""
        phases = [e["phase"] for e in self.entries if e["step"] == step]
        return phases[-1] if phases else None

    def details(self, step: str, phase: str = "done") -> dict[str, Any]:
        found = [e["details"] for e in self.entries if e["step"] == step and e["phase"] == phase]
        return found[-1] if found else {}

    def record(self, step: str, phase: str, details: dict[str, Any] | None = None) -> RecoveryEvent:
        """Append an entry (fsynced) and to the actions table, then tell the callback."""
        event = RecoveryEvent(self.runbook_id, self.job, step, phase, now_iso(), dict(details or {}))
        line = json.dumps(redact_tree(event.to_dict()), sort_keys=True, default=str)
        if self._lock is not None and self._lock.lost:
            raise self._active(f"stopped: {self._lock.lost}")
        if not self.log.append(len(self.entries), line):
            raise self._active(f"has journal entry {len(self.entries)} written by another process")
        self.entries.append(json.loads(line))
        actions.record(self.layout, self.job, f"recovery.{step}", phase, actor=self.actor, runbook_id=self.runbook_id,
                       details=event.details)
        if self.on_event is not None:
            self.on_event(event)
        if phase == "done":
            fault_point("runbook.after_step", job=self.job, step=step)
        return event

    def replayed(self, step: str) -> None:
        """Tell the callback a step is skipped because an earlier attempt completed it (not journaled again)."""
        if self.on_event is not None:
            self.on_event(RecoveryEvent(self.runbook_id, self.job, step, "skipped", now_iso(), self.details(step)))
