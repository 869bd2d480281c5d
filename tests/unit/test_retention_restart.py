"""What a restart needs (stateops/checkpoints/restart.py) on checkpoints written by hand (tests/support/fake_checkpoint.py).

The oracle is the rule of restart.py's docstring and docs/operations.md "Retention", applied by hand to each
checkpoint: restarting from batch N needs offsets/N and offsets/N-1, commits/N and every state store at
version N+1, which a store loads from its latest snapshot at or below N+1 (a RocksDB zip with every SST and
log it names; an HDFS `.snapshot`; none: empty version 0) plus the deltas above it. Keeping batches F..latest
restorable keeps per store the snapshot a load of F+1 starts from and every version above it, offsets from
F-1 and commits from F; everything else is history. Each expected list below is written out file by file.
"""
from __future__ import annotations

import pytest

from stateops.checkpoints import restart
from stateops.checkpoints.listing import Tree, read_many
from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint, crc_name

pytestmark = pytest.mark.unit


def _files(cp: FakeCheckpoint) -> restart.CheckpointFiles:
    """The checkpoint as restart logic sees it, with every zip's metadata read (as the inventory reads it)."""
    files = restart.parse(Tree.list(cp.path), read_many)
    restart.load_references(files, read_many)
    return files


def _with_crc(*rels: str) -> tuple[str, ...]:
    """`rels` and their Hadoop checksum files, sorted (every file of a crc=True checkpoint has one)."""
    return tuple(sorted({r for rel in rels for r in (rel, crc_name(rel))}))


def _logs(offsets: range, commits: range) -> tuple[str, ...]:
    return _with_crc(*[f"offsets/{b}" for b in offsets], *[f"commits/{b}" for b in commits])


# --- HDFS-backed provider: deltas and snapshots -----------------------------------------------------------

def _hdfs(tmp_path) -> FakeCheckpoint:
    """Batches 0..9 committed (latest 9: state version 10); two partitions with deltas 1..10; partition 0 has
    snapshots of versions 4 and 8, partition 1 of version 6."""
    return FakeCheckpoint.build(tmp_path / "cp", batches=range(10), provider=HDFS, partitions=2, crc=True, stores=[
        dict(op=0, partitions=[0], delta=range(1, 11), snapshot=[4, 8]),
        dict(op=0, partitions=[1], delta=range(1, 11), snapshot=[6])])


def test_parse_reads_the_logs_the_stores_and_each_batchs_conf(tmp_path):
    cp = FakeCheckpoint(tmp_path / "cp", provider=ROCKSDB, partitions=2, crc=True)
    for b in range(3):
        cp.batch(b, timestamp_ms=1_000 * (b + 1), conf={"spark.sql.shuffle.partitions": str(2 + b)})
    cp.batch(3, commit=False)  # a batch in flight: planned, not committed
    cp.store(0, partitions=2, store="left-keyToNumValues", changelog=[1, 2], zip={2: ["x.sst"]})
    cp.store(1, partitions=[0], delta=[1, 2, 3])
    cp.write("state/0/_metadata/metadata", "v1\n{}")  # operator metadata: not a store
    files = _files(cp)
    assert (files.offsets, files.commits, files.latest) == ([0, 1, 2, 3], [0, 1, 2], 2)
    assert [s.folder for s in files.stores] == ["state/0/0/left-keyToNumValues", "state/0/1/left-keyToNumValues",
                                                "state/1/0"]
    left = files.stores[0]
    assert (left.operator, left.partition, left.name) == (0, 0, "left-keyToNumValues")
    assert left.versions == {1: {"changelog": "state/0/0/left-keyToNumValues/1.changelog"},
                             2: {"changelog": "state/0/0/left-keyToNumValues/2.changelog",
                                 "zip": "state/0/0/left-keyToNumValues/2.zip"}}
    assert left.immutable == {"x.sst": "state/0/0/left-keyToNumValues/SSTs/x.sst"} and not left.unique_ids
    assert files.references == {"state/0/0/left-keyToNumValues/2.zip": {"x.sst"},
                                "state/0/1/left-keyToNumValues/2.zip": {"x.sst"}}
    assert (files.partitions(0), files.partitions(2), files.partitions(7)) == (2, 4, None)
    assert files.timestamps == {0: 1_000, 1: 2_000, 2: 3_000, 3: 0}
    assert files.provider() == ROCKSDB
    assert (left.snapshot(2), left.delta(2), left.snapshot(1)) == (
        "state/0/0/left-keyToNumValues/2.zip", "state/0/0/left-keyToNumValues/2.changelog", None)


