"""The store and formats a checkpoint runs with, and those a new checkpoint gets (stateops/checkpoints/state_store.py): read
from checkpoints written by hand as Spark 4.2 lays them out (tests/support/fake_checkpoint.py), no JVM."""
from __future__ import annotations

import pytest

from stateops.checkpoints import state_store
from stateops.errors import ConfigError
from stateops.jobs.definition.spec import JobSpec, with_overrides
from stateops.jobs.examples.builtin import BUILTIN
from stateops.checkpoints.state_store import (CHANGELOG, CHECKPOINT_FORMAT, JOIN_FORMAT, PROVIDER, Formats,
                                              after_rebuild, for_new_checkpoint, in_force, of_checkpoint, run_conf)

from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint


def _rocksdb(tmp_path, *, changelog=True, unique=False, join="4"):
    cp = FakeCheckpoint(tmp_path / "cp", provider=ROCKSDB, conf={JOIN_FORMAT: join}).batches(range(3))
    for version in (1, 2, 3):
        name = f"{version}_0f1e2d3c-aaaa-bbbb-cccc-123456789abc" if unique else str(version)
        cp.write(f"state/0/0/{name}.{'changelog' if changelog else 'zip'}", b"x")
    return cp


def test_an_existing_checkpoint_is_read_from_its_offset_log_and_state_files(tmp_path):
    assert of_checkpoint(str(_rocksdb(tmp_path).path)) == (Formats("rocksdb", True, 4, 1), 2)
    assert of_checkpoint(str(_rocksdb(tmp_path / "zip", changelog=False, join="2").path))[0] == \
        Formats("rocksdb", False, 2, 1)
    assert of_checkpoint(str(_rocksdb(tmp_path / "v2", unique=True).path))[0].checkpoint_format == 2
    memory = FakeCheckpoint(tmp_path / "mem", provider=HDFS, conf={JOIN_FORMAT: "2"}).batches(range(2))
    memory.state(0, 0, 1, "delta")
    assert of_checkpoint(str(memory.path))[0] == Formats("memory", None, 2, 1)
    # Spark's default before providers were recorded; no checkpoint, or one without a batch: nothing to read
    assert of_checkpoint(str(FakeCheckpoint(tmp_path / "old", provider=None).batches([0]).path))[0].store == "memory"
    assert of_checkpoint(str(tmp_path / "missing")) is None
    assert of_checkpoint(str(FakeCheckpoint(tmp_path / "empty").path)) is None


def test_a_new_checkpoint_takes_the_jobs_store_then_the_kept_formats_then_the_session():
    formats, sources, notes = for_new_checkpoint(None, None, {})
    assert formats == Formats("rocksdb", True, 4, 1) and set(sources.values()) == {"StateOps' default"}
    assert for_new_checkpoint(None, None, {JOIN_FORMAT: "2", CHANGELOG: "false"})[:2] == (
        Formats("rocksdb", False, 2, 1), {"store": "StateOps' default", "changelog": "STATEOPS_SPARK_CONF",
                                          "join_format": "STATEOPS_SPARK_CONF", "checkpoint_format": "StateOps' default"})
    kept = Formats("rocksdb", False, 2, 2)
    assert for_new_checkpoint(None, kept, {PROVIDER: state_store.HDFS_PROVIDER})[0] == kept  # kept beats the session
    # the job's store wins; the in-memory store cannot hold join formats 3/4, changelogs or checkpoint format 2
    formats, sources, notes = for_new_checkpoint("memory", Formats("rocksdb", True, 4, 2), {})
    assert formats == Formats("memory", None, 2, 1) and sources["store"] == "the job's state_store"
    assert notes == ["join format 4 -> 2 (the in-memory store has no column families)",
                     "checkpoint format 2 -> 1 (the in-memory store has no column families)"]
    # from the in-memory store to RocksDB: the session's changelog setting
    formats, sources, _ = for_new_checkpoint("rocksdb", Formats("memory", None, 2, 1), {CHANGELOG: "false"})
    assert formats == Formats("rocksdb", False, 2, 1) and sources["changelog"] == "STATEOPS_SPARK_CONF"
    with pytest.raises(ConfigError, match="unknown state store 'heap'"):
        for_new_checkpoint("heap", None, {})


def test_a_run_keeps_what_spark_does_not_pin(tmp_path):
    """On an existing checkpoint the run sets changelog checkpointing and the checkpoint format as its files have
    them (Spark would take the session's); the provider and join format Spark pins itself."""
    zips = _rocksdb(tmp_path / "zip", changelog=False)
    assert run_conf(str(zips.path), "memory", None, {}) == {CHECKPOINT_FORMAT: "1", CHANGELOG: "false"}
    assert run_conf(str(_rocksdb(tmp_path / "v2", unique=True).path), None, None, {}) == {
        CHECKPOINT_FORMAT: "2", CHANGELOG: "true"}
    assert run_conf(str(tmp_path / "new"), "memory", None, {}) == {
        PROVIDER: state_store.HDFS_PROVIDER, JOIN_FORMAT: "2", CHECKPOINT_FORMAT: "1"}


def test_describe_names_each_source_and_a_store_the_checkpoint_does_not_have(tmp_path):
    block = in_force(str(_rocksdb(tmp_path).path), "memory", None, {})
    assert block["store"] == {"value": "rocksdb", "source": "the checkpoint (offset log batch 2)"}
    assert block["changelog"] == {"value": True, "source": "the checkpoint's state files"}
    assert block["notes"] == ["the job's state_store is memory: the checkpoint keeps rocksdb (Spark pins it); a "
                              "rebuild moves the job to memory"]
    new = in_force(str(tmp_path / "new"), None, Formats("memory", None, 2, 1), {}, "kept by runbook rb-1")
    assert new["store"] == {"value": "memory", "source": "a new checkpoint's: kept by runbook rb-1"}


def test_a_rebuild_keeps_the_old_checkpoints_store_unless_the_job_names_another(tmp_path):
    old = str(_rocksdb(tmp_path, changelog=False, join="2").path)
    formats, notes = after_rebuild(old, None, {})
    assert formats == Formats("rocksdb", False, 2, 1)
    assert notes == ["the new checkpoint keeps the old one's state store and formats: rocksdb (changelog off), join "
                     "format 2, checkpoint format 1"]
    formats, notes = after_rebuild(old, "memory", {})
    assert formats == Formats("memory", None, 2, 1)
    assert notes == ["the new checkpoint moves from rocksdb (changelog off), join format 2, checkpoint format 1 to "
                     "memory, join format 2, checkpoint format 1 (the job's state_store)"]
    # asked by STATEOPS_SPARK_CONF: the format it names (the session's other defaults do not count as asked)
    formats, notes = after_rebuild(old, None, {JOIN_FORMAT: "4"})
    assert formats == Formats("rocksdb", False, 4, 1)
    assert notes[0].endswith("to rocksdb (changelog off), join format 4, checkpoint format 1 (STATEOPS_SPARK_CONF)")
    assert Formats.from_json(formats.to_json()) == formats


def test_the_jobs_state_store_setting_is_checked_when_the_job_is_made():
    spec = next(s for s in BUILTIN if s.name == "user_activity")
    assert with_overrides(spec, {"state_store": "memory"}).state_store == "memory"
    with pytest.raises(ConfigError) as refused:
        with_overrides(spec, {"state_store": "hdfs"})
    assert refused.value.field == "jobs.user_activity.state_store" and "rocksdb" in refused.value.fix
    assert JobSpec.__dataclass_fields__["state_store"].default is None
