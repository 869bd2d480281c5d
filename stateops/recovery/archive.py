"""Archives: a runbook's verified copy of a checkpoint, with a manifest, next to the runbook's journal.

    <archive root>/<runbook id>/          archive root: the job's `archive_dir` (default ops/<job>/archives)
        plan.json                          the plan as confirmed
        journal.jsonl                      every step, before and after (stateops.recovery.journal)
        manifest.json                      files (relative path, size, sha256), latest batch, watermark,
                                           settings, sink version and epoch, the before-audit, reason, actor
        checkpoint/                        the archived checkpoint
        failed-attempt/                    after a rollback: the checkpoint of the attempt that failed
        report.json                        how the runbook ended

A copy reads every file once (checksums computed while copying) and is then verified by reading the copy
back against the manifest; a rename (same filesystem, modes that replace the checkpoint: rebuild, restore)
checksums the files first, renames, and verifies the same way. The manifest is written before the data
is final, and an archive counts as complete only once `verify` finds every file with its size and sum.

On an object store (S3) the bytes stay on the server: within one store (one fsspec filesystem, i.e. one
endpoint and credentials) each file is checksummed by reading it and then copied by the store itself
(s3fs `copy`: CopyObject, a multipart UploadPartCopy above 5 GB), and the copy is verified by reading it
back like any other. S3 has no rename: a "rename" there is that server-side copy, verified, then the removal
of the source, so the source goes only once its copy is known good.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from fsspec.implementations.local import LocalFileSystem

from stateops.errors import ConfigError, OperationFailed
from stateops.fs import S3_SCHEMES, filesystem, scheme

PLAN = "plan.json"
JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
REPORT = "report.json"
CHECKPOINT = "checkpoint"
FAILED = "failed-attempt"
_CHUNK = 1 << 20


class ArchiveError(OperationFailed):
    """An archive is missing, incomplete, or does not match its manifest."""


def runbook_dir(archive_root: str, runbook_id: str) -> str:
    return posixpath.join(archive_root.rstrip("/"), runbook_id)


def new_runbook_id(job: str, now: datetime | None = None) -> str:
    """`<job>-<UTC time>-<random>`: sortable, unique, and names its job (archives are found by id)."""
    moment = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{job}-{moment}-{os.urandom(3).hex()}"


RUNBOOK_ID = re.compile(r"^(?P<job>[a-z][a-z0-9_]{0,62})-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$")


def job_of(runbook_id: str) -> str:
    """The job an archive (runbook) id names; an id that is not of new_runbook_id's grammar (a `/`, a `..`, any
    other shape) is refused before any path is built from it."""
    match = RUNBOOK_ID.match(runbook_id or "")
    if match is None:
        raise ConfigError("archive id", f"{runbook_id!r} is not an archive id",
                          "use an id as `stateops archives list JOB` prints it: JOB-YYYYMMDDTHHMMSSZ-xxxxxx")
    return match.group("job")


def write_json(path: str, data: Any) -> None:
    """Replace `path` whole (temp file, fsync, rename): readers see the old or the new document."""
    fs, p = filesystem(path)
    fs.makedirs(posixpath.dirname(p), exist_ok=True)
    tmp = f"{p}.tmp"
    with fs.open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True, default=str)
        handle.flush()
        if hasattr(handle, "fileno"):
            try:
                os.fsync(handle.fileno())
            except (OSError, ValueError):
                pass
    fs.mv(tmp, p)


def read_json(path: str) -> Any | None:
    fs, p = filesystem(path)
    if not fs.exists(p):
        return None
    with fs.open(p, "r") as handle:
        return json.load(handle)


# --- file listings ----------------------------------------------------------------------------------------

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


def listing(root: str) -> list[FileEntry]:
    fs, _ = filesystem(root)
    entries = []
    for rel, path in _files(root):
        size, sha = _digest(fs, path)
        entries.append(FileEntry(rel, size, sha))
    return entries


def _one_store(src_fs, dst_fs) -> bool:
    """Both sides in one object store, which can copy a file itself (no byte through this process)."""
    return src_fs is dst_fs and not isinstance(src_fs, LocalFileSystem)


def copy_tree(source: str, dest: str) -> list[FileEntry]:
    """Copy every file of `source` into `dest` (created), checksumming the bytes as they are read; within one
    object store the checksum reads the source and the store copies it (server-side; see the module doc)."""
    src_fs, _ = filesystem(source)
    dst_fs, dst = filesystem(dest)
    server_side = _one_store(src_fs, dst_fs)
    entries = []
    for rel, path in _files(source):
        target = posixpath.join(dst, rel)
        if server_side:
            size, sha = _digest(src_fs, path)
            src_fs.copy(path, target)
            entries.append(FileEntry(rel, size, sha))
            continue
        dst_fs.makedirs(posixpath.dirname(target), exist_ok=True)
        sha, size = hashlib.sha256(), 0
        with src_fs.open(path, "rb") as reader, dst_fs.open(target, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                sha.update(chunk)
                size += len(chunk)
                writer.write(chunk)
        entries.append(FileEntry(rel, size, sha.hexdigest()))
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
    if _local(source) is not None and same_filesystem(source, posixpath.dirname(dest.rstrip("/"))):
        local_dest = _local(dest).rstrip("/")
        os.makedirs(posixpath.dirname(local_dest), exist_ok=True)
        os.rename(_local(source), local_dest)
        return
    remove_tree(dest)
    entries = copy_tree(source, dest)
    problems = verify_tree(dest, [e.__dict__ for e in entries])
    if problems:
        raise ArchiveError(f"copy of {source} to {dest} does not verify: {problems[0]}")
    remove_tree(source)


# --- space ------------------------------------------------------------------------------------------------

def _local(path: str) -> str | None:
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if "://" in path else path


def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def same_filesystem(a: str, b: str) -> bool:
    """Whether a checkpoint at `a` can move to `b` without this process copying its bytes: one local
    filesystem (a rename), or one S3 store (a server-side copy; see move_tree)."""
    la, lb = _local(a), _local(b)
    if la is None or lb is None:
        return (scheme(a) in S3_SCHEMES and scheme(b) in S3_SCHEMES
                and _one_store(filesystem(a)[0], filesystem(b)[0]))
    return os.stat(_existing_ancestor(la)).st_dev == os.stat(_existing_ancestor(lb)).st_dev


def free_bytes(path: str) -> int | None:
    """Free bytes on the filesystem that holds (or will hold) `path`; None where it cannot be measured: an
    object store has no statvfs and no free space to run out of that its API tells, so the preflight's room
    check applies to local disks (and POSIX mounts) only."""
    local = _local(path)
    if local is None:
        return None
    stats = os.statvfs(_existing_ancestor(local))
    return stats.f_bavail * stats.f_frsize


def writable(path: str) -> bool:
    local = _local(path)
    return True if local is None else os.access(_existing_ancestor(local), os.W_OK)


# --- reading archives ------------------------------------------------------------------------------------

def manifest(archive_root: str, runbook_id: str) -> dict[str, Any] | None:
    return read_json(posixpath.join(runbook_dir(archive_root, runbook_id), MANIFEST))


def verify(archive_root: str, runbook_id: str) -> list[str]:
    """Problems of an archive's checkpoint copy against its manifest; [] when it verifies."""
    found = manifest(archive_root, runbook_id)
    if found is None:
        return [f"{runbook_dir(archive_root, runbook_id)}: no manifest (not an archive, or not finished)"]
    return verify_tree(posixpath.join(runbook_dir(archive_root, runbook_id), CHECKPOINT), found["files"])


