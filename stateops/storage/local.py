"""The storage layer on local disk (or POSIX shared storage with working flock, e.g. NFSv4).

  lock     an exclusive `fcntl.flock` on the lock's file, kept open while held; the holder's record is written
           into the file. The kernel releases it when the process dies, so a dead holder never blocks anyone. A
           holder that lives but does not move (frozen by SIGSTOP, a stopped VM, a hung mount) is taken over once
           its file has not been renewed for the lock's ttl (its mtime, by this host's clock; the file server's on
           NFS): the taker replaces the file by a new one (a new inode) and locks that, leaving the frozen holder
           its flock on an inode no name points to. Renewal touches the file and checks that the name still
           points at the holder's inode; a holder taken over finds that it does not (LockLost) and writes nothing.
           Every taker checks the same after its flock, so of racing takers one holds the lock the name points to.
  records  one JSON file per record, replaced whole (temp file, fsync, rename), created only if absent
           (a hard link, which fails when the name exists); a record's version is its file's identity.
  entries  an append-only log of JSON lines, each appended and fsynced before the caller goes on.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import threading
import time
from typing import Any

from stateops.storage.locks import Lock, LockBusy, LockLost, describe
from stateops.storage.paths import local_path
from stateops.storage.records import EntryLog, Records, parse_record, render_record

log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS, RETRY_MAX_SECONDS = 0.005, 0.25  # the pause before trying a busy lock again: doubling, jittered


def _read_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 65536).decode() or "{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


class LocalLock(Lock):
    def __init__(self, url: str, ttl: float, heartbeat: bool, name: str):
        super().__init__(url, ttl, heartbeat, name)
        self.path = local_path(url)
        self._fd: int | None = None
        self._inode: int | None = None

    def _take(self, record: dict[str, Any], deadline: float) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        pause = RETRY_FIRST_SECONDS
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stat = os.fstat(fd)
                holder, age = _read_record(fd), time.time() - stat.st_mtime
                os.close(fd)
                if age >= self.ttl:
                    self._replace_stale(stat.st_ino, holder, age)
                    continue
                if time.monotonic() >= deadline:
                    raise LockBusy(self.url, holder, age, self.ttl) from None
                time.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(2 * pause, RETRY_MAX_SECONDS)
                continue
            inode = os.fstat(fd).st_ino
            if inode != _inode_at(self.path):  # a taker replaced the file between our open and our flock
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
            self._fd, self._inode = fd, inode
            return

    def _replace_stale(self, inode: int, holder: dict[str, Any], age: float) -> None:
        """Point the lock's name at a new, unlocked file: the holder that has not renewed for `age` >= ttl keeps
        its flock on the old inode (`inode`), which no name reaches any more. Left alone when another taker
        replaced it first."""
        fresh = f"{self.path}.{os.getpid()}.{threading.get_ident()}.new"
        with open(fresh, "w"):
            pass
        if _inode_at(self.path) != inode:
            os.unlink(fresh)
            return
        os.replace(fresh, self.path)
        log.warning("took over the %s %s of %s, not renewed for %.0f s (ttl %g s): its holder is frozen or cut off",
                    self.name, self.url, describe(holder), age, self.ttl)

    def _give_up(self) -> None:
        fd, self._fd, self._inode = self._fd, None, None
        if fd is not None:
            if self.lost is None:
                os.ftruncate(fd, 0)
            os.close(fd)  # releases the flock

    def renew(self) -> None:
        """Touch the lock's file (its mtime is its age), after checking its name still points at this holder's
        inode; LockLost when a taker replaced it."""
        if self.lost is not None:
            raise LockLost(f"{self.url}: {self.lost}")
        if self._fd is None:
            return
        if _inode_at(self.path) != self._inode:
            self.lost = f"its lock {self.url} was taken over by another process (not renewed for {self.ttl:g} s)"
            raise LockLost(f"{self.url}: {self.lost}")
        os.utime(self._fd)

    def _busy(self) -> LockBusy:
        try:
            age = time.time() - os.stat(self.path).st_mtime
        except FileNotFoundError:
            age = 0.0
        return LockBusy(self.url, self.holder(), age, self.ttl)

    def holder(self) -> dict[str, Any]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return {}
        try:
            return _read_record(fd)
        finally:
            os.close(fd)

    def live(self) -> bool:
        """Some process holds the lock and renewed it within the ttl (an older one would be taken over)."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return time.time() - os.fstat(fd).st_mtime < self.ttl
        finally:
            os.close(fd)
        return False


def _inode_at(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


class LocalRecords(Records):
    def __init__(self, folder: str):
        self.folder = local_path(folder)

    def where(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.json")

    def read_versioned(self, name: str) -> tuple[dict[str, Any] | None, str | None]:
        path = self.where(name)
        try:
            with open(path) as handle:
                stat = os.fstat(handle.fileno())
                return parse_record(path, handle.read()), f"{stat.st_ino}-{stat.st_mtime_ns}"
        except FileNotFoundError:
            return None, None

    def _temp(self, name: str, record: dict[str, Any]) -> str:
        os.makedirs(self.folder, exist_ok=True)
        tmp = f"{self.where(name)}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as handle:
            handle.write(render_record(record))
            handle.flush()
            os.fsync(handle.fileno())
        return tmp

    def write(self, name: str, record: dict[str, Any]) -> None:
        os.replace(self._temp(name, record), self.where(name))

    def write_if(self, name: str, record: dict[str, Any], version: str | None) -> bool:
        """The version checked just before the rename (records.py: what this proves on local disk)."""
        tmp = self._temp(name, record)
        if self.read_versioned(name)[1] != version:
            os.unlink(tmp)
            return False
        os.replace(tmp, self.where(name))
        return True

    def create(self, name: str, record: dict[str, Any]) -> bool:
        tmp = self._temp(name, record)
        try:
            os.link(tmp, self.where(name))
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.where(name))
        except FileNotFoundError:
            pass


class LocalEntryLog(EntryLog):
    """`<directory>/<name>.jsonl`: one JSON object per line (a line cut short by a crash is skipped)."""

    def __init__(self, directory: str, name: str):
        self.directory = local_path(directory)
        self.path = os.path.join(self.directory, f"{name}.jsonl")

    def read(self) -> list[dict[str, Any]]:
        if not os.path.exists(self.path):
            return []
        entries = []
        with open(self.path) as handle:
            for line in handle:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue
        return entries

    def append(self, seq: int, entry: str) -> bool:
        """Appends only while the log holds `seq` readable entries (the writer's lock keeps others out; this
        catches a writer that read the log before another wrote). A line a crash cut short is ended first, so
        the new entry starts on a line of its own."""
        if len(self.read()) != seq:
            return False
        os.makedirs(self.directory, exist_ok=True)
        with open(self.path, "a+b") as handle:
            cut = False
            if handle.seek(0, os.SEEK_END) > 0:
                handle.seek(-1, os.SEEK_END)
                cut = handle.read(1) != b"\n"
            handle.write((b"\n" if cut else b"") + entry.encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        return True
