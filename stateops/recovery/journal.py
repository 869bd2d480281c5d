"""The runbook's journal: every step recorded before and after it runs, in two places.

`journal.jsonl` in the runbook's directory (next to its archive) is the one the executor reads back to
resume: one JSON object per line, appended and fsynced before the step acts (`started`) and after it is
complete (`done`). The `actions` ops table gets the same entries (action `recovery.<step>`), so the
audit trail of a job shows its runbooks among its other control actions.

A runbook is executed by one process at a time: that process holds an exclusive `flock` on the
directory's `.runbook.lock` for as long as it runs. The lock dies with the process, so a second
attempt can tell a runbook that is still running from one whose process crashed (and resumes it).
"""
from __future__ import annotations

import fcntl
import json
import os
import posixpath
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops import actions
from stateops.control.records import now_iso
from stateops.faults import fault_point
from stateops.layout import Layout

from stateops.recovery.archive import JOURNAL
from stateops.recovery.model import RecoveryEvent, RecoveryRefused

LOCK = ".runbook.lock"


class RunbookActive(RecoveryRefused):
    """Another process is executing this runbook now."""


def running(directory: str) -> bool:
    """True while some process holds the runbook's lock (it is being executed)."""
    path = posixpath.join(directory, LOCK)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_entries(directory: str) -> list[dict[str, Any]]:
    """Every journal entry, oldest first (a line cut short by a crash is ignored)."""
    path = posixpath.join(directory, JOURNAL)
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as handle:
        for line in handle:
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return entries


class Journal:
    def __init__(self, layout: Layout, job: str, runbook_id: str, directory: str, actor: str,
                 on_event: Callable[[RecoveryEvent], None] | None = None):
        self.layout, self.job, self.runbook_id, self.directory, self.actor = layout, job, runbook_id, directory, actor
        self.on_event = on_event
        self.entries = read_entries(directory)

    @contextmanager
    def held(self) -> Iterator["Journal"]:
        """Hold the runbook's lock while executing it; refuses when another process holds it."""
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(posixpath.join(self.directory, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunbookActive(f"runbook {self.runbook_id} of {self.job} is being executed by another process "
                                    "now. Fix: wait for it to end (stateops jobs status "
                                    f"{self.job}; stateops archives show {self.runbook_id})") from None
            yield self
        finally:
            os.close(fd)

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
        os.makedirs(self.directory, exist_ok=True)
        line = json.dumps(event.to_dict(), sort_keys=True, default=str)
        with open(posixpath.join(self.directory, JOURNAL), "a") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
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
