"""The runbook modes that replace a checkpoint, on the home on an S3 API (tests/e2e/test_s3_home.py's server
and fixtures): rewind, rebuild and restore, each completing and verifying its archive, the restore putting
back the archived checkpoint byte for byte (long suite: three more runbooks; adjust and repartition run in
the default suite).

On S3 these modes "rename" the checkpoint into the archive: a server-side copy, verified by reading the copy
back, then the delete of the source (stateops/recovery/archive.py move_tree)."""
from __future__ import annotations

import pytest

from jobs.catalog import load_jobs
from jobs.recovery import recover
from jobs.runner import run_job
from stateops.checkpoint import Checkpoint
from stateops.recovery import RecoveryRequest, archive
from tests.e2e.test_s3_home import INPUT, _more_input, _sums, home, s3  # noqa: F401 - fixtures
from jobs.generator import generate

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def test_rewind_rebuild_and_restore_on_s3(spark, home, monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    job = "user_activity"
    spec = load_jobs()[job]
    generate(home, INPUT)
    run_job(spark, spec, home)
    reports = {}
    for hour, (mode, change) in enumerate((("rewind", {"to_batch": 1}), ("rebuild", {}),
                                           ("restore", None)), start=3):
        _more_input(home, hour, seed=hour)
        if change is None:
            change = {"archive_id": reports["rewind"].runbook_id}
        report = recover(home, RecoveryRequest(job, mode, reason="on S3", confirm=job, dry_run=False, **change),
                         spark=spark)
        assert report.outcome == "succeeded", (mode, report.error)
        assert not archive.verify(spec.archive_path(home), report.runbook_id), mode
        reports[mode] = report
    # The restore put back, byte for byte, the checkpoint the rewind archived (its verify restart then added
    # the batches of the new input).
    kept = archive.manifest(spec.archive_path(home), reports["rewind"].runbook_id)
    now = _sums(spec.checkpoint_path(home))
    assert {f["path"]: now.get(f["path"]) for f in kept["files"]} == {f["path"]: f["sha256"] for f in kept["files"]}
    assert Checkpoint(spec.checkpoint_path(home)).latest_committed_batch() > kept["latest_committed_batch"]
