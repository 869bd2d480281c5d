"""Archives as retention sees them, through the recovery runbook's own archive code (stateops.recovery.archive):
does an archive still verify against its manifest, and archiving an orphan
checkpoint in the runbook's format (`<id>/manifest.json` + `<id>/checkpoint/`)."""
from __future__ import annotations

import posixpath
from datetime import datetime, timezone
from typing import Any

from stateops.storage import copies
from stateops.storage import filesystem
from stateops.recovery import archive as runbook_archive
from stateops.retention.inventory import ARCHIVED, MANIFEST, ArchiveEntry


def verify(entry: ArchiveEntry) -> list[str]:
    """The runbook's check: every file of the manifest there with its size and sha256, nothing else."""
    if entry.manifest is None:
        return [f"{entry.path}: no manifest"]
    return copies.verify_tree(posixpath.join(entry.path, ARCHIVED), entry.manifest.get("files", []))


def archive_checkpoint(source: str, destination: str, details: dict[str, Any]) -> None:
    """Copy `source` into `destination/checkpoint` (checksummed while copying), write the manifest, verify the
    copy against it; raises when it does not verify, or when `destination` exists already (an archive is
    never written over), and the source is then left untouched."""
    fs, path = filesystem(destination)
    if fs.exists(path):
        raise OSError(f"the archive destination {destination} exists already; nothing is written over it")
    entries = copies.copy_tree(source, posixpath.join(destination, ARCHIVED))
    files = [e.__dict__ for e in entries]
    manifest = {"archive_id": details.get("archive_id"), "job": details.get("job"),
                "mode": details.get("mode", "retention"), "method": "copy",
                "source": source, "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "reason": details.get("reason", "orphan checkpoint archived by retention"), "actor": details.get("actor"),
                "total_bytes": sum(e.size for e in entries), "files": files}
    runbook_archive.write_json(posixpath.join(destination, MANIFEST), manifest)
    problems = copies.verify_tree(posixpath.join(destination, ARCHIVED), files)
    if problems:
        raise OSError(f"the archive of {source} at {destination} does not verify: {problems[0]}")
