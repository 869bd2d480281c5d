"""One lock interface for every backend: the job's control lock, retention's lock per root, a runbook's lock.

A lock is one file or object at a URL whose content is its holder's record (who, since when, a token). What
every implementation promises:
  acquire(record, wait)  take it, trying again for up to `wait` seconds while another holder has it; then
                         LockBusy naming that holder. Exclusive across processes and across threads of one
                         process (a process-wide registry per URL: flock emulated on NFS does not exclude
                         threads, and an object store cannot tell a process's threads apart).
  renew()                confirm this holder still holds it (and restart its TTL); LockLost when another holder
                         took it over, so a paused holder writes nothing after the fact.
  lost                   why the lock was lost while held (None while it holds).
  release()              give it up; never removes a lock another holder took over; a failure is logged, not
                         raised (it must not hide what the holder did, and the lock goes stale by itself).
  holder(), live()       the current holder's record; whether some process holds it now.
The one TTL rule, on every backend: a lock not renewed for `ttl` seconds may be taken over, so no holder keeps it
past that bound, however it stopped (dead, frozen by SIGSTOP or a stopped VM, cut off from the store); a holder
taken over learns it at its next renewal (LockLost) and writes nothing more. A dead holder's lock is free at once on
its own host, on every backend alike: on local disk (LocalLock: flock) the kernel releases it with the process; an
object store's lock (ObjectLock: conditional writes) whose record names a process of this host that runs no more
(stateops.storage.holders: host, pid and its start time) is taken over at once. A holder on another host is judged
by the lock's age alone (an object store's: by the server's clock). A long-lived holder asks for a heartbeat (renewal every
ttl / 4, from a thread); a short critical section renews before each write instead.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator

from stateops.errors import OperationFailed, StateOpsError


SUPPORTED = ("a local path or POSIX shared storage with working flock (e.g. an NFSv4 mount), or S3 (s3://, s3a://: "
             "conditional writes)")


class LockBusy(StateOpsError):
    """Another holder has the lock: `holder` is its record ({} when unreadable), `age` how old its lock is
    (seconds, by the server's clock; None on local disk, where a lock lives exactly as long as its holder)."""

    def __init__(self, url: str, holder: dict[str, Any], age: float | None, ttl: float):
        self.url, self.holder, self.age, self.ttl = url, holder, age, ttl
        super().__init__(f"{url} is held by {describe(holder)}")


class LockLost(OperationFailed):
    """The lock was taken over while this holder held it."""


class UnsupportedStorageError(StateOpsError):
    """A lock or record was asked for on a storage with no atomic create (neither local nor S3)."""


def describe(holder: dict[str, Any]) -> str:
    """A holder's record in words, for refusals."""
    if not holder:
        return "another process (no details recorded yet)"
    words = f"pid {holder.get('pid')}"
    if holder.get("thread"):
        words += f" (thread {holder.get('thread')})"
    return words + f" on {holder.get('host')}" + (f", since {holder['since']}" if holder.get("since") else "")


_THREADS: dict[str, threading.Lock] = {}
_THREADS_GUARD = threading.Lock()


def thread_lock(url: str) -> threading.Lock:
    """The process-wide lock of one lock URL (threads of one process exclude each other on it)."""
    with _THREADS_GUARD:
        return _THREADS.setdefault(url, threading.Lock())


class Lock(ABC):
    """A lock at `url` (see the module doc)."""

    def __init__(self, url: str, ttl: float, heartbeat: bool, name: str):
        self.url, self.ttl, self.heartbeat, self.name = url, ttl, heartbeat, name
        self.lost: str | None = None
        self._thread: threading.Lock | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def acquire(self, record: dict[str, Any], wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        mine = thread_lock(self.url)
        taken = mine.acquire(timeout=wait) if wait > 0 else mine.acquire(blocking=False)
        if not taken:
            raise self._busy()
        try:
            self._take(record, deadline)
        except BaseException:
            mine.release()
            raise
        self._thread, self.lost = mine, None
        if self.heartbeat:
            self._stop.clear()
            self._beat = threading.Thread(target=self._beats, name=f"{self.name} {self.url}", daemon=True)
            self._beat.start()

    def _beats(self) -> None:
        while not self._stop.wait(self.ttl / 4):
            try:
                self.renew()
            except LockLost:
                return
            except (OSError, OperationFailed):
                continue  # the store failed this once: the next beat tries again, within the ttl

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        try:
            self._give_up()
        finally:
            mine, self._thread = self._thread, None
            if mine is not None:
                mine.release()

    @contextmanager
    def held(self, record: dict[str, Any], wait: float = 0.0) -> Iterator["Lock"]:
        self.acquire(record, wait)
        try:
            yield self
        finally:
            self.release()

    @abstractmethod
    def _take(self, record: dict[str, Any], deadline: float) -> None:
        """Take the lock across processes, trying until `deadline` (time.monotonic()); this thread already
        excludes the others of its process."""

    @abstractmethod
    def _give_up(self) -> None:
        """Release it across processes."""

    @abstractmethod
    def _busy(self) -> LockBusy:
        """LockBusy for the current holder (another thread of this process holds the lock)."""

    @abstractmethod
    def renew(self) -> None:
        """Confirm this holder still holds the lock; LockLost when it was taken over."""

    @abstractmethod
    def holder(self) -> dict[str, Any]:
        """The current holder's record, {} when there is none or it is unreadable."""

    @abstractmethod
    def live(self) -> bool:
        """Some process holds the lock now."""


