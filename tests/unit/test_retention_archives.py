"""Orphan archives: a job's checkpoint and its dead-letter checkpoint get archives of their own, and an
archive is never written over (found on the object-store test: both went to one folder, the second copy
overwrote the first's files and manifest, and the first checkpoint was deleted)."""
from __future__ import annotations

import json

import pytest

from stateops.retention.archives import archive_checkpoint
from stateops.retention.planner import orphan_name

pytestmark = pytest.mark.unit


def _checkpoint(root, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


def test_a_job_and_its_dead_letter_checkpoint_archive_apart(tmp_path):
    main = _checkpoint(tmp_path / "checkpoints" / "old", {"metadata": "m", "commits/0": "c0", "state/0/0/1.zip": "z"})
    dead = _checkpoint(tmp_path / "checkpoints" / "_deadletter" / "old", {"metadata": "dm", "commits/0": "dc0"})
    assert orphan_name(main) == "old" and orphan_name(dead + "/") == "deadletter-old"
    for source in (dead, main):
        archive_checkpoint(source, str(tmp_path / "archives" / orphan_name(source)), {"archive_id": "a"})
    for source, files in ((main, 3), (dead, 2)):
        manifest = json.loads((tmp_path / "archives" / orphan_name(source) / "manifest.json").read_text())
        assert manifest["source"] == source and len(manifest["files"]) == files
    assert (tmp_path / "archives" / "deadletter-old" / "checkpoint" / "metadata").read_text() == "dm"


def test_an_existing_archive_is_never_written_over(tmp_path):
    source = _checkpoint(tmp_path / "checkpoints" / "old", {"metadata": "new"})
    destination = tmp_path / "archives" / "old"
    (destination / "checkpoint").mkdir(parents=True)
    (destination / "checkpoint" / "metadata").write_text("kept")
    with pytest.raises(OSError, match="exists already"):
        archive_checkpoint(source, str(destination), {"archive_id": "a"})
    assert (destination / "checkpoint" / "metadata").read_text() == "kept"
    assert (tmp_path / "checkpoints" / "old" / "metadata").read_text() == "new"