def summary(archive_root: str, runbook_id: str) -> dict[str, Any] | None:
    """The archive's headline facts (no file list), with the runbook's outcome when it ended."""
    found = manifest(archive_root, runbook_id)
    if found is None:
        return None
    report = read_json(posixpath.join(runbook_dir(archive_root, runbook_id), REPORT)) or {}
    keys = ("archive_id", "job", "created_at", "actor", "reason", "mode", "method", "source", "query_id",
            "latest_committed_batch", "watermark", "total_bytes", "settings", "sink")
    return {**{k: found.get(k) for k in keys}, "files": len(found["files"]),
            "path": runbook_dir(archive_root, runbook_id), "outcome": report.get("outcome")}


def list_archives(archive_root: str) -> list[dict[str, Any]]:
    """Every archive of one root, oldest first (runbooks refused before archiving have none)."""
    fs, p = filesystem(archive_root)
    if not fs.exists(p):
        return []
    found = [summary(archive_root, posixpath.basename(d.rstrip("/"))) for d in fs.ls(p, detail=False)]
    return sorted((s for s in found if s), key=lambda s: s["created_at"])


def copy_checkpoint_back(archive_root: str, runbook_id: str, checkpoint: str) -> None:
    """Put an archived checkpoint in place as a copy (the archive stays whole), verified, then moved in
    (move_tree: a rename on local disk; on S3 a server-side copy, verified, and the staging copy removed)."""
    found = manifest(archive_root, runbook_id)
    staging = checkpoint.rstrip("/") + ".restoring"
    remove_tree(staging)
    copy_tree(posixpath.join(runbook_dir(archive_root, runbook_id), CHECKPOINT), staging)
    problems = verify_tree(staging, found["files"])
    if problems:
        raise ArchiveError(f"the copy of archive {runbook_id} does not verify: {problems[0]}")
    fs, p = filesystem(checkpoint)
    if fs.exists(p):
        raise ArchiveError(f"{checkpoint} exists; it must be archived before an archive is put in its place")
    move_tree(staging, checkpoint)
