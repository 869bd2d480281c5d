"""Orphan archives: a job's checkpoint and its dead-letter checkpoint get archives of their own, and an
archive is never written over (found on the object-store test: both went to one folder, the second copy
overwrote the first's files and manifest, and the first checkpoint was deleted)."""
from __future__ import annotations

import json

import pytest

from stateops.checkpoints.archive import archive_copy
from stateops.retention.planner import orphan_name
from tests.support.fake_checkpoint import FakeCheckpoint

pytestmark = pytest.mark.unit


def test_a_job_and_its_dead_letter_checkpoint_archive_apart(tmp_path):
    main = FakeCheckpoint(tmp_path / "checkpoints" / "old", "main-query").batch(0)
    main.rocksdb_zip(0, 0, 1)  # metadata, offsets/0, commits/0, state/0/0/1.zip
    dead = FakeCheckpoint(tmp_path / "checkpoints" / "_deadletter" / "old", "dead-letter-query").batch(0)
    assert orphan_name(main.path) == "old" and orphan_name(dead.path + "/") == "deadletter-old"
    for source in (dead.path, main.path):
        archive_copy(source, str(tmp_path / "archives" / orphan_name(source)), {"archive_id": "a"})
    for source, files in ((main.path, 4), (dead.path, 3)):
        manifest = json.loads((tmp_path / "archives" / orphan_name(source) / "manifest.json").read_text())
        assert manifest["source"] == source and len(manifest["files"]) == files
    archived = tmp_path / "archives" / "deadletter-old" / "checkpoint" / "metadata"
    assert json.loads(archived.read_text()) == {"id": "dead-letter-query"}


def test_an_existing_archive_is_never_written_over(tmp_path):
    source = FakeCheckpoint(tmp_path / "checkpoints" / "old", "new")
    destination = tmp_path / "archives" / "old"
    (destination / "checkpoint").mkdir(parents=True)
    (destination / "checkpoint" / "metadata").write_text("kept")
    with pytest.raises(OSError, match="exists already"):
        archive_copy(source.path, str(destination), {"archive_id": "a"})
    assert (destination / "checkpoint" / "metadata").read_text() == "kept"
    assert json.loads((tmp_path / "checkpoints" / "old" / "metadata").read_text()) == {"id": "new"}
