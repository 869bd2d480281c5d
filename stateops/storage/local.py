"""The storage layer on local disk (or POSIX shared storage with working flock, e.g. NFSv4).

  lock     an exclusive `fcntl.flock` on the lock's file, kept open while held; the holder's record is written
           into the file. The kernel releases it when the process dies, so a dead holder never blocks anyone
           and there is nothing to renew or lose.
  records  one JSON file per record, replaced whole (temp file, fsync, rename), created only if absent
           (a hard link, which fails when the name exists); a record's version is its file's identity.
  entries  an append-only log of JSON lines, each appended and fsynced before the caller goes on.
"""
from __future__ import annotations

import fcntl
import json
import os
import random
import threading
import time
from typing import Any

from stateops.storage.locks import Lock, LockBusy
from stateops.storage.paths import local_path
from stateops.storage.records import EntryLog, Records, parse_record, render_record

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

    def _take(self, record: dict[str, Any], deadline: float) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        pause = RETRY_FIRST_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_record(fd)
                    os.close(fd)
                    raise LockBusy(self.url, holder, None, self.ttl) from None
                time.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(2 * pause, RETRY_MAX_SECONDS)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd

    def _give_up(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.ftruncate(fd, 0)
            os.close(fd)  # releases the flock

    def renew(self) -> None:
        """Nothing to renew: the kernel holds the lock for as long as the process lives."""

    def _busy(self) -> LockBusy:
        return LockBusy(self.url, self.holder(), None, self.ttl)

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
        if not os.path.exists(self.path):
            return False
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


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
