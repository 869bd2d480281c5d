"""One storage failure, one line: a store that cannot be reached, refuses or times out is a StorageFailure naming the
store, the path and the cause, wherever in StateOps the call was made.

Every object-store filesystem the storage layer hands out (`paths.filesystem`) is `Guarded`: each of its calls, and
each read or write of a file it opens, turns such an error into a StorageFailure. So a command cut off from its store
in the middle of its work ends as it would when the store was unreachable from the start: one line, exit 1 (a
StateOpsError), not botocore's traceback. A StorageFailure is an OSError too, so code that treats a store's OSError
as a file it could not read goes on doing so. The answers that are no failure pass as they are: a missing file, a
file that exists, a folder where a file was expected, and the reverse. Local disk is not guarded: its errors are
the kernel's, already one line (a full disk, a permission).
"""
from __future__ import annotations

import functools
import re
from typing import Any

from stateops.errors import OperationFailed, first_line

SETTINGS = "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION"
ANSWERS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CLIENTS = ("botocore", "aiobotocore", "aiohttp", "s3fs", "urllib3")  # whose errors are the store's


class StorageFailure(OperationFailed, OSError):
    """A call to a store failed: it could not be reached, refused the request or timed out (exit code 1)."""


def is_failure(err: BaseException) -> bool:
    """The store failed the call (not one of its answers, not a programming error)."""
    if isinstance(err, ANSWERS) or isinstance(err, StorageFailure):
        return False
    return isinstance(err, OSError) or type(err).__module__.split(".")[0] in _CLIENTS


def failure(where: str, operation: str, err: BaseException) -> StorageFailure:
    return StorageFailure(f"{where}: {operation} failed ({first_line(err)}). Fix: check the bucket exists, the "
                          f"endpoint is reachable and the S3 settings ({SETTINGS})")


def library_failure(err: BaseException) -> str | None:
    """One line for a store failure raised by a library's own client, outside the storage layer (delta-rs's
    object_store raises an OSError of many lines, its root cause last), or None when `err` is none."""
    if not (isinstance(err, OSError) or type(err).__module__.split(".")[0] in _CLIENTS or _delta_error(err)):
        return None
    lines = [_ANSI.sub("", line).strip(" ↳") for line in str(err).strip().splitlines()]
    lines = [line for line in lines if line]
    head = lines[0] if lines else type(err).__name__
    cause = lines[-1] if len(lines) > 1 else ""
    return (f"{head}{f' ({cause})' if cause and cause != head else ''}. Fix: check the store (reachable, its "
            f"settings: {SETTINGS}; space), then run the command again")


def _delta_error(err: BaseException) -> bool:
    try:
        from deltalake.exceptions import DeltaError
    except ImportError:
        return False
    return isinstance(err, DeltaError)


def _guard(call: Any, where: str, operation: str) -> Any:
    @functools.wraps(call)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = call(*args, **kwargs)
        except Exception as err:
            if is_failure(err):
                raise failure(_named(where, args), operation, err) from None
            raise
        return _File(result, _named(where, args)) if operation == "open" else result
    return guarded


def _named(where: str, args: tuple) -> str:
    """The path a call was about: its first argument when that is a path, else the store."""
    return args[0] if args and isinstance(args[0], str) else where


class _Proxy:
    """Every callable attribute of the wrapped object guarded (_guard); the rest as it is."""

    def __init__(self, wrapped: Any, where: str):
        self._wrapped, self._where = wrapped, where

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._wrapped, name)
        return _guard(found, self._where, name) if callable(found) and not name.startswith("_") else found


class Guarded(_Proxy):
    """An object store's fsspec filesystem, its failures as StorageFailure (see the module doc). `raw` is the
    filesystem itself, for a library that needs one (pyarrow's datasets)."""

    @property
    def raw(self) -> Any:
        return self._wrapped


class _File(_Proxy):
    """A file a Guarded filesystem opened: its reads, writes and close guarded, and a context manager."""

    def __enter__(self) -> "_File":
        _guard(self._wrapped.__enter__, self._where, "enter")()
        return self

    def __exit__(self, *exc: Any) -> None:
        _guard(self._wrapped.__exit__, self._where, "close")(*exc)

    def __iter__(self) -> Any:
        return iter(_guard(self._wrapped.readlines, self._where, "read")())