def test_a_store_loads_from_its_latest_snapshot_at_or_below_a_version(tmp_path):
    hdfs = _hdfs(tmp_path)
    p0, p1 = _files(hdfs).stores
    assert [p0.base(v) for v in range(1, 11)] == [0, 0, 0, 4, 4, 4, 4, 8, 8, 8]
    assert [p1.base(v) for v in range(1, 11)] == [0, 0, 0, 0, 0, 6, 6, 6, 6, 6]


def test_every_committed_batch_of_a_whole_hdfs_checkpoint_is_restorable(tmp_path):
    hdfs = _hdfs(tmp_path)
    assert _files(hdfs).restorable_batches() == list(range(10))


@pytest.mark.parametrize("floor, kept_floor, p0_below, p1_below, offsets, commits", [
    # floor 6 loads version 7: partition 0 from snapshot 4, partition 1 from snapshot 6
    (6, 6, {"delta": [1, 2, 3]}, {"delta": [1, 2, 3, 4, 5]}, range(0, 5), range(0, 6)),
    # floor = latest (9) loads version 10: partition 0 from snapshot 8 (snapshot 4 goes too), partition 1 from 6
    (9, 9, {"delta": range(1, 8), "snapshot": [4]}, {"delta": [1, 2, 3, 4, 5]}, range(0, 8), range(0, 9)),
    # floor 3 loads version 4: partition 0 from snapshot 4; partition 1 has no snapshot at or below 4
    (3, 3, {"delta": [1, 2, 3]}, {}, range(0, 2), range(0, 3)),
    # floor 2 loads version 3: no snapshot at or below it anywhere: every version stays, only logs go
    (2, 2, {}, {}, range(0, 1), range(0, 2)),
    (50, 9, {"delta": range(1, 8), "snapshot": [4]}, {"delta": [1, 2, 3, 4, 5]}, range(0, 8), range(0, 9)),
    (-5, 0, {}, {}, range(0), range(0)),
])
def test_history_of_an_hdfs_checkpoint_is_what_no_restart_from_the_floor_on_needs(floor, kept_floor, p0_below,
                                                                                  p1_below, offsets, commits,
                                                                                  tmp_path):
    hdfs = _hdfs(tmp_path)
    found = restart.history(_files(hdfs), floor, live=False)
    state = [f"state/0/{p}/{v}.{kind}" for p, below in ((0, p0_below), (1, p1_below))
             for kind, versions in below.items() for v in versions]
    assert found.floor == kept_floor
    assert found.state == _with_crc(*state)
    assert found.logs == _logs(offsets, commits)
    assert (found.unreferenced, found.temp, found.problems) == ((), (), ())


def test_removing_the_history_keeps_exactly_the_floor_to_the_latest_batch_restorable(tmp_path):
    hdfs = _hdfs(tmp_path)
    found = restart.history(_files(hdfs), 6, live=False)
    for rel in found.state + found.logs:
        (hdfs.root / rel).unlink()
    assert _files(hdfs).restorable_batches() == [6, 7, 8, 9]
    assert "state/0/0/4.snapshot" in hdfs.files() and "offsets/5" in hdfs.files() and "commits/5" not in hdfs.files()
    again = restart.history(_files(hdfs), 6, live=False)  # nothing more to remove at the same floor
    assert (again.state, again.logs, again.problems) == ((), (), ())


def test_a_missing_delta_loses_the_batches_that_need_it_until_the_next_snapshot(tmp_path):
    hdfs = _hdfs(tmp_path)
    hdfs.remove("state/0/1/5.delta")  # partition 1: versions 1..4 from deltas, 5 gone, 6 is a snapshot
    files = _files(hdfs)
    assert files.restorable_batches() == [0, 1, 2, 3, 5, 6, 7, 8, 9]  # batch 4 needs version 5
    refused = restart.history(files, 2, live=False)
    assert (refused.state, refused.logs, refused.unreferenced) == ((), (), ())
    assert len(refused.problems) == 1 and "batch 4 " in refused.problems[0]
    beyond = restart.history(files, 5, live=False)  # batches 5..9 all load: the loss is below the floor
    assert beyond.problems == ()
    assert beyond.state == _with_crc(*[f"state/0/0/{v}.delta" for v in (1, 2, 3)],
                                     *[f"state/0/1/{v}.delta" for v in (1, 2, 3, 4)])
    assert beyond.logs == _logs(range(0, 4), range(0, 5))


def test_a_missing_offset_loses_its_batch_and_the_next(tmp_path):
    hdfs = _hdfs(tmp_path)
    hdfs.remove("offsets/3")  # batch 3 needs offsets/3; batch 4 needs offsets/3 as its previous batch
    assert _files(hdfs).restorable_batches() == [0, 1, 2, 5, 6, 7, 8, 9]


