"""delta-rs writes skip a repeated (app_id, batch_id); MERGE keeps one row per key; concurrent writers of
one batch land once, writers of different app ids all land (real Delta tables, real threads)."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from stateops.delta import write_batch

pytestmark = pytest.mark.unit


def test_replayed_batch_is_skipped_and_merge_upserts(tmp_path):
    uri = str(tmp_path / "t")
    first = pa.table({"k": ["a", "b"], "v": [1, 2]})
    assert not write_batch(uri, first, app_id="q1", batch_id=0, merge_keys=["k"]).skipped
    replay = write_batch(uri, first, app_id="q1", batch_id=0, merge_keys=["k"])
    assert replay.skipped and replay.rows == 0
    write_batch(uri, pa.table({"k": ["a", "c"], "v": [5, 6]}), app_id="q1", batch_id=1, merge_keys=["k"])
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("k").to_pydict()
    assert rows == {"k": ["a", "b", "c"], "v": [5, 2, 6]}
    assert DeltaTable(uri).transaction_version("q1") == 1


def test_new_checkpoint_means_new_app_id(tmp_path):
    uri = str(tmp_path / "t")
    data = pa.table({"k": ["a"], "v": [1]})
    write_batch(uri, data, app_id="query-old", batch_id=5)
    assert write_batch(uri, data, app_id="query-old", batch_id=3).skipped
    assert not write_batch(uri, data, app_id="query-new", batch_id=0).skipped
    assert DeltaTable(uri).count() == 2


def _txn(app_id: str) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app_id, 1)])


@pytest.mark.parametrize("operation", ["append", "merge"])
def test_delta_rs_refuses_a_commit_on_a_snapshot_older_than_a_commit_of_the_same_app_id(tmp_path, operation):
    """The delta-rs behaviour write_batch relies on (deltalake 1.6.6)."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"k": ["seed"], "v": [0]}))
    data = pa.table({"k": ["a"], "v": [1]})
    stale = DeltaTable(uri)
    write_deltalake(uri, data, mode="append", commit_properties=_txn("q1"))  # lands after `stale` was read
    with pytest.raises(CommitFailedError):
        if operation == "append":
            write_deltalake(stale, data, mode="append", commit_properties=_txn("q1"))
        else:
            (stale.merge(data, predicate="t.k = s.k", source_alias="s", target_alias="t",
                         commit_properties=_txn("q1")).when_matched_update_all().when_not_matched_insert_all()
             .execute())
    assert DeltaTable(uri).count() == 2


def test_delta_rs_lands_a_blind_append_over_a_commit_of_another_app_id(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"k": ["seed"], "v": [0]}))
    stale = DeltaTable(uri)
    write_deltalake(uri, pa.table({"k": ["a"], "v": [1]}), mode="append", commit_properties=_txn("q1"))
    write_deltalake(stale, pa.table({"k": ["b"], "v": [2]}), mode="append", commit_properties=_txn("q2"))
    assert DeltaTable(uri).count() == 3 and DeltaTable(uri).transaction_version("q2") == 1


def _race(writers: int, write) -> list:
    """Run `write(i)` on `writers` threads released at once; every result or exception, in order."""
    barrier = threading.Barrier(writers)
    results: list = [None] * writers

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = write(i)
        except Exception as err:  # collected: the test asserts there are none
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("merge_keys", [(), ("k",)], ids=["append", "merge"])
def test_concurrent_writers_of_one_batch_land_exactly_once(tmp_path, merge_keys):
    """Eight writers of the same (app_id, batch_id) at once, on a table that does not exist yet and then
    for four more batches: one commit per batch, the others skip, nobody fails."""
    uri = str(tmp_path / "t")
    outcomes = []
    for batch_id in range(5):
        data = pa.table({"k": [f"row-{batch_id}"], "v": [batch_id]})
        outcomes += _race(8, lambda _: write_batch(uri, data, app_id="q1", batch_id=batch_id,
                                                   merge_keys=merge_keys))
    table = DeltaTable(uri)
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == [f"row-{b}" for b in range(5)]
    assert table.transaction_version("q1") == 4
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert sum(not o.skipped for o in outcomes) == 5
    assert any(o.attempts > 1 for o in outcomes), "no writer lost a commit race: the test raced nothing"


@pytest.mark.parametrize("merge_keys", [(), ("k",)], ids=["append", "merge"])
def test_concurrent_writers_with_their_own_app_ids_all_land(tmp_path, merge_keys):
    uri = str(tmp_path / "t")
    write_batch(uri, pa.table({"k": ["seed"], "v": [0]}), app_id="seed", batch_id=0)
    outcomes = _race(6, lambda i: write_batch(uri, pa.table({"k": [f"q{i}"], "v": [i]}), app_id=f"q{i}",
                                              batch_id=3, merge_keys=merge_keys))
    assert not [o for o in outcomes if isinstance(o, Exception)]
    table = DeltaTable(uri)
    assert sorted(table.to_pyarrow_table().column("k").to_pylist()) == ["q0", "q1", "q2", "q3", "q4", "q5", "seed"]
    assert all(table.transaction_version(f"q{i}") == 3 for i in range(6))
