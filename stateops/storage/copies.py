"""Copies of a tree of files (a checkpoint), checksummed as they are read and verified by reading them back.

A copy reads every file once (sha256 computed while copying) and is then verified by reading the copy back
against those sums; a rename (one local filesystem) moves without copying, and is verified by the caller the
same way. On an object store the bytes stay on the server: within one store (one fsspec filesystem, i.e. one
endpoint and credentials) each file is checksummed by reading it and then copied by the store itself (s3fs
`copy`: CopyObject, a multipart UploadPartCopy above 5 GB), and the copy is verified by reading it back like
any other. S3 has no rename: a move there is that server-side copy, verified, then the removal of the source,
so the source goes only once its copy is known good.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from typing import Any, Iterable

from stateops.errors import OperationFailed
from stateops.storage.paths import filesystem, local_path, one_store

_CHUNK = 1 << 20


class CopyNotVerified(OperationFailed):
    """A copy does not match the sums of its source."""


@dataclass(frozen=True)
class FileEntry:
    path: str    # relative to the checkpoint root
    size: int
    sha256: str


def tree_size(root: str) -> int:
    fs, p = filesystem(root)
    if not fs.exists(p):
        return 0
    return sum(int(info.get("size") or 0) for info in fs.find(p, detail=True).values())


def _files(root: str) -> list[tuple[str, str]]:
    """(relative path, absolute path) of every file under `root`, hidden ones (checksums) included. On S3 the
    empty `<folder>/` keys Hadoop's S3A writes as directory markers (s3fs lists them as files) are no files of
    the checkpoint: skipped, else the marker of `root` itself would be archived as a file named `.`."""
    fs, p = filesystem(root)
    base = p.rstrip("/")
    return sorted((posixpath.relpath(f, base), f) for f in fs.find(base) if not f.endswith("/"))


def _digest(fs, path: str) -> tuple[int, str]:
    sha, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return size, sha.hexdigest()


def digest(url: str) -> tuple[int, str] | None:
    """(size, sha256) of the file at `url`, None when there is none."""
    fs, path = filesystem(url)
    try:
        return _digest(fs, path)
    except FileNotFoundError:
        return None


def copy_file(source: str, dest: str) -> tuple[int, str]:
    """Copy one file (its folder created), checksumming the bytes as they are read, server-side within one object
    store (the sum then read from the source); returns (size, sha256) of the source."""
    src_fs, src = filesystem(source)
    dst_fs, dst = filesystem(dest)
    if one_store(source, dest):
        found = _digest(src_fs, src)
        src_fs.copy(src, dst)
        return found
    dst_fs.makedirs(posixpath.dirname(dst), exist_ok=True)
    sha, size = hashlib.sha256(), 0
    with src_fs.open(src, "rb") as reader, dst_fs.open(dst, "wb") as writer:
        while chunk := reader.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
            writer.write(chunk)
    return size, sha.hexdigest()


def listing(root: str) -> list[FileEntry]:
    fs, _ = filesystem(root)
    entries = []
    for rel, path in _files(root):
        size, sha = _digest(fs, path)
        entries.append(FileEntry(rel, size, sha))
    return entries


def copy_tree(source: str, dest: str) -> list[FileEntry]:
    """Copy every file of `source` into `dest` (created), checksumming the bytes as they are read; within one
    object store the checksum reads the source and the store copies it (server-side; see the module doc)."""
    entries = []
    for rel, _path in _files(source):
        size, sha = copy_file(posixpath.join(source.rstrip("/"), rel), posixpath.join(dest.rstrip("/"), rel))
        entries.append(FileEntry(rel, size, sha))
    return entries


def verify_tree(root: str, files: Iterable[dict[str, Any]]) -> list[str]:
    """Problems of `root` against a manifest's files (missing, extra, other size or sum); [] when it matches."""
    fs, p = filesystem(root)
    if not fs.exists(p):
        return [f"{root} is missing"]
    expected = {f["path"]: f for f in files}
    present = dict(_files(root))
    problems = [f"missing {rel}" for rel in sorted(set(expected) - set(present))]
    problems += [f"unexpected {rel}" for rel in sorted(set(present) - set(expected))]
    for rel in sorted(set(expected) & set(present)):
        size, sha = _digest(fs, present[rel])
        if size != expected[rel]["size"] or sha != expected[rel]["sha256"]:
            problems.append(f"{rel}: {size} bytes sha256 {sha[:12]}, manifest says {expected[rel]['size']} bytes "
                            f"sha256 {expected[rel]['sha256'][:12]}")
    return problems


def remove_tree(path: str) -> None:
    fs, p = filesystem(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


def move_tree(source: str, dest: str) -> None:
    """Rename when both are local paths on one filesystem; else (another filesystem, or an object store,
    which has no rename) copy, verify, and only then remove the source."""
    if local_path(source) is not None and same_filesystem(source, posixpath.dirname(dest.rstrip("/"))):
        local_dest = local_path(dest).rstrip("/")
        os.makedirs(posixpath.dirname(local_dest), exist_ok=True)
        os.rename(local_path(source), local_dest)
        return
    remove_tree(dest)
    entries = copy_tree(source, dest)
    problems = verify_tree(dest, [e.__dict__ for e in entries])
    if problems:
        raise CopyNotVerified(f"copy of {source} to {dest} does not verify: {problems[0]}")
    remove_tree(source)


# --- space ------------------------------------------------------------------------------------------------

def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def same_filesystem(a: str, b: str) -> bool:
    """Whether a checkpoint at `a` can move to `b` without this process copying its bytes: one local
    filesystem (a rename), or one S3 store (a server-side copy; see move_tree)."""
    la, lb = local_path(a), local_path(b)
    if la is None or lb is None:
        return one_store(a, b)
    return os.stat(_existing_ancestor(la)).st_dev == os.stat(_existing_ancestor(lb)).st_dev


def free_bytes(path: str) -> int | None:
    """Free bytes on the filesystem that holds (or will hold) `path`; None where it cannot be measured: an
    object store has no statvfs and no free space to run out of that its API tells, so the preflight's room
    check applies to local disks (and POSIX mounts) only."""
    local = local_path(path)
    if local is None:
        return None
    stats = os.statvfs(_existing_ancestor(local))
    return stats.f_bavail * stats.f_frsize


def writable(path: str) -> bool:
    local = local_path(path)
    return True if local is None else os.access(_existing_ancestor(local), os.W_OK)
