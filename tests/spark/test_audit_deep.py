"""Deep audit on checkpoints made by real queries (real Spark, real RocksDB / HDFS provider, no mocks).

Oracle: Spark's state reader counted directly (statestore read + groupBy partition_id count). The
checkpoints are built once for the module: the four catalog jobs' own stateful queries on generated
input, plus direct queries for a hot partition, unbounded dedup, no watermark and the HDFS provider.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from stateops.audit import Thresholds, deep_audit, fast_audit, load_history, record
from stateops.audit.deep import StateReadError
from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError
from stateops.layout import Layout

from stateops.checkpoints.state_store import HDFS_PROVIDER
from tests.support.audit_queries import (DEEP_AUDIT_JOBS, event_stream, events, nonzero, oracle_rows,
                                         write_batches)

pytestmark = pytest.mark.spark

JOBS = DEEP_AUDIT_JOBS


def store_options(op) -> dict:
    options = {"operatorId": op.operator_id}
    if op.store_name != "default":
        options["storeName"] = op.store_name
    return options


@pytest.mark.parametrize("name", JOBS + ("hot_partition", "unbounded_dedup", "no_watermark", "hdfs",
                                  "complete_mode"))  # collections (transformWithState's variables): below
def test_rows_per_partition_equal_the_state_reader(spark, deep_audit_states, deep_audit_reports, name):
    report = deep_audit_reports[name]
    cp = deep_audit_states["cps"][name]
    assert report.batch_id == Checkpoint.open(cp).latest_committed_batch()
    assert report.operators, name
    for op in report.operators:
        expected = oracle_rows(spark, cp, **store_options(op))
        assert nonzero(op.rows_per_partition) == expected, (name, op.operator_id, op.store_name)
        assert set(op.rows_per_partition) == set(range(op.num_partitions)) and op.num_partitions == 4
        assert op.rows_total == sum(expected.values())
        assert op.bytes_total == sum(op.bytes_per_partition.values())
        assert op.estimated_bytes and op.avg_key_bytes and op.avg_value_bytes is not None
        assert len(op.top_keys) <= 5
        sizes = [k["value_bytes"] for k in op.top_keys]
        assert sizes == sorted(sizes, reverse=True)
    # an operator's files are reported once: by its store, or by the first unit read from a store of several (a
    # join's sides in state format 4, transformWithState's variables)
    for operator in {op.operator_id for op in report.operators}:
        assert sum(op.bytes_total for op in report.operators if op.operator_id == operator) > 0, (name, operator)


def codes(report, severity=None):
    return {f.code for f in report.findings if severity is None or f.severity == severity}


def test_balanced_job_has_no_false_skew(deep_audit_reports):
    report = deep_audit_reports["user_activity"]
    assert [(o.operator_name, o.kind) for o in report.operators] == [
        ("stateStoreSave", "aggregation"), ("dedupeWithinWatermark", "dedup_within_watermark")]
    assert "STATE_SKEW" not in codes(report)
    assert all(o.skew_ratio < 2 for o in report.operators)
    assert not report.has_errors and codes(report) <= {"WATERMARK_LAG"}  # generated data is from 2026-01-01
    assert all(o.rows_behind_watermark == 0 for o in report.operators)
    agg = report.operators[0]
    assert agg.event_time_column == "key.window.end" and agg.oldest_event_time > report.watermark


def test_hot_partition_gives_state_skew(spark, deep_audit_states, deep_audit_reports):
    report = deep_audit_reports["hot_partition"]
    [op] = report.operators
    counts = oracle_rows(spark, deep_audit_states["cps"]["hot_partition"])
    assert max(counts, key=counts.get) == 2 and counts[2] >= 1800
    assert op.skew_ratio == pytest.approx(counts[2] * 4 / sum(counts.values()), abs=1e-3)  # max/mean: ~3.7 of 4
    [skew] = [f for f in report.findings if f.code == "STATE_SKEW"]
    assert skew.operator_id == 0 and skew.store_name == "default" and "partition 2 holds 9" in skew.message
    assert skew.severity == "error" and skew.details["cause"] == "many_keys"  # 1800 distinct ids, not one key


def test_unbounded_dedup(deep_audit_reports):
    report = deep_audit_reports["unbounded_dedup"]
    [op] = report.operators
    assert (op.operator_name, op.kind, op.event_time_column, op.rows_total) == ("dedupe", "dedup", None, 900)
    assert report.watermark is not None and "UNBOUNDED_DEDUP" in codes(report, "error") and report.has_errors


def test_no_watermark(deep_audit_reports):
    report = deep_audit_reports["no_watermark"]
    assert report.watermark is None and report.batch_id >= 1
    [finding] = [f for f in report.findings if f.code == "NO_WATERMARK"]
    assert finding.severity == "error" and finding.operator_id == 0


def test_join_reports_each_sides_rows_and_unmatched_rows(spark, deep_audit_states, deep_audit_reports):
    """The join in state format 4 (the session's for a new checkpoint): each side's values store (its time index
    holds no rows of its own); a checkpoint in format 2 keeps its four stores: tests/spark/test_join_state_format.py."""
    report, cp = deep_audit_reports["order_payments"], deep_audit_states["cps"]["order_payments"]
    assert [o.store_name for o in report.operators] == ["left-keyWithTsToValues", "right-keyWithTsToValues"]
    cases = deep_audit_states["generated"].payment_cases
    for op in report.operators:
        state = (spark.read.format("statestore").option("path", cp).option("storeName", op.store_name).load())
        assert op.unmatched_rows == state.where(~F.col("value.matched")).count()
        assert op.rows_behind_watermark == 0 and op.event_time_column.startswith("value.")
        assert op.top_keys and op.top_keys[0]["key"]["field0"].startswith("o")  # string values: ranked
    left = report.operator(0, "left-keyWithTsToValues")
    assert left.unmatched_rows > 0
    orders = (spark.read.format("statestore").option("path", cp).option("storeName", left.store_name).load()
              .select("value.order_id", "value.matched").collect())
    never_paid = [r for r in orders if cases[r.order_id] == "never_paid"]
    assert never_paid and not any(r.matched for r in never_paid)  # they wait for a payment that never comes
    assert "NO_WATERMARK" not in codes(report) and "EVICTION_STALLED" not in codes(report)
    # The job's own bound (payment within 5 minutes) decides which rows are overdue: left rows wait 5 minutes
    # behind the watermark for a payment, right rows none. Rows that wait are there, and are not behind.
    assert (left.join_grace_seconds, report.operator(0, "right-keyWithTsToValues").join_grace_seconds) == (300, 0)
    assert "job order_payments" in left.join_grace_source
    waiting = (spark.read.format("statestore").option("path", cp).option("storeName", left.store_name).load()
               .where((F.col("value.order_time") < F.lit(report.watermark))
                      & (F.col("value.order_time") >= F.lit(report.watermark - dt.timedelta(minutes=5)))).count())
    assert waiting > 0 and left.rows_behind_watermark == 0


def test_custom_state(deep_audit_reports):
    report = deep_audit_reports["user_actions"]
    [op] = report.operators
    assert (op.operator_name, op.kind, op.event_time_column) == ("applyInPandasWithState", "custom",
                                                                 "value.timeoutTimestamp")
    assert op.rows_total == 60 and op.rows_behind_watermark == 0
    assert "NO_WATERMARK" not in codes(report) and not report.has_errors


def test_complete_mode_aggregation_gives_eviction_stalled(spark, deep_audit_states, deep_audit_reports):
    report = deep_audit_reports["complete_mode"]
    [op] = report.operators
    behind = (spark.read.format("statestore").option("path", deep_audit_states["cps"]["complete_mode"]).load()
              .where(F.col("key.window.end") < F.lit(report.watermark)).count())
    assert op.rows_behind_watermark == behind > 0
    [stalled] = [f for f in report.findings if f.code == "EVICTION_STALLED"]
    assert stalled.severity in ("warn", "error") and f"{behind} of {op.rows_total} rows" in stalled.message
    assert "complete mode" in stalled.recommendation


def test_hdfs_provider(deep_audit_states, deep_audit_reports):
    report = deep_audit_reports["hdfs"]
    assert report.provider == HDFS_PROVIDER
    [op] = report.operators
    kinds = {f.kind for f in Checkpoint.open(deep_audit_states["cps"]["hdfs"]).state_files()}
    assert kinds <= {"delta", "snapshot"} and "delta" in kinds
    assert op.estimated_bytes == pytest.approx(2 * op.rows_total * (op.avg_key_bytes + op.avg_value_bytes), rel=0.01)


def test_fast_audit_agrees_on_bytes_and_stores(deep_audit_states, deep_audit_reports):
    for name, cp in deep_audit_states["cps"].items():
        fast = fast_audit(cp)
        deep = deep_audit_reports[name]
        if name == "collections":  # transformWithState's variables: column families of one store on disk, whose
            # files the fast audit reports once; the deep audit reads each variable and reports the files once too
            [(op, store, kind)] = [(o.operator_id, o.store_name, o.kind) for o in fast.operators]
            assert (op, store, kind) == (0, "default", "tws") and {o.operator_id for o in deep.operators} == {0}
            assert sum(o.bytes_total for o in deep.operators) == fast.operators[0].bytes_total
            continue
        assert [(o.operator_id, o.store_name, o.kind) for o in fast.operators] == [
            (o.operator_id, o.store_name, o.kind) for o in deep.operators], name
        assert [o.bytes_per_partition for o in fast.operators] == [o.bytes_per_partition for o in deep.operators]
        assert {f.code for f in fast.findings} & {"UNBOUNDED_DEDUP", "NO_WATERMARK"} == \
            codes(deep) & {"UNBOUNDED_DEDUP", "NO_WATERMARK"}, name


def test_older_batch_and_growth_history(spark, deep_audit_states, tmp_path):
    cp = deep_audit_states["cps"]["unbounded_dedup"]
    layout = Layout(str(tmp_path / "ops"))
    t = Thresholds().with_overrides({"growth_min_rows": 1})
    first = deep_audit(spark, cp, batch_id=0, thresholds=t, layout=layout,
                       now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2))
    assert nonzero(first.operators[0].rows_per_partition) == oracle_rows(spark, cp, batch_id=0)
    assert first.operators[0].rows_total == 300
    record(layout, first)
    latest = deep_audit(spark, cp, thresholds=t, layout=layout)
    [growth] = [f for f in latest.findings if f.code == "STATE_GROWTH"]
    assert growth.severity == "error" and "rows grew 3.00x from 300 (batch 0" in growth.message
    record(layout, latest)
    assert [r["batch_id"] for r in load_history(layout, cp)] == [0, latest.batch_id]


def test_bad_targets_are_clear_errors(spark, deep_audit_states, tmp_path):
    with pytest.raises(NotACheckpointError, match="does not exist"):
        deep_audit(spark, str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpointError, match="not a Structured Streaming checkpoint"):
        deep_audit(spark, str(tmp_path / "empty"))
    with pytest.raises(NotACheckpointError, match="batch 99 is not committed"):
        deep_audit(spark, deep_audit_states["cps"]["no_watermark"], batch_id=99)
    # State that Spark's state-metadata does not list (its operator metadata gone, as in a checkpoint Spark 3.5 wrote)
    # is read from its schema files, as the state reader reads it; without those too it is refused, never left out.
    copy = str(tmp_path / "unlisted")
    shutil.copytree(deep_audit_states["cps"]["no_watermark"], copy)
    shutil.rmtree(os.path.join(copy, "state", "0", "_metadata"))
    [op] = deep_audit(spark, copy).operators
    assert (op.operator_name, nonzero(op.rows_per_partition)) == ("stateStoreSave", oracle_rows(spark, copy))
    shutil.rmtree(os.path.join(copy, "state", "0", "0", "_metadata"))
    with pytest.raises(StateReadError, match=r"operator\(s\) \[0\] hold state under state/ but neither Spark's "
                                             r"state-metadata nor their schema files describe them"):
        deep_audit(spark, copy)


def test_auditing_a_running_query_does_not_disturb_it(spark, tmp_path):
    folder = tmp_path / "live"
    write_batches(folder, [events(0, 200)], prefix="a")
    cp = str(tmp_path / "live_cp")
    frame = (event_stream(spark, folder).withWatermark("event_time", "10 minutes")
             .dropDuplicatesWithinWatermark(["event_id"])
             .groupBy(F.window("event_time", "5 minutes"), "user_id").count())
    query = (frame.writeStream.format("noop").outputMode("update").option("checkpointLocation", cp)
             .trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 90
        while not Path(cp, "commits", "0").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        report = deep_audit(spark, cp)
        assert sum(o.rows_total for o in report.operators) > 0
        write_batches(folder, [events(1, 200), events(2, 200)], prefix="b")
        while time.monotonic() < deadline:
            committed = Checkpoint.open(cp).committed_batches()
            progress = query.recentProgress
            if sum(p["numInputRows"] for p in progress) >= 600 and committed[-1] > report.batch_id:
                break
            assert query.exception() is None
            time.sleep(0.5)
        assert query.isActive and query.exception() is None
        assert sum(p["numInputRows"] for p in query.recentProgress) >= 600
        again = deep_audit(spark, cp)
        assert again.batch_id > report.batch_id
        for op in again.operators:
            assert nonzero(op.rows_per_partition) == oracle_rows(spark, cp, batch_id=again.batch_id,
                                                                 **store_options(op))
    finally:
        query.stop()


def test_list_and_map_state_count_each_key_once_and_a_hot_user_is_one_key(spark, deep_audit_states,
                                                                           deep_audit_reports):
    """transformWithState's list and map state: Spark's reader has a row per element and per entry; the audit
    counts keys (users), names the heaviest, and one user holding most of a partition is a hot key, which no
    repartition splits, not many keys (issue 51: it counted rows as keys)."""
    from stateops.audit.findings import evaluate

    cp, report = deep_audit_states["cps"]["collections"], deep_audit_reports["collections"]
    variables = {op.store_name: op for op in report.operators}
    assert {"seen", "actions"} <= set(variables), sorted(variables)
    for name in ("seen", "actions"):
        op = variables[name]
        df = (spark.read.format("statestore").option("path", cp).option("operatorId", op.operator_id)
              .option("stateVarName", name).load())
        rows = {r.partition_id: r["count"] for r in df.groupBy("partition_id").count().collect()}
        keys = {r.partition_id: r["count"] for r in
                df.select("partition_id", "key").distinct().groupBy("partition_id").count().collect()}
        assert nonzero(op.rows_per_partition) == rows and op.rows_total == sum(rows.values())
        assert nonzero(op.keys_per_partition) == keys and op.keys_total == sum(keys.values()) == 31  # hot + 30
    seen = variables["seen"]
    hot = max(seen.rows_per_partition, key=seen.rows_per_partition.get)
    assert seen.heaviest_keys[hot]["rows"] == 400 and "hot" in str(seen.heaviest_keys[hot]["key"])
    [skew] = [f for f in evaluate(report, Thresholds(skew_min_rows=10, skew_ratio=2)) if f.code == "STATE_SKEW"
              and f.store_name == "seen"]
    assert skew.details["cause"] == "hot_key" and skew.details["keys"] == 31, skew.details