def test_a_partition_without_any_folder_loses_every_batch_but_one_beyond_the_partitions_is_not_needed(tmp_path):
    hdfs = _hdfs(tmp_path)
    hdfs.store(0, partitions=[3], delta=[7])  # a leftover folder beyond the 2 shuffle partitions, with a gap
    files = _files(hdfs)
    assert files.missing_stores(5) == [] and files.restorable_batches() == list(range(10))
    for rel in sorted(hdfs.files()):
        if rel.startswith("state/0/1/"):
            (hdfs.root / rel).unlink()
    files = _files(hdfs)
    assert files.missing_stores(5) == ["state/0/1"]
    assert files.restorable_batches() == []


def test_no_committed_batch_means_nothing_is_history(tmp_path):
    cp = FakeCheckpoint(tmp_path / "cp", provider=HDFS, crc=True)
    cp.batch(0, commit=False)
    cp.store(0, partitions=2, delta=[1])
    files = _files(cp)
    assert files.latest is None and files.restorable_batches() == []
    found = restart.history(files, 0, live=False)
    assert (found.state, found.logs, found.unreferenced, found.temp) == ((), (), (), ())
    assert len(found.problems) == 1


# --- RocksDB: changelog checkpointing, snapshot zips and their SSTs ------------------------------------------

def _changelog(tmp_path) -> FakeCheckpoint:
    """RocksDB with changelog checkpointing: batches 0..7 (latest 7: version 8), one partition, changelogs 1..8,
    snapshot zips of versions 3 (a.sst, b.sst, archived log w1.log) and 6 (b.sst, c.sst, w2.log); z.sst is
    named by no zip. Immutable files aged a 1000 s, b 2000, c 3000, z 4000, logs 1500 and 2500."""
    cp = FakeCheckpoint(tmp_path / "cp", provider=ROCKSDB, partitions=1, crc=True)
    cp.batches(range(8))
    cp.store(0, partitions=[0], changelog=range(1, 9),
             zip={3: ["a.sst", "b.sst", "w1.log"], 6: ["b.sst", "c.sst", "w2.log"]})
    cp.immutable(0, 0, "z.sst")
    for name, mtime in (("SSTs/a.sst", 1000), ("SSTs/b.sst", 2000), ("SSTs/c.sst", 3000), ("SSTs/z.sst", 4000),
                        ("logs/w1.log", 1500), ("logs/w2.log", 2500)):
        cp.touch(mtime, [f"state/0/0/{name}"])
    return cp


def test_rocksdb_changelog_history_keeps_the_base_snapshot_and_what_it_names(tmp_path):
    changelog = _changelog(tmp_path)
    files = _files(changelog)
    assert files.restorable_batches() == list(range(8))
    found = restart.history(files, 5, live=False)  # floor 5 loads version 6: from 6.zip
    assert found.state == _with_crc(*[f"state/0/0/{v}.changelog" for v in range(1, 6)], "state/0/0/3.zip")
    assert found.logs == _logs(range(0, 4), range(0, 5))
    assert found.unreferenced == _with_crc("state/0/0/SSTs/a.sst", "state/0/0/SSTs/z.sst", "state/0/0/logs/w1.log")
    assert (found.temp, found.problems) == ((), ())
    below = restart.history(files, 4, live=False)  # floor 4 loads version 5: from 3.zip, which stays
    assert below.state == _with_crc("state/0/0/1.changelog", "state/0/0/2.changelog")
    assert below.unreferenced == _with_crc("state/0/0/SSTs/z.sst")


def test_with_a_lease_held_only_immutable_files_older_than_every_kept_one_are_unreferenced(tmp_path):
    changelog = _changelog(tmp_path)
    found = restart.history(_files(changelog), 5, live=True)
    # kept: 6.zip names b (2000 s), c (3000 s), w2 (2500 s): of a, z, w1 only a (1000 s) and w1 (1500 s) are older;
    # z (4000 s) may belong to a version being written now
    assert found.unreferenced == _with_crc("state/0/0/SSTs/a.sst", "state/0/0/logs/w1.log")
    assert found.state == _with_crc(*[f"state/0/0/{v}.changelog" for v in range(1, 6)], "state/0/0/3.zip")


