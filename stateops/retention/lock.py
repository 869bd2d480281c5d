"""One retention run per root at a time: an exclusive lock per root, held for the whole run.

The locks live in the control home (STATEOPS_CONTROL_HOME, else STATEOPS_HOME; a local or POSIX path here,
though the control plane may be on S3), one file per root under `ops/_retention/locks/`, whatever storage
the root itself is on (local disk, s3://...). A run takes a non-blocking `fcntl.flock` on each root's file
(in sorted order) and keeps them open until it ends; the kernel releases them when the process dies, so a
crashed run never leaves a lock behind. The holder (run id, pid, host, since) is written into the file for the
refusal message. Why not a lock object in the bucket: S3 conditional writes (If-None-Match) make the
create exclusive, but a holder that dies leaves the object behind, and taking over a stale one needs a
compare-and-delete; and the loopback test server (moto) let two of eight concurrent creators win in one
of twenty trials (measured, see README "Retention").
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from contextlib import contextmanager
from typing import Iterator

from stateops.control.process import HOST
from stateops.control.records import now_iso
from stateops.control.store import LOCAL, local_home
from stateops.errors import StateOpsError
from stateops.layout import Layout

_HELD: set[str] = set()  # lock files this process holds (flock does not exclude threads sharing a file on NFS)
_GUARD = threading.Lock()


class RetentionLockedError(StateOpsError):
    """Another retention run holds a root."""


def lock_path(layout: Layout, root: str) -> str:
    variable = "STATEOPS_CONTROL_HOME" if layout.control else "STATEOPS_HOME"
    home = local_home(layout.control_home, variable, user="retention's lock per root", supported=LOCAL)
    folder = os.path.join(home, "ops", "_retention", "locks")
    return os.path.join(folder, hashlib.sha256(root.rstrip("/").encode()).hexdigest()[:24] + ".lock")


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 65536).decode() or "{}")
    except ValueError:
        record = {}
    if not record:
        return "another run (no details recorded yet)"
    return (f"run {record.get('run_id')} (pid {record.get('pid')} on {record.get('host')}, by {record.get('actor')}, "
            f"since {record.get('since')})")


@contextmanager
def hold(layout: Layout, roots: tuple[str, ...], *, run_id: str, actor: str) -> Iterator[None]:
    """Hold every root's lock for the block; RetentionLockedError (one line) when a root is held."""
    taken: list[tuple[str, int]] = []
    try:
        for root in sorted(set(roots)):
            path = lock_path(layout, root)
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
                holder = _holder(fd)
                os.close(fd)
                raise RetentionLockedError(
                    f"another retention run holds {root}: {holder}. Fix: wait for it to finish (one retention "
                    "run per root at a time); a run that died releases its lock by itself")
            taken.append((path, fd))
            record = {"root": root, "run_id": run_id, "pid": os.getpid(), "host": HOST, "actor": actor,
                      "since": now_iso()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        yield
    finally:
        for path, fd in reversed(taken):
            with _GUARD:
                _HELD.discard(path)
            os.ftruncate(fd, 0)
            os.close(fd)
