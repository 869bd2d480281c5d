"""The storage layer: every path, lock, record and copy of StateOps goes through it, whatever the backend.

- paths.py   fsspec filesystems for any URL, and `kind(url)`: the one place a scheme is read
- aws.py     the AWS SDK's variables mapped to every client (s3fs, delta-rs, Spark's S3A)
- locks.py   one lock interface (acquire with or without waiting, renew, release, holder, lost)
- records.py one record interface (replace whole, create if absent, read with version) and an entry log
- copies.py  copies of a tree checksummed as they are read, verified against the sums, moved safely
- failures.py  one storage failure, one line: an object store's every call (Guarded) fails as StorageFailure
- holders.py   who holds a lock (host, pid, its start time): a dead holder on this host holds nothing
- local.py, s3.py  the two backends: flock and files on local or POSIX shared storage; conditional writes on S3
- backends.py      which backend serves a URL

Adding a backend is one module implementing Lock, Records and EntryLog, its branch in `paths.kind` and
`backends`, and the contract suite (tests/e2e/test_storage_contract.py) run against it.
"""
from stateops.storage.aws import s3a_conf, storage_options
from stateops.storage.backends import can_lock, entry_log_at, lock_at, records_at
from stateops.storage.failures import StorageFailure
from stateops.storage.locks import SUPPORTED, Lock, LockBusy, LockLost, UnsupportedStorageError, describe
from stateops.storage.paths import (LOCAL, OTHER, S3, absolute, append_text, comparable, exists, files_under,
                                   filesystem, find_files, is_dir, is_url, kind, local_path, makedirs, move_file,
                                   names, one_store, read_bytes, read_text, remove, remove_all, write_bytes, write_text)
from stateops.storage.records import EntryLog, Records, parse_record, render_record

__all__ = ["EntryLog", "LOCAL", "Lock", "LockBusy", "LockLost", "OTHER", "Records", "S3", "SUPPORTED", "StorageFailure",
           "UnsupportedStorageError", "absolute", "append_text", "can_lock", "comparable", "describe", "entry_log_at",
           "exists", "files_under", "filesystem", "find_files", "is_dir", "is_url", "kind", "local_path", "lock_at",
           "makedirs", "move_file", "names", "one_store", "parse_record", "read_bytes", "read_text", "records_at", "remove",
           "remove_all", "render_record", "s3a_conf", "storage_options", "write_bytes", "write_text"]
