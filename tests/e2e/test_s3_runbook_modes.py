"""The runbook modes that replace a checkpoint, on the home on an S3 API (long tier): rewind, rebuild and
restore, each completing and verifying its archive, the restore putting back the archived checkpoint byte for
byte (adjust and repartition on S3: tests/e2e/test_s3_home.py); and the store switch both
ways.

On S3 these modes "rename" the checkpoint into the archive: a server-side copy, verified by reading the copy
back, then the delete of the source (stateops/checkpoints/archive.py move_tree)."""
from __future__ import annotations

import pytest

from stateops.jobs.definition.environment import Environment, load_jobs, read_settings
from stateops.jobs.demo.generator import generate
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.recovery import RecoveryRequest
from stateops.checkpoints import archive
from stateops.recovery.store_switch import SCRATCH
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER
from stateops.storage import exists
from tests.support.audit_queries import state_rows
from tests.support.outcomes import assert_equals_oracle, local_mirror
from tests.support.scenarios import S3_INPUT, builtin, more_input
from tests.support.trees import object_hashes

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.long, pytest.mark.usefixtures("s3_spark")]


def test_rewind_rebuild_and_restore_on_s3(spark, s3_layout, monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    job, home = "user_activity", s3_layout
    spec = load_jobs()[job]
    generate(home, S3_INPUT)
    run_job(spark, spec, home, settings=read_settings())
    reports = {}
    for hour, (mode, change) in enumerate((("rewind", {"to_batch": 1}), ("rebuild", {}),
                                           ("restore", None)), start=3):
        more_input(home, hour, seed=hour)
        if change is None:
            change = {"archive_id": reports["rewind"].runbook_id}
        environment = Environment.from_env(layout=home)
        report = recover(environment, RecoveryRequest(job, mode, reason="on S3", confirm=job, dry_run=False, **change),
                         spark=spark)
        assert report.outcome == "succeeded", (mode, report.error)
        assert not archive.verify(spec.archive_path(home), report.runbook_id), mode
        reports[mode] = report
    # The restore put back, byte for byte, the checkpoint the rewind archived (its verify restart then added
    # the batches of the new input).
    kept = archive.manifest(spec.archive_path(home), reports["rewind"].runbook_id)
    now = object_hashes(spec.checkpoint_path(home))
    assert {f["path"]: now.get(f["path"]) for f in kept["files"]} == {f["path"]: f["sha256"] for f in kept["files"]}
    assert Checkpoint(spec.checkpoint_path(home)).latest_committed_batch() > kept["latest_committed_batch"]


def test_switch_store_both_ways_on_s3(spark, s3_layout, tmp_path, monkeypatch):
    """The store switch on S3: the JVM writer through S3A, the swap and the offset log through s3fs (no rename: a
    copy, then the delete), memory -> RocksDB -> memory, the state equal to the reader's before each switch, the
    table equal to the oracle."""
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nstate_store = "memory"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    job, home = "user_activity", s3_layout
    environment = Environment.from_env(layout=home)
    spec = environment.catalog.job(job)
    generate(home, S3_INPUT)
    run_job(spark, spec, home, settings=environment.settings)
    checkpoint = spec.checkpoint_path(home)
    for hour, to, provider in ((3, "rocksdb", ROCKSDB_PROVIDER), (4, "memory", HDFS_PROVIDER)):
        batch = Checkpoint.open(checkpoint).latest_committed_batch()
        before = state_rows(spark, checkpoint, batch)
        more_input(home, hour, seed=hour)
        report = recover(Environment.from_env(layout=home), RecoveryRequest(
            job, "switch-store", to_store=to, reason="on S3", confirm=job, dry_run=False), spark=spark)
        assert report.outcome == "succeeded", (to, report.error)
        assert not archive.verify(spec.archive_path(home), report.runbook_id), to
        switched = Checkpoint.open(checkpoint)
        assert switched.state_provider(batch) == provider and switched.latest_committed_batch() > batch
        assert state_rows(spark, checkpoint, batch) == before, to
        assert not exists(f"{checkpoint}/{SCRATCH}")
    assert_equals_oracle(home, builtin(home, job), local_mirror(home, spec, str(tmp_path / "mirror")))
