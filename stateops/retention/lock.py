"""One retention run per root at a time: an exclusive lock per root, held for the whole run.

The locks live in the control home (STATEOPS_CONTROL_HOME, else STATEOPS_HOME), one per root under
`ops/_retention/locks/`, whatever storage the root itself is on (local disk, s3://...). A run takes each root's
lock without waiting (in sorted order, so two runs over shared roots meet at the same first one), is refused at
once in one line naming the holder (run id, pid, host, actor, since: the record the holder writes into its lock)
while another run holds one, and keeps them until it ends. Two kinds, by where the control home is:
  local or POSIX shared path  a non-blocking `fcntl.flock` on the root's file, kept open for the run; the kernel
           releases it when the process dies, so a crashed run never leaves a lock behind.
  S3 (s3://, s3a://)  a lock object per root (stateops/s3_lock_object.py, the runbook's lock too): created with
           If-None-Match (of concurrent creators exactly one wins), renewed by a heartbeat every
           LOCK_TTL_SECONDS / 4, deleted with If-Match on the holder's own ETag at the end (never another
           holder's). A run that died leaves its object behind: it is taken over once LOCK_TTL_SECONDS old by the
           server's clock (If-Match on the stale ETag, one taker wins), so a later run waits for that at most.
           The loopback test server used to let two of eight concurrent creators win in one of twenty trials
           (moto handling requests in parallel: measured, README "Retention"); tests/support/servers/moto.py now serializes
           its requests, as S3 makes a conditional write atomic, and tests/e2e/test_retention_lock_s3.py runs
           these locks on it. A run whose heartbeat failed for a whole TTL may have lost its lock to another run;
           that is logged when it ends (each item is still re-checked against the files just before it acts).
Other object stores have no atomic create here: such a control home is refused in one line.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import posixpath
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from stateops.control.process import HOST
from stateops.control.records import now_iso
from stateops.control.store import SUPPORTED, local_home
from stateops.errors import StateOpsError
from stateops.fs import S3_SCHEMES, scheme
from stateops.layout import Layout
from stateops.s3_lock_object import S3LockObject

log = logging.getLogger(__name__)

LOCK_TTL_SECONDS = 60.0  # an S3 lock not renewed for this long (server clock) was left by a dead run
_HELD: set[str] = set()  # lock files this process holds (flock does not exclude threads sharing a file on NFS)
_GUARD = threading.Lock()


class RetentionLockedError(StateOpsError):
    """Another retention run holds a root."""


def lock_path(layout: Layout, root: str) -> str:
    """The root's lock in the control home: a local path, or an s3:// / s3a:// URL."""
    home = layout.control_home
    if scheme(home) not in S3_SCHEMES:
        variable = "STATEOPS_CONTROL_HOME" if layout.control else "STATEOPS_HOME"
        home = local_home(home, variable, user="retention's lock per root", supported=SUPPORTED)
    name = hashlib.sha256(root.rstrip("/").encode()).hexdigest()[:24] + ".lock"
    return posixpath.join(home, "ops", "_retention", "locks", name)


def _locked(root: str, record: dict[str, Any], released: str) -> RetentionLockedError:
    holder = (f"run {record.get('run_id')} (pid {record.get('pid')} on {record.get('host')}, by {record.get('actor')}, "
              f"since {record.get('since')})" if record else "another run (no details recorded yet)")
    return RetentionLockedError(
        f"another retention run holds {root}: {holder}. Fix: wait for it to finish (one retention run per root at "
        f"a time); a run that died releases its lock by itself{released}")


def _local_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 65536).decode() or "{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _take_local(path: str, root: str, record: dict[str, Any]) -> Callable[[], None]:
    """flock the root's file and write the holder into it; returns its release."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    with _GUARD:
        busy = path in _HELD
        if not busy:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                _HELD.add(path)
            except BlockingIOError:
                busy = True
    if busy:
        holder = _local_record(fd)
        os.close(fd)
        raise _locked(root, holder, "")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)

    def release() -> None:
        with _GUARD:
            _HELD.discard(path)
        os.ftruncate(fd, 0)
        os.close(fd)
    return release


def _take_s3(url: str, root: str, record: dict[str, Any]) -> Callable[[], None]:
    """Create (or take over a stale) lock object holding the record; returns its release."""
    lock = S3LockObject(url, LOCK_TTL_SECONDS)
    lock.acquire(record, lambda: _locked(root, lock.holder(), f" once {lock.ttl:g} s old"))

    def release() -> None:
        lost = lock.lost
        lock.release()
        if lost:
            log.warning("retention run %s: %s while it ran; another run may have acted on %s meanwhile",
                        record["run_id"], lost, root)
    return release


@contextmanager
def hold(layout: Layout, roots: tuple[str, ...], *, run_id: str, actor: str) -> Iterator[None]:
    """Hold every root's lock for the block; RetentionLockedError (one line) when a root is held."""
    releases: list[Callable[[], None]] = []
    try:
        for root in sorted(set(roots)):
            path = lock_path(layout, root)
            record = {"root": root, "run_id": run_id, "pid": os.getpid(), "host": HOST, "actor": actor,
                      "since": now_iso()}
            take = _take_s3 if scheme(path) in S3_SCHEMES else _take_local
            releases.append(take(path, root, record))
        yield
    finally:
        for release in reversed(releases):
            release()
