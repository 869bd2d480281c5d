"""Archives as retention sees them, through the runbook's own archive format (stateops.checkpoints.archive): does an
archive still verify against its manifest."""
from __future__ import annotations

from stateops.checkpoints import archive
from stateops.retention.inventory import ArchiveEntry


def verify(entry: ArchiveEntry) -> list[str]:
    """The runbook's check: every file of the manifest there with its size and sha256, nothing else."""
    if entry.manifest is None:
        return [f"{entry.path}: no manifest"]
    return archive.verify_folder(entry.path, entry.manifest)
