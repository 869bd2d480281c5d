"""A runbook's journal: every step recorded before and after it acts, read back to resume, by one process at a time.

The journal is the storage layer's entry log in the runbook's own folder: `journal.jsonl` (appended and fsynced)
on local storage; on S3, which has no append, one object per entry (`journal/<seq:08d>.json`), created only if
absent. Entry N is written only by a process that read N entries: a second process that read the journal before the
first wrote to it fails on its next entry (RunbookBusy) instead of interleaving.

The process acting holds the runbook's lock, `.runbook.lock` in the same folder, with a heartbeat (holding.py): on
local or POSIX shared storage a flock, which dies with the process; on S3 a lock object renewed every
LOCK_TTL_SECONDS / 4, live while younger than LOCK_TTL_SECONDS by the server's clock. So a second attempt tells a
runbook still running (refused) from one whose process died (resumed), and a holder whose lock was taken over
writes no further entry. Each entry also goes to the optional `mirror` (recovery: the `actions` ops table, so a
job's audit trail shows its runbooks; a lock lost is journaled there, never in the entry log, whose next entry is
the new holder's) and to `report` (a terminal, a Dagster op's log), which also hears of steps skipped on resume.
"""
from __future__ import annotations

import json
import posixpath
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from stateops.clock import now_iso
from stateops.faults import fault_point
from stateops.redaction import redact_tree
from stateops.storage import Lock, entry_log_at, lock_at

from stateops.runbooks.holding import Holding, RunbookBusy

LOCK = ".runbook.lock"
ENTRIES = "journal"          # the entry log: journal.jsonl on local storage, journal/<seq>.json on S3
LOCK_TTL_SECONDS = 60.0      # a runbook lock not renewed for this long was left by a dead or frozen process


@dataclass(frozen=True)
class StepEvent:
    """One journal entry, as the mirror and the report get it. phase: started | done | failed | refused | skipped
    (done by an earlier attempt: reported, not journaled) | stopped (its lock lost: mirrored, not journaled)."""

    runbook_id: str
    job: str
    step: str
    phase: str
    at: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lock_of(directory: str, ttl: float | None = None) -> Lock:
    """The runbook's lock (its TTL: LOCK_TTL_SECONDS as set when it is asked for, unless `ttl`)."""
    return lock_at(posixpath.join(directory, LOCK), ttl=LOCK_TTL_SECONDS if ttl is None else ttl, heartbeat=True,
                   name="runbook lock")


def running(directory: str) -> bool:
    """True while some process holds the runbook's lock (it is being executed)."""
    return lock_of(directory).live()


def read_entries(directory: str) -> list[dict[str, Any]]:
    """Every journal entry, oldest first (a line cut short by a crash is ignored)."""
    return entry_log_at(directory, ENTRIES).read()


class Journal:
    """The journal of runbook `runbook_id` (of `job`) in `directory`. `kind` names its fault points
    (`<kind>.before_done`, `<kind>.after_step`), `title` and `fix` its one-line refusals and stops."""

    def __init__(self, directory: str, *, kind: str, runbook_id: str, job: str, title: str, fix: str,
                 mirror: Callable[[StepEvent], None] | None = None,
                 report: Callable[[StepEvent], None] | None = None, ttl: float | None = None):
        self.directory, self.kind, self.runbook_id, self.job = directory, kind, runbook_id, job
        self.title, self.fix, self.mirror, self.report, self.ttl = title, fix, mirror, report, ttl
        self.log = entry_log_at(directory, ENTRIES)
        self.entries = self.log.read()
        self.holding = Holding(title, fix=fix, on_lost=self._lost)

    @contextmanager
    def held(self, record: dict[str, Any] | None = None) -> Iterator["Journal"]:
        """Hold the runbook's lock while acting (RunbookBusy when another process holds it)."""
        with self.holding.held():
            self.holding.take(lock_of(self.directory, self.ttl), {"runbook_id": self.runbook_id, **(record or {})})
            yield self

    def ensure_held(self, step: str = "") -> None:
        """The lost-lock rule (holding.py), for a step's own writes between two entries."""
        self.holding.ensure_held(step)

    def phase(self, step: str) -> str | None:
        """The latest phase journaled for `step` (started, done, failed, ...), or None."""
        phases = [e["phase"] for e in self.entries if e["step"] == step]
        return phases[-1] if phases else None

    def details(self, step: str, phase: str = "done") -> dict[str, Any]:
        found = [e["details"] for e in self.entries if e["step"] == step and e["phase"] == phase]
        return found[-1] if found else {}

    def started_at(self, step: str) -> str | None:
        return next((e["at"] for e in self.entries if e["step"] == step), None)

    def record(self, step: str, phase: str, details: dict[str, Any] | None = None) -> StepEvent:
        """Append an entry (fsynced), then mirror and report it."""
        event = StepEvent(self.runbook_id, self.job, step, phase, now_iso(), dict(details or {}))
        line = json.dumps(redact_tree(event.to_dict()), sort_keys=True, default=str)
        self.ensure_held(step)
        if not self.log.append(len(self.entries), line):
            raise RunbookBusy(f"{self.title} has journal entry {len(self.entries)} written by another process; "
                              f"nothing more was done. Fix: {self.fix}")
        self.entries.append(json.loads(line))
        self._tell(event, mirror=True)
        if phase == "done":
            fault_point(f"{self.kind}.after_step", job=self.job, step=step)
        return event

    def replayed(self, step: str) -> None:
        """Report a step skipped because an earlier attempt completed it (not journaled again)."""
        self._tell(StepEvent(self.runbook_id, self.job, step, "skipped", now_iso(), self.details(step)), mirror=False)

    def _lost(self, step: str, error: str) -> None:
        self._tell(StepEvent(self.runbook_id, self.job, step, "stopped", now_iso(), {"error": error}), mirror=True)

    def _tell(self, event: StepEvent, *, mirror: bool) -> None:
        if mirror and self.mirror is not None:
            self.mirror(event)
        if self.report is not None:
            self.report(event)
