"""Paths: one filesystem layer (fsspec) for every path, so the same code serves local disk, HDFS or object
stores, and the one place that reads a URL's scheme (`kind`).

Three kinds of storage, by what they can do: `local` (a path or file://: POSIX files, flock, rename),
`s3` (s3:// and s3a://, the same bucket either way: conditional writes, server-side copies, no rename) and
`other` (any other fsspec URL: readable and writable, but no atomic create, so no lock or record lives there).
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Any, Literal

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from stateops.extras import MissingExtra
from stateops.storage.failures import Guarded
from stateops.storage.timeouts import bounded, s3fs_options

Kind = Literal["local", "s3", "other"]
LOCAL, S3, OTHER = "local", "s3", "other"
_S3_SCHEMES = ("s3", "s3a")


# No listing cache for object stores: Spark (S3A), delta-rs and other processes write the same prefixes, and
# s3fs answered `info`/`open` of a file from a listing cached before that file was written (FileNotFoundError
# for a checkpoint's new commits/N in a runbook's archive step on S3; measured). Every listing asks the store.
fsspec.config.conf.setdefault("s3", {}).setdefault("use_listings_cache", False)

_LOCAL = LocalFileSystem()  # fsspec caches instances: url_to_fs hands out this same one for local paths
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def is_url(text: str) -> bool:
    """A URL (`scheme://...`, file:// among them), as opposed to a path: the one test of "URL or path"."""
    return bool(_URL.match(text or ""))


def absolute(path: str) -> str:
    """A URL as it is; a path made absolute (against the working directory)."""
    return path if is_url(path) else os.path.abspath(path)


def kind(url: str) -> Kind:
    """What storage `url` is on (see the module doc): the one place a scheme is read."""
    if "://" not in url:
        return LOCAL
    scheme = url.split("://", 1)[0].lower()
    return LOCAL if scheme == "file" else S3 if scheme in _S3_SCHEMES else OTHER


def local_path(url: str) -> str | None:
    """`url` as a local path (file:// stripped), None for any other storage."""
    return url.removeprefix("file://") if kind(url) == LOCAL else None


def comparable(url: str) -> str:
    """One text per location however Spark or a config writes it: `file:` URLs (`file:/x`, `file:///x`) as local
    paths, `s3a://` as `s3://`, no trailing slash (an adopted checkpoint's recorded files against a job's folders)."""
    if url.startswith("file:"):
        url = "/" + url[len("file:"):].lstrip("/")
    elif kind(url) == S3:
        url = "s3://" + url.split("://", 1)[1]
    return url.rstrip("/")


def one_store(a: str, b: str) -> bool:
    """Both URLs on one object store (one fsspec filesystem: one endpoint and credentials), which can copy a file
    from one to the other itself, with no byte through this process."""
    if kind(a) != S3 or kind(b) != S3:
        return False
    return filesystem(a)[0].raw is filesystem(b)[0].raw


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that serves `path` and the path as that filesystem names it (an object store's Guarded: its
    failures one line, stateops.storage.failures). A plain local path takes
    the answer url_to_fs would give without parsing it as a URL chain (a sensor tick resolves tens of paths
    per job: at 1,000 jobs the parsing was a third of a tick)."""
    if _plain_local(path):
        return _LOCAL, _LOCAL._strip_protocol(path)
    try:
        fs, inner = url_to_fs(path, **(s3fs_options() if kind(path) == S3 else {}))
        if kind(path) == S3:
            bounded(fs)
    except ImportError:  # fsspec names the missing implementation (s3fs); StateOps names its extra
        if kind(path) == S3:
            raise MissingExtra("s3", f"{path} is on S3") from None
        raise
    return (fs if isinstance(fs, LocalFileSystem) else Guarded(fs, path)), inner


def _plain_local(path: str) -> bool:
    return "://" not in path and "::" not in path


def _os_path(path: str) -> str:
    """A plain local path as fsspec's local filesystem reads it (`~` expanded; relative to the working folder)."""
    return os.path.expanduser(path) if path.startswith("~") else path


def exists(path: str) -> bool:
    if _plain_local(path):  # fsspec's local exists normalizes the path first: 10x the stat itself
        return os.path.exists(_os_path(path))
    fs, p = filesystem(path)
    return fs.exists(p)


def is_dir(path: str) -> bool:
    if _plain_local(path):
        return os.path.isdir(_os_path(path))
    fs, p = filesystem(path)
    return fs.isdir(p)


def read_text(path: str) -> str:
    """The whole file at `path` as text (FileNotFoundError when absent); on local disk without fsspec's file
    object (a tick reads the offset log's last batch of every job)."""
    if _plain_local(path):
        with open(_os_path(path), encoding="utf-8") as handle:
            return handle.read()
    fs, p = filesystem(path)
    with fs.open(p, "r") as handle:
        return handle.read()


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The file at `path` as bytes, its first `limit` bytes only when given (FileNotFoundError when absent)."""
    fs, p = filesystem(path)
    with fs.open(p, "rb") as handle:
        return handle.read() if limit is None else handle.read(limit)


def makedirs(path: str) -> None:
    """The folder `path` and its parents (an object store has no folders: nothing to do there but what fsspec does)."""
    fs, p = filesystem(path)
    fs.makedirs(p, exist_ok=True)


def write_text(path: str, text: str, *, replace: bool = False) -> None:
    """Write the whole file at `path` (its folder made first). `replace`: through a temporary file, fsync and a
    rename, so that a reader sees the old or the new text, never a part (on an object store every PUT is whole)."""
    _write(path, text, "w", replace)


def write_bytes(path: str, data: bytes) -> None:
    """Write the whole file at `path` (its folder made first)."""
    _write(path, data, "wb", False)


def _write(path: str, data: str | bytes, mode: str, replace: bool) -> None:
    fs, p = filesystem(path)
    fs.makedirs(posixpath.dirname(p), exist_ok=True)
    target = f"{p}.tmp" if replace else p
    with fs.open(target, mode) as handle:
        handle.write(data)
        handle.flush()
        if replace and hasattr(handle, "fileno"):
            try:
                os.fsync(handle.fileno())
            except (OSError, ValueError):
                pass
    if replace:
        fs.mv(target, p)


def append_text(path: str, text: str) -> None:
    """Append to the local file at `path` (its folder made first); an object store cannot append."""
    fs, p = filesystem(path)
    fs.makedirs(posixpath.dirname(p), exist_ok=True)
    with fs.open(p, "a") as handle:
        handle.write(text)


def remove(path: str) -> bool:
    """Remove the file at `path`; whether it was there."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        return False
    fs.rm(p)
    return True


def remove_all(paths: list[str]) -> None:
    """Remove the files at `paths` (all on one store) in one call: on an object store a batched delete, not a
    request per file (retention removes thousands of a checkpoint's old files at once)."""
    if paths:
        fs, _ = filesystem(paths[0])
        fs.rm([filesystem(p)[1] for p in paths])


def move_file(source: str, dest: str) -> None:
    """Move the file at `source` to `dest` on the same store (its folder made first): a rename on local disk, a
    server-side copy and a delete on an object store."""
    fs, src = filesystem(source)
    dst = filesystem(dest)[1]
    fs.makedirs(posixpath.dirname(dst), exist_ok=True)
    fs.mv(src, dst)


def names(path: str, *, folders: bool | None = None) -> list[str] | None:
    """The names of the entries of folder `path` (not their paths), None when there is no such folder; `folders`:
    only its folders (True) or only its files (False), from the same one listing. On local disk one os.listdir
    (os.scandir when filtered), where fsspec's local `ls` stats the folder and normalizes every entry's path: a
    sensor tick lists the commit log of every job's checkpoint, and at 1,000 jobs those listings were most of it."""
    if _plain_local(path):
        try:
            if folders is None:
                return os.listdir(_os_path(path))
            with os.scandir(_os_path(path)) as entries:
                return [entry.name for entry in entries if entry.is_dir() == folders]
        except (FileNotFoundError, NotADirectoryError):
            return None
    fs, p = filesystem(path)
    if not fs.isdir(p):
        return None
    return [posixpath.basename(info["name"].rstrip("/")) for info in fs.ls(p, detail=True)
            if folders is None or (info["type"] == "directory") == folders]


def files_under(path: str) -> dict[str, dict[str, Any]]:
    """Every file under the folder `path` by its path relative to it, with its info (`size`, `mtime`); {} when
    there is no such folder. Hidden files are included; an object store's empty folder markers are not files."""
    fs, base = filesystem(path)
    base = base.rstrip("/")
    return {found[len(base) + 1:]: info for found, info in find_files(fs, base).items() if not found.endswith("/")}


def find_files(fs: fsspec.AbstractFileSystem, base: str) -> dict[str, dict[str, Any]]:
    """Every file under `base` (as `filesystem` names it) with its info (`size`, `mtime`, `type`), as
    `fs.find(base, detail=True, withdirs=False)` gives it. On local disk: one scandir walk that reads each
    entry's stat once, where fsspec's local `find` calls `info()` (two stats and path handling) per entry,
    about 5x slower; a sensor tick lists the state of every job's checkpoint."""
    if not isinstance(fs, LocalFileSystem):
        return fs.find(base, detail=True, withdirs=False)
    found: dict[str, dict[str, Any]] = {}
    pending = [base.rstrip("/") or "/"]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir():
                pending.append(entry.path)
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:  # removed while listed (a temp file renamed): as if listed before
                continue
            found[entry.path] = {"name": entry.path, "size": stat.st_size, "type": "file", "mtime": stat.st_mtime}
    return found


