"""A job's control directory, `ops/<job>/control/`: small JSON records changed under one exclusive lock.

Every read-check-write (take a lease, beat, request a stop, take the maintenance lock, change an
override) holds an exclusive `fcntl.flock` on `control/.lock`, and records are replaced whole (temp file,
fsync, os.replace), so a reader without the lock never sees half a record. That needs a POSIX
filesystem: local disk, or shared storage with working flock (NFSv4). Object stores (s3://, gs://,
abfs://, memory://, ...) have neither, so the control plane refuses them.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import urlparse

from stateops.errors import StateOpsError
from stateops.layout import Layout

SUPPORTED = "a local path or POSIX shared storage with working flock (e.g. an NFSv4 mount)"

# flock excludes other open files, but on NFS it is emulated with POSIX locks, which do not exclude
# threads of one process: a process-wide lock per control directory covers that case.
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class UnsupportedStorageError(StateOpsError):
    """STATEOPS_HOME is on a storage where the control plane cannot lock atomically."""


def local_home(home: str, variable: str = "STATEOPS_HOME") -> str:
    """The control home (STATEOPS_CONTROL_HOME, else STATEOPS_HOME) as a local filesystem path; refuses URLs
    other than file://."""
    if "://" not in home:
        return home
    url = urlparse(home)
    if url.scheme == "file":
        return url.path
    raise UnsupportedStorageError(
        f"{variable} {home}: the control plane (lease, stop request, maintenance lock, overrides) needs "
        f"{SUPPORTED}; {url.scheme}:// has no atomic lock. Fix: keep {variable} on a local or POSIX shared "
        "path, or set STATEOPS_CONTROL_HOME to one for the control records (checkpoints may still live "
        "elsewhere: the job setting `checkpoint`)")


class ControlStore:
    """The control records of one job."""

    def __init__(self, layout: Layout, job: str):
        self.job = job
        variable = "STATEOPS_CONTROL_HOME" if layout.control else "STATEOPS_HOME"
        self.dir = os.path.join(Layout(local_home(layout.control_home, variable)).ops_dir(job), "control")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.json")

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Hold the job's control lock (exclusive across processes and threads) for a read-check-write."""
        os.makedirs(self.dir, exist_ok=True)
        with _THREAD_LOCKS_GUARD:
            thread_lock = _THREAD_LOCKS.setdefault(self.dir, threading.Lock())
        with thread_lock:
            fd = os.open(os.path.join(self.dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def read(self, name: str) -> dict[str, Any] | None:
        path = self.path(name)
        try:
            with open(path) as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise StateOpsError(f"{path}: not a valid control record ({err}). Fix: inspect it; delete it "
                                "only if no run or runbook of the job is active") from None

    def write(self, name: str, record: dict[str, Any]) -> None:
        """Replace the record whole: readers see the old or the new one, never a mix."""
        path = self.path(name)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass
