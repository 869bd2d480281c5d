"""The store switch's checkpoint surgery (stateops/recovery/store_switch.py) without a JVM: a checkpoint laid out as
Spark writes it (offset log, commits, operator metadata, in-memory store files with Hadoop checksums), a writer that
lays out RocksDB files as the JVM writer does. Killed between any two of its writes (every `switch.part` point, in
turn) and run again, the switch ends exactly as an uninterrupted one: the file system compared after the fact.
Its refusals name why; two audits' rows are compared per operator, store and partition."""
from __future__ import annotations

import json
import os

import pytest

from stateops.checkpoints import state_store
from stateops.recovery import store_switch

pytestmark = pytest.mark.unit

ROWS = {0: 3, 1: 0}  # rows per partition the fake writer writes


def _offsets(conf: dict) -> str:
    return "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf}) + '\n{"logOffset":2}'


def _checkpoint(tmp_path, operator="dedupeWithinWatermark", join_format=2, provider=state_store.HDFS_PROVIDER,
                **conf_extra):
    root = tmp_path / "checkpoints" / "clicks"
    conf = {state_store.PROVIDER: provider, state_store.JOIN_FORMAT: str(join_format), **conf_extra}
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q-1"}')
    for batch in range(3):
        (root / "offsets" / str(batch)).write_text(_offsets(conf))
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    meta = root / "state" / "0" / "_metadata"
    meta.mkdir(parents=True)
    meta.joinpath("metadata").write_text("v1\n" + json.dumps({
        "operatorInfo": {"operatorId": 0, "operatorName": operator},
        "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0, "numPartitions": 2}]}))
    for partition in (0, 1):
        folder = root / "state" / "0" / str(partition)
        (folder / "_metadata").mkdir(parents=True)
        (folder / "_metadata" / "schema").write_text("schema")
        for version in (1, 2, 3):
            (folder / f"{version}.delta").write_text("d")
            (folder / f".{version}.delta.crc").write_text("c")
    return str(root)


def _writer(checkpoint, batch, store, provider, version, root):
    assert provider == state_store.ROCKSDB_PROVIDER and version == batch + 1
    counts = []
    for partition in range(store.partitions):
        folder = os.path.join(root, str(store.operator_id), str(partition))
        os.makedirs(os.path.join(folder, "SSTs"), exist_ok=True)
        for name in (f"{version}.zip", f".{version}.zip.crc", f"SSTs/{partition}-a.sst"):
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(name)
        counts.append(ROWS[partition])
    return counts


def _tree(root: str) -> dict[str, str]:
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name)) as handle:
                out[os.path.relpath(os.path.join(folder, name), root)] = handle.read()
    return out


class Crash(Exception):
    pass


def test_the_switch_moves_files_records_the_provider_and_keeps_the_schema(tmp_path):
    checkpoint = _checkpoint(tmp_path)
    switch = store_switch.plan(checkpoint, "rocksdb")
    assert (switch.batch, switch.version, switch.source) == (2, 3, "memory")
    done = store_switch.apply(checkpoint, switch, _writer)
    assert done == {"rows": {"0/default": [3, 0]}, "files_moved": 6, "offsets_rewritten": [2]}
    tree = _tree(checkpoint)
    assert sorted(n for n in tree if n.startswith("state/0/0/")) == [
        "state/0/0/.3.zip.crc", "state/0/0/3.zip", "state/0/0/SSTs/0-a.sst", "state/0/0/_metadata/schema"]
    assert json.loads(tree["offsets/2"].split("\n")[1])["conf"][state_store.PROVIDER] == state_store.ROCKSDB_PROVIDER
    assert tree["offsets/2"].split("\n")[2] == '{"logOffset":2}'
    assert "offsets/.2.crc" not in tree and "offsets/.1.crc" in tree  # Hadoop reads a file without one unchecked
    assert tree["offsets/1"] == _offsets({state_store.PROVIDER: state_store.HDFS_PROVIDER,
                                          state_store.JOIN_FORMAT: "2"})
    assert not os.path.exists(os.path.join(checkpoint, store_switch.SCRATCH))
    assert store_switch.apply(checkpoint, switch, _writer)["rows"] is None, "a finished switch does nothing again"
    assert _tree(checkpoint) == tree


def test_killed_between_any_two_writes_the_switch_completes_when_run_again(tmp_path, monkeypatch):
    reference = _checkpoint(tmp_path / "reference")
    store_switch.apply(reference, store_switch.plan(reference, "rocksdb"), _writer)
    expected = _tree(reference)
    points = []
    monkeypatch.setattr(store_switch, "fault_point", lambda name, **at: points.append(at["part"]))
    store_switch.apply(_checkpoint(tmp_path / "count"), store_switch.plan(reference, "rocksdb"), _writer)
    assert set(points) == {"write", "cleared", "moved", "recorded"}
    for kill in range(len(points)):
        checkpoint = _checkpoint(tmp_path / f"kill{kill}")
        switch = store_switch.plan(checkpoint, "rocksdb")
        reached = []

        def fault(name, **at):
            reached.append(at["part"])
            if len(reached) == kill + 1:
                raise Crash(at["part"])

        monkeypatch.setattr(store_switch, "fault_point", fault)
        with pytest.raises(Crash):
            store_switch.apply(checkpoint, switch, _writer)
        monkeypatch.setattr(store_switch, "fault_point", lambda name, **at: None)
        store_switch.apply(checkpoint, switch, _writer)
        assert _tree(checkpoint) == expected, f"killed at {points[kill]} (point {kill})"


def test_what_cannot_move_is_refused_naming_why(tmp_path):
    assert store_switch.refusal(_checkpoint(tmp_path / "a"), "memory") == "its state is already in the memory store"
    assert store_switch.refusal(_checkpoint(tmp_path / "b"), "rocksdb") is None
    tws = _checkpoint(tmp_path / "c", operator="transformWithStateInPandasExec", provider=state_store.ROCKSDB_PROVIDER)
    assert "transformWithState, whose state variables live in column families" in store_switch.refusal(tws, "memory")
    join = _checkpoint(tmp_path / "d", operator="symmetricHashJoin", join_format=4,
                       provider=state_store.ROCKSDB_PROVIDER)
    assert "stream-stream join in state format 4" in store_switch.refusal(join, "memory")
    format2 = _checkpoint(tmp_path / "e", operator="symmetricHashJoin", join_format=2,
                          provider=state_store.ROCKSDB_PROVIDER)
    assert store_switch.refusal(format2, "memory") is None
    assert "no batch yet" in store_switch.refusal(str(tmp_path / "none"), "memory")


def test_audits_differ_by_rows_per_operator_store_and_partition():
    def audit(rows):
        return {"operators": [{"operator_id": 0, "store_name": "default", "rows_per_partition": rows}]}

    assert store_switch.differences(audit({"0": 3, "1": 0}), audit({"0": 3})) == []
    assert store_switch.differences(audit({"0": 3}), audit({"0": 2})) == [
        "operator 0 store default partition 0: 3 rows before, 2 after"]
    assert store_switch.differences(audit({"0": 3}), {"operators": []}) == ["operator 0 store default: missing after"]


def test_the_switch_writes_every_partition_the_batch_has_not_the_count_the_operator_was_created_with(tmp_path):
    """After Spark's offline repartition the operator metadata keeps the old count; the batch's offsets say how many
    partitions its state has (and Spark's reader reads that many)."""
    checkpoint = _checkpoint(tmp_path, **{"spark.sql.shuffle.partitions": "3"})
    assert [s.partitions for s in store_switch.plan(checkpoint, "rocksdb").stores] == [3]
    assert [s.partitions for s in store_switch.plan(_checkpoint(tmp_path / "b"), "rocksdb").stores] == [2]
