"""Delta tables shared by delta-rs and Delta's own Spark writer: each reads and appends to what the other wrote,
and a Delta transaction (app id, version) recorded by one is skipped by the other, for appends and MERGEs; a
second MERGE in one batch (another table) is not skipped by the txn settings the first one left.

The JVM side is Delta 4.4.0 from the pinned jars (`stateops jars fetch`, run by scripts/setup); the test skips, saying so, without those jars.
"""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from stateops.jobs.runtime.sink import TXN_APP_ID, TXN_VERSION, write_with_jvm
from stateops.delta import write_batch

pytestmark = pytest.mark.spark

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "value": pa.array(["a", "b"])})


def _rows(spark, uri: str) -> list[tuple]:
    by_rs = sorted(DeltaTable(uri).to_pyarrow_table().select(["id", "value"]).to_pylist(), key=lambda r: r["id"])
    by_spark = sorted(tuple(r) for r in spark.read.format("delta").load(uri).select("id", "value").collect())
    assert [(r["id"], r["value"]) for r in by_rs] == by_spark, "both engines read the same rows"
    return by_spark


@pytest.mark.long  # the default run: MERGEs skipped by transaction on both writers (this module), the kill
# between the Delta commit and commits/N (test_kill_restart)
def test_appends_cross_engines_and_a_recorded_version_is_skipped_by_both(delta_spark, tmp_path):
    spark, uri = delta_spark, str(tmp_path / "t")
    assert not write_batch(uri, ROWS, app_id="app", batch_id=0).skipped            # delta-rs creates it
    frame = spark.createDataFrame([(3, "c")], "id long, value string")
    assert write_with_jvm(frame, uri, "app", 1, ()) == 1                           # Spark appends version 1
    assert write_with_jvm(frame, uri, "app", 1, ()) == 1 and len(_rows(spark, uri)) == 3  # Delta skipped it
    assert write_batch(uri, ROWS, app_id="app", batch_id=1).skipped                 # delta-rs sees Spark's txn
    assert not write_batch(uri, pa.table({"id": [4], "value": ["d"]}), app_id="app", batch_id=2).skipped
    assert write_with_jvm(spark.createDataFrame([(9, "x")], "id long, value string"), uri, "app", 2, ()) == 1
    assert _rows(spark, uri) == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]           # Spark skipped delta-rs's txn
    assert DeltaTable(uri).transaction_version("app") == 2
    assert write_with_jvm(frame, uri, "other-app", 0, ()) == 1 and len(_rows(spark, uri)) == 5


def test_merges_are_skipped_by_txn_and_the_settings_do_not_leak_to_the_next_merge(delta_spark, tmp_path):
    spark, first, second = delta_spark, str(tmp_path / "first"), str(tmp_path / "second")
    for uri in (first, second):
        write_batch(uri, ROWS, app_id="seed", batch_id=0)
    update = spark.createDataFrame([(1, "A"), (5, "e")], "id long, value string")
    write_with_jvm(update, first, "app", 7, ("id",))
    assert _rows(spark, first) == [(1, "A"), (2, "b"), (5, "e")]
    assert spark.conf.get(TXN_APP_ID, None) is None and spark.conf.get(TXN_VERSION, None) is None
    # The same version of the same app in another table of the batch: written, not taken for a repeat.
    write_with_jvm(update, second, "app", 7, ("id",))
    assert _rows(spark, second) == [(1, "A"), (2, "b"), (5, "e")]
    # A replay of version 7 is skipped by Spark's MERGE and by delta-rs's MERGE alike.
    again = spark.createDataFrame([(1, "replayed")], "id long, value string")
    write_with_jvm(again, first, "app", 7, ("id",))
    assert write_batch(first, pa.table({"id": [1], "value": ["replayed"]}), app_id="app", batch_id=7,
                       merge_keys=("id",)).skipped
    assert _rows(spark, first) == [(1, "A"), (2, "b"), (5, "e")]
    # delta-rs's MERGE of version 8, then Spark's replay of it: skipped.
    write_batch(first, pa.table({"id": pa.array([2], pa.int64()), "value": ["B"]}), app_id="app", batch_id=8,
                merge_keys=("id",))
    write_with_jvm(spark.createDataFrame([(2, "replayed")], "id long, value string"), first, "app", 8, ("id",))
    assert _rows(spark, first) == [(1, "A"), (2, "B"), (5, "e")]


def test_the_spark_writer_commits_one_file_per_small_batch_nothing_for_an_empty_one_and_keeps_stats_it_is_told(
        delta_spark, tmp_path):
    spark, uri = delta_spark, str(tmp_path / "t")
    frame = spark.range(0, 40, numPartitions=4).selectExpr("id", "cast(id as string) value", "id % 3 bucket")
    assert write_with_jvm(frame, uri, "app", 0, (), stats_columns=("id",)) == 40   # creates the table
    table = DeltaTable(uri)
    assert table.metadata().configuration == {"delta.dataSkippingStatsColumns": "id"}
    assert len(table.file_uris()) == 1                              # 4 partitions of 10 rows: one file
    stats = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    assert stats["min.id"] == [0] and "min.value" not in stats      # statistics on `id` only
    assert write_with_jvm(frame.limit(0), uri, "app", 1, ()) == 0  # an empty batch: no commit at all
    assert DeltaTable(uri).version() == 0
    update = spark.createDataFrame([(1, "A", 1), (99, "new", 0)], "id long, value string, bucket long")
    assert write_with_jvm(update, uri, "app", 2, ("id",)) == 2     # MERGE: one updated, one inserted
    assert write_with_jvm(update, uri, "app", 2, ("id",)) == 0     # Delta skips the recorded version
    assert DeltaTable(uri).version() == 1 and DeltaTable(uri).transaction_version("app") == 2
    assert len(_rows(spark, uri)) == 41