def _snapshots(tmp_path) -> FakeCheckpoint:
    """RocksDB without changelogs: batches 0..5 (latest 5: version 6), one snapshot zip per version, each
    naming the SSTs of its own and the previous version: v1 s1; v2 s1 s2; v3 s2 s3; ... v6 s5 s6."""
    cp = FakeCheckpoint(tmp_path / "cp", provider=ROCKSDB, partitions=1, crc=True)
    cp.batches(range(6))
    cp.store(0, partitions=[0], zip={v: [f"s{n}.sst" for n in (v - 1, v) if n >= 1] for v in range(1, 7)})
    return cp


def test_rocksdb_snapshot_history_drops_the_zips_below_the_floor_and_the_ssts_only_they_name(tmp_path):
    snapshots = _snapshots(tmp_path)
    files = _files(snapshots)
    assert files.restorable_batches() == list(range(6))
    found = restart.history(files, 3, live=False)  # version 4 loads from 4.zip (s3, s4)
    assert found.state == _with_crc("state/0/0/1.zip", "state/0/0/2.zip", "state/0/0/3.zip")
    assert found.unreferenced == _with_crc("state/0/0/SSTs/s1.sst", "state/0/0/SSTs/s2.sst")
    assert found.logs == _logs(range(0, 2), range(0, 3))
    assert restart.sizes(Tree.list(snapshots.path), found.state) == (snapshots.size(*found.state), 6)


def test_a_missing_sst_makes_the_zips_naming_it_unloadable_and_retention_leaves_the_checkpoint_alone(tmp_path):
    snapshots = _snapshots(tmp_path)
    snapshots.remove("state/0/0/SSTs/s3.sst")  # named by 3.zip and 4.zip
    temp = snapshots.temp("offsets", "6", crc=True)
    files = _files(snapshots)
    assert files.restorable_batches() == [0, 1, 4, 5]  # batches 2 and 3 load versions 3 and 4
    found = restart.history(files, 3, live=False)
    assert (found.state, found.logs, found.unreferenced) == ((), (), ())
    assert len(found.problems) == 1 and "batch 3 " in found.problems[0]
    assert found.temp == _with_crc(temp)  # temp files are listed even so: the caller decides


def test_an_unreadable_zip_above_the_latest_batch_keeps_the_stores_immutable_files(tmp_path):
    snapshots = _snapshots(tmp_path)
    snapshots.write("state/0/0/7.zip", b"not a zip")  # a version in flight, written half
    files = _files(snapshots)
    assert files.references["state/0/0/7.zip"] is None and files.restorable_batches() == list(range(6))
    found = restart.history(files, 3, live=False)
    assert found.unreferenced == ()
    assert len(found.problems) == 1 and "state/0/0" in found.problems[0]
    assert found.state == _with_crc("state/0/0/1.zip", "state/0/0/2.zip", "state/0/0/3.zip")  # still not needed


def test_checkpoint_format_v2_files_are_left_alone(tmp_path):
    snapshots = _snapshots(tmp_path)
    snapshots.write("state/0/0/7_0f0e0d0c-1111-2222-3333-444455556666.zip", FakeCheckpoint.zip_bytes(["s6.sst"]))
    files = _files(snapshots)
    assert files.stores[0].unique_ids
    found = restart.history(files, 3, live=False)
    assert (found.state, found.logs, found.unreferenced) == ((), (), ())
    assert len(found.problems) == 1 and "state/0/0" in found.problems[0]


# --- temp files -------------------------------------------------------------------------------------------

def test_temp_files_and_checksums_of_missing_files_are_temp_and_nothing_else_is(tmp_path):
    hdfs = _hdfs(tmp_path)
    offsets_tmp = hdfs.temp("offsets", "10", crc=True)
    state_tmp = hdfs.temp("state/0/0", "11.delta")
    hdfs.write("commits/.99.crc", b"crc of nothing")  # commits/99 was never there
    hdfs.remove("state/0/1/2.delta")
    hdfs.write(crc_name("state/0/1/2.delta"), b"left behind")
    found = restart.history(_files(hdfs), 9, live=False)
    assert found.temp == tuple(sorted([offsets_tmp, crc_name(offsets_tmp), state_tmp, "commits/.99.crc",
                                       "state/0/1/.2.delta.crc"]))
    # .2.delta.crc is temp (its file is gone), not state: history lists every file once
    assert not set(found.temp) & set(found.state + found.logs)
    assert found.state == _with_crc(*[f"state/0/0/{v}.delta" for v in range(1, 8)], "state/0/0/4.snapshot",
                                    *[f"state/0/1/{v}.delta" for v in (1, 3, 4, 5)])
    live = restart.history(_files(hdfs), 9, live=True)
    assert live.temp == found.temp  # listed live or not: only a caller that holds no lease deletes them
