"""Which backend serves a URL: the lock, records and entry log of local or POSIX shared storage (local.py) or
of S3 (s3.py); other storages have no atomic create, so none of the three lives there."""
from __future__ import annotations

from stateops.storage.local import LocalEntryLog, LocalLock, LocalRecords
from stateops.storage.locks import SUPPORTED, Lock, UnsupportedStorageError
from stateops.storage.paths import LOCAL, OTHER, S3, kind
from stateops.storage.records import EntryLog, Records
from stateops.storage.s3 import ObjectEntryLog, ObjectLock, ObjectRecords


def can_lock(url: str) -> bool:
    """Whether a lock (and records) can live at `url`: local or POSIX shared storage, or S3."""
    return kind(url) != OTHER


def lock_at(url: str, *, ttl: float, heartbeat: bool = False, name: str = "lock") -> Lock:
    """The lock at `url` on its backend (`name` says what it locks, in log lines); UnsupportedStorageError
    where no backend can create atomically."""
    where = kind(url)
    if where == LOCAL:
        return LocalLock(url, ttl, heartbeat, name)
    if where == S3:
        return ObjectLock(url, ttl, heartbeat, name)
    raise UnsupportedStorageError(f"{url}: no lock here ({url.split('://', 1)[0]}:// has no atomic create); "
                                  f"locks live on {SUPPORTED}")


def records_at(folder: str) -> Records:
    where = kind(folder)
    if where == LOCAL:
        return LocalRecords(folder)
    if where == S3:
        return ObjectRecords(folder)
    raise UnsupportedStorageError(f"{folder}: no records here (no atomic create); records live on {SUPPORTED}")


def entry_log_at(directory: str, name: str) -> EntryLog:
    where = kind(directory)
    if where == LOCAL:
        return LocalEntryLog(directory, name)
    if where == S3:
        return ObjectEntryLog(directory, name)
    raise UnsupportedStorageError(f"{directory}: no journal here (no atomic create); journals live on {SUPPORTED}")
