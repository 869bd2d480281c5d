"""Archives: a runbook's verified copy of a checkpoint, with a manifest, next to the runbook's journal; the one
format of every archive of a checkpoint (retention's of an orphan checkpoint and a retired dead-letter query's are
written in it by `archive_copy`, with a manifest and the copy only).

    <archive root>/<runbook id>/          archive root: the job's `archive_dir` (default ops/<job>/archives)
        plan.json                          the plan as confirmed
        journal.jsonl                      every step, before and after (stateops.recovery.journal)
        manifest.json                      files (relative path, size, sha256), latest batch, watermark,
                                           settings, sink version and epoch, the before-audit, reason, actor
        checkpoint/                        the archived checkpoint
        failed-attempt/                    after a rollback: the checkpoint of the attempt that failed
        report.json                        how the runbook ended

The copies, renames and checks are the storage layer's (stateops.storage.copies: checksummed as read, verified
by reading back; server-side on one object store). The manifest is written before the data is final, and an
archive counts as complete only once `verify` finds every file with its size and sum.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from datetime import datetime, timezone
from typing import Any

from stateops.errors import ConfigError, OperationFailed
from stateops.redaction import redact_tree
from stateops.storage import filesystem, read_text, write_text
from stateops.storage.copies import copy_tree, move_tree, remove_tree, verify_tree

PLAN = "plan.json"
MANIFEST = "manifest.json"
REPORT = "report.json"
CHECKPOINT = "checkpoint"
FAILED = "failed-attempt"


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
    """Replace `path` whole: readers see the old or the new document."""
    write_text(path, json.dumps(redact_tree(data), indent=1, sort_keys=True, default=str), replace=True)


def read_json(path: str) -> Any | None:
    try:
        return json.loads(read_text(path))
    except FileNotFoundError:
        return None


# --- reading archives ------------------------------------------------------------------------------------

def manifest(archive_root: str, runbook_id: str) -> dict[str, Any] | None:
    return read_json(posixpath.join(runbook_dir(archive_root, runbook_id), MANIFEST))


def verify(archive_root: str, runbook_id: str) -> list[str]:
    """Problems of an archive's checkpoint copy against its manifest; [] when it verifies."""
    return verify_folder(runbook_dir(archive_root, runbook_id), manifest(archive_root, runbook_id))


def verify_folder(folder: str, found: dict[str, Any] | None) -> list[str]:
    """Problems of the archive in `folder` (its checkpoint copy) against its manifest `found`; [] when it verifies."""
    if found is None:
        return [f"{folder}: no manifest (not an archive, or not finished)"]
    return verify_tree(posixpath.join(folder, CHECKPOINT), found.get("files", []))


def archive_copy(source: str, destination: str, details: dict[str, Any]) -> None:
    """An archive of the checkpoint `source` at `destination`, in the runbook's format, for an archive no runbook
    makes (retention's of an orphan checkpoint, a retired dead-letter query's): `source` copied into
    `destination/checkpoint` (checksummed while copying), the manifest written, the copy verified against it.
    Raises when it does not verify, or when `destination` exists already (an archive is never written over); the
    source is then left untouched."""
    fs, path = filesystem(destination)
    if fs.exists(path):
        raise OSError(f"the archive destination {destination} exists already; nothing is written over it")
    entries = copy_tree(source, posixpath.join(destination, CHECKPOINT))
    files = [e.__dict__ for e in entries]
    found = {"archive_id": details.get("archive_id"), "job": details.get("job"),
             "mode": details.get("mode", "retention"), "method": "copy",
             "source": source, "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
             "reason": details.get("reason", "orphan checkpoint archived by retention"), "actor": details.get("actor"),
             "total_bytes": sum(e.size for e in entries), "files": files}
    write_json(posixpath.join(destination, MANIFEST), found)
    problems = verify_folder(destination, found)
    if problems:
        raise OSError(f"the archive of {source} at {destination} does not verify: {problems[0]}")


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
