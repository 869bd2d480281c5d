"""A job's control directory, `ops/<job>/control/`: small JSON records changed under one exclusive lock.

Every read-check-write (take a lease, beat, request a stop, take the maintenance lock, change an override)
holds the job's control lock, and records are replaced whole, so a reader without the lock never sees half a
record. The control home (STATEOPS_CONTROL_HOME, else STATEOPS_HOME) chooses how:
  - a local path or POSIX shared storage with working flock (NFSv4): an exclusive `fcntl.flock` on
    `control/.lock`, records written to a temp file, fsynced and renamed (LocalControlStore, here);
  - S3 (s3://, s3a://): a lock object created with a conditional PUT, records replaced by a PUT
    (S3ControlStore, stateops/control/s3_store.py).
Other object stores (gs://, abfs://, memory://, ...) give this code no atomic lock, so they are refused.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator
from urllib.parse import urlparse

from stateops.errors import StateOpsError
from stateops.fs import S3_SCHEMES, scheme
from stateops.layout import Layout

CONTROL_PLANE = "the control plane (lease, stop request, maintenance lock, overrides)"
LOCAL = "a local path or POSIX shared storage with working flock (e.g. an NFSv4 mount)"
SUPPORTED = f"{LOCAL}, or S3 (s3://, s3a://: conditional writes)"

# flock excludes other open files, but on NFS it is emulated with POSIX locks, which do not exclude threads
# of one process; on S3 a thread would poll its own process's lock object. A process-wide lock per control
# directory covers both.
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class UnsupportedStorageError(StateOpsError):
    """STATEOPS_HOME is on a storage where the control plane cannot lock atomically."""


def local_home(home: str, variable: str = "STATEOPS_HOME", *, user: str = CONTROL_PLANE,
               supported: str = SUPPORTED) -> str:
    """`home` (the control home) as a local filesystem path; refuses URLs other than file://, in one line
    naming `variable`, what `user` needs (`supported`) and the fix."""
    if "://" not in home:
        return home
    url = urlparse(home)
    if url.scheme == "file":
        return url.path
    raise UnsupportedStorageError(
        f"{variable} {home}: {user} needs {supported}; {url.scheme}:// has no atomic lock here. Fix: point "
        f"{variable} at one of those, or set STATEOPS_CONTROL_HOME to one for the control records (checkpoints "
        "may still live elsewhere: the job setting `checkpoint`)")


def thread_lock(key: str) -> threading.Lock:
    """The process-wide lock of one control directory (`key` names it)."""
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(key, threading.Lock())


def parse_record(where: str, text: str | bytes) -> dict[str, Any]:
    """A record's JSON; a corrupt one is refused naming `where` it is, the same on every backend."""
    try:
        return json.loads(text)
    except ValueError as err:
        raise StateOpsError(f"{where}: not a valid control record ({err}). Fix: inspect it; delete it only if "
                            "no run or runbook of the job is active") from None


def render_record(record: dict[str, Any]) -> str:
    """A record as both backends store it."""
    return json.dumps(record, indent=1, sort_keys=True)


class ControlStore(ABC):
    """The control records of one job. `ControlStore(layout, job)` is the backend its control home needs:
    S3ControlStore for s3:// and s3a://, LocalControlStore otherwise (other URLs refused)."""

    job: str

    def __new__(cls, layout: Layout, job: str) -> "ControlStore":
        if cls is ControlStore:
            if scheme(layout.control_home) in S3_SCHEMES:
                from stateops.control.s3_store import S3ControlStore  # boto3 only for a home on S3
                cls = S3ControlStore
            else:
                cls = LocalControlStore
        return super().__new__(cls)

    @abstractmethod
    def critical(self) -> AbstractContextManager[None]:
        """Hold the job's control lock (exclusive across processes and threads) for a read-check-write."""

    @abstractmethod
    def read(self, name: str) -> dict[str, Any] | None:
        """The record, None when there is none; read without the lock (records are replaced whole)."""

    @abstractmethod
    def write(self, name: str, record: dict[str, Any]) -> None:
        """Replace the record whole: readers see the old or the new one, never a mix."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove the record (gone already: nothing to do)."""


class LocalControlStore(ControlStore):
    """Records as files in `ops/<job>/control/` on a local or POSIX shared filesystem, locked with flock."""

    def __init__(self, layout: Layout, job: str):
        self.job = job
        variable = "STATEOPS_CONTROL_HOME" if layout.control else "STATEOPS_HOME"
        self.dir = os.path.join(Layout(local_home(layout.control_home, variable)).ops_dir(job), "control")

    def path(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.json")

    @contextmanager
    def critical(self) -> Iterator[None]:
        os.makedirs(self.dir, exist_ok=True)
        with thread_lock(self.dir):
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
                return parse_record(path, handle.read())
        except FileNotFoundError:
            return None

    def write(self, name: str, record: dict[str, Any]) -> None:
        path = self.path(name)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as handle:
            handle.write(render_record(record))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            pass
