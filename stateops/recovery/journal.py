"""The runbook's journal: every step recorded before and after it runs, in two places.

`journal.jsonl` in the runbook's directory (next to its archive) is the one the executor reads back to
resume: one JSON object per line, appended and fsynced before the step acts (`started`) and after it is
complete (`done`). The `actions` ops table gets the same entries (action `recovery.<step>`), so the
audit trail of a job shows its runbooks among its other control actions.

A runbook is executed by one process at a time: that process holds an exclusive `flock` on the
directory's `.runbook.lock` for as long as it runs. The lock dies with the process, so a second
attempt can tell a runbook that is still running from one whose process crashed (and resumes it).

On S3 (an archive_dir at s3:// or s3a://) there is no append and no flock; the same two things are built on
conditional writes (PUT If-None-Match: * creates an object only while none exists; If-Match: <ETag> writes
or deletes only the version one read):
  journal  one object per entry, `journal/<seq:08d>.json`, created with If-None-Match, so an entry is never
           overwritten: a second process writing the same runbook (it read the journal before the first one
           wrote) fails loudly on its next entry instead of interleaving. Readers list the prefix in name order.
  lock     `.runbook.lock`, a lock object (stateops/s3_lock_object.py, shared with retention's lock per root)
           created with If-None-Match and renewed by a heartbeat thread (If-Match on its own ETag) every
           LOCK_TTL_SECONDS / 4; deleted (If-Match) when the runbook ends. A runbook runs while
           its lock is younger than LOCK_TTL_SECONDS by the server's clock (LastModified against the Date
           of the same answer; no host's clock plays a part). A crashed runbook's lock goes stale, and the
           next attempt takes it over with If-Match on the stale ETag (of two takers one wins). A holder
           whose renewal finds its lock taken over writes no further entry.
Why not the job's maintenance lock (control plane), which the runbook holds from its intent to its end: it
does not expire and deliberately outlives a crashed runbook (resuming relies on it), so it cannot tell a live
runbook from a dead one, which is the one question the flock answers here.
"""
from __future__ import annotations

import fcntl
import json
import os
import posixpath
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops import actions
from stateops.control.process import HOST
from stateops.control.records import now_iso
from stateops.faults import fault_point
from stateops.fs import S3_SCHEMES, filesystem, scheme
from stateops.layout import Layout
from stateops.s3_lock_object import S3LockObject, refused

from stateops.recovery.archive import JOURNAL
from stateops.recovery.model import RecoveryEvent, RecoveryRefused

LOCK = ".runbook.lock"
ENTRIES = "journal"          # on S3: the folder of the journal's entry objects
LOCK_TTL_SECONDS = 60.0      # an S3 runbook lock not renewed for this long (server clock) was left by a dead process


class RunbookActive(RecoveryRefused):
    """Another process is executing this runbook now."""


def _on_s3(directory: str) -> bool:
    return scheme(directory) in S3_SCHEMES


def running(directory: str) -> bool:
    """True while some process holds the runbook's lock (it is being executed)."""
    if _on_s3(directory):
        return _s3_lock(directory).live()
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


def _s3_lock(directory: str) -> S3LockObject:
    return S3LockObject(posixpath.join(directory, LOCK), LOCK_TTL_SECONDS)


def read_entries(directory: str) -> list[dict[str, Any]]:
    """Every journal entry, oldest first (a line cut short by a crash is ignored)."""
    if _on_s3(directory):
        fs, base = filesystem(posixpath.join(directory, ENTRIES))
        fs.invalidate_cache(base)  # another process writes them: list the bucket, not this process's cache
        names = sorted(fs.find(base)) if fs.exists(base) else []
        bodies = fs.cat(names) if names else {}
        return [json.loads(bodies[name]) for name in names]
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
        self._s3_lock: S3LockObject | None = None

    @contextmanager
    def held(self) -> Iterator["Journal"]:
        """Hold the runbook's lock while executing it; refuses when another process holds it."""
        if _on_s3(self.directory):
            lock = _s3_lock(self.directory)
            lock.acquire({"host": HOST, "pid": os.getpid(), "since": now_iso()}, self._active)
            self._s3_lock = lock
            try:
                yield self
            finally:
                self._s3_lock = None
                lock.release()
            return
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(posixpath.join(self.directory, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._active() from None
            yield self
        finally:
            os.close(fd)

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
        line = json.dumps(event.to_dict(), sort_keys=True, default=str)
        if _on_s3(self.directory):
            self._create_entry(line)
        else:
            os.makedirs(self.directory, exist_ok=True)
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

    def _create_entry(self, line: str) -> None:
        """The next entry as its own object, created only if absent (the module doc): never over another's."""
        if self._s3_lock is not None and self._s3_lock.lost:
            raise self._active(f"stopped: {self._s3_lock.lost}")
        fs, path = filesystem(posixpath.join(self.directory, ENTRIES, f"{len(self.entries):08d}.json"))
        bucket, key, _ = fs.split_path(path)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=line.encode(), IfNoneMatch="*")
        except OSError as err:
            if refused(err):
                raise self._active(f"has journal entry {len(self.entries)} written by another process "
                                   f"(s3://{path})") from None
            raise
        fs.invalidate_cache(posixpath.dirname(path))

    def replayed(self, step: str) -> None:
        """Tell the callback a step is skipped because an earlier attempt completed it (not journaled again)."""
        if self.on_event is not None:
            self.on_event(RecoveryEvent(self.runbook_id, self.job, step, "skipped", now_iso(), self.details(step)))
