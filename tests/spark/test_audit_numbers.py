"""The audit's numbers on states made by real queries (real Spark, RocksDB, 16 shuffle partitions).

Two queries, audit_numbers once for the module:

- three deduplications in one query, one per input folder, whose event ids are chosen (ids_by_partition)
  to land where Spark's hash partitioning sends them: balanced, 70% on one partition, evenly over 6 of 16;
- a stream-stream join with a 2-hour time bound and no matches: the orders side holds 3 order ids with
  400 rows each (few keys), the payments side one order id with 900 payments plus 300 single ones (a hot
  key). Event times sit around the wall clock, so the batch's own time is meaningful.

Oracle: Spark's state reader counted directly (rows per partition and per key). Each test states the
severity a user expects.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest
from pyspark.sql import functions as F


from tests.support.audit_queries import AUDIT_NUMBERS_PARTITIONS, AUDIT_NUMBERS_SCENARIOS as SCENARIOS, oracle_rows

pytestmark = pytest.mark.spark

P = AUDIT_NUMBERS_PARTITIONS


def full(oracle: dict[int, int]) -> dict[int, int]:
    return {p: 0 for p in range(P)} | oracle


def skew_of(report, op):
    found = [f for f in report.findings if f.code == "STATE_SKEW" and (f.operator_id, f.store_name) == (
        op.operator_id, op.store_name)]
    assert len(found) <= 1
    return found[0] if found else None


def assert_numbers_match_the_reader(finding, per_partition: dict[int, int]):
    """The finding's numbers, recomputed from the state reader's rows per partition."""
    d = finding.details
    total, top = sum(per_partition.values()), max(per_partition.values())
    assert d["basis"] == "rows" and d["partitions"] == P == len(per_partition)
    assert d["total"] == total and d["hot_value"] == top
    assert d["hot_partition"] == min(p for p, n in per_partition.items() if n == top)
    assert d["ratio"] == pytest.approx(top * P / total, abs=1e-3)
    assert d["hot_share"] == pytest.approx(top / total, abs=1e-4)
    assert d["empty_partitions"] == sum(1 for n in per_partition.values() if n == 0)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rows_per_partition_equal_the_state_reader(spark, audit_numbers, scenario):
    op = audit_numbers["ops"][scenario]
    assert op.num_partitions == P
    assert op.rows_per_partition == full(oracle_rows(spark, audit_numbers["dedup_cp"], operatorId=op.operator_id))


def test_balanced_state_is_not_skewed(audit_numbers):
    op = audit_numbers["ops"]["balanced"]
    assert op.skew_ratio < 2 and skew_of(audit_numbers["dedup"], op) is None


def test_one_partition_holding_70_percent_is_an_error(spark, audit_numbers):
    op = audit_numbers["ops"]["hot_partition"]
    finding = skew_of(audit_numbers["dedup"], op)
    assert finding.severity == "error"  # was a warning under max/median
    per_partition = full(oracle_rows(spark, audit_numbers["dedup_cp"], operatorId=op.operator_id))
    assert per_partition[5] == 700 and sum(per_partition.values()) == 1000
    assert_numbers_match_the_reader(finding, per_partition)
    d = finding.details
    assert (d["hot_partition"], d["hot_share"], d["ratio"], d["cause"]) == (5, 0.7, 11.2, "many_keys")
    assert d["hot_partition_keys"] == 700 > d["hashing_max_keys"] and d["keys"] == 1000
    assert "partition 5 holds 70% of the rows (700 of 1000 rows), 11.2x an even split" in finding.message


def test_keys_spread_evenly_over_6_of_16_partitions_are_not_skew(spark, audit_numbers):
    op = audit_numbers["ops"]["six_of_sixteen"]
    per_partition = full(oracle_rows(spark, audit_numbers["dedup_cp"], operatorId=op.operator_id))
    assert sorted(per_partition.values()) == [0] * 10 + [200] * 6
    assert op.skew_ratio == pytest.approx(200 * P / 1200, abs=1e-3)  # 2.67: was 200 and an error
    assert skew_of(audit_numbers["dedup"], op) is None


def test_few_join_keys_leave_partitions_empty_without_a_skew_warning(spark, audit_numbers, numbers_join_report):
    op = numbers_join_report.operator(0, "left-keyWithTsToValues")
    per_partition = full(oracle_rows(spark, audit_numbers["join_cp"], storeName=op.store_name))
    keys = (spark.read.format("statestore").option("path", audit_numbers["join_cp"])  # state format 4: the join key
            .option("storeName", op.store_name).load().select("key.field0").distinct().count())  # and its time
    assert op.rows_per_partition == per_partition and sorted(per_partition.values()) == [0] * 13 + [400] * 3
    assert op.keys_total == keys == 3
    finding = skew_of(numbers_join_report, op)
    assert finding.severity == "info" and finding.details["cause"] == "few_keys"  # was an error under max/median
    assert_numbers_match_the_reader(finding, per_partition)
    assert finding.details["empty_partitions"] == 13 and "only 3 keys for 16 partitions" in finding.message


def test_one_hot_join_key_is_an_error_named_with_its_key(spark, audit_numbers, numbers_join_report):
    op = numbers_join_report.operator(0, "right-keyWithTsToValues")
    per_partition = full(oracle_rows(spark, audit_numbers["join_cp"], storeName=op.store_name))
    assert op.rows_per_partition == per_partition
    finding = skew_of(numbers_join_report, op)
    assert finding.severity == "error"
    assert_numbers_match_the_reader(finding, per_partition)
    hot = finding.details["hot_partition"]
    rows_per_key = Counter(r.order_id for r in spark.read.format("statestore").option("path", audit_numbers["join_cp"])
                           .option("storeName", op.store_name).load()
                           .where(F.col("partition_id") == hot).select("value.order_id").collect())
    assert rows_per_key.most_common(1) == [("HOT", 900)]
    d = finding.details
    assert (d["cause"], d["hot_key"]) == ("hot_key", {"field0": "HOT"})
    assert d["hot_key_share"] == pytest.approx(900 / per_partition[hot], abs=1e-4)
    assert d["keys"] == 301 and "before the join" in finding.recommendation


def test_join_rows_within_the_bound_are_not_behind(spark, audit_numbers, numbers_join_report, numbers_bare_report):
    cp = audit_numbers["join_cp"]
    watermark = numbers_join_report.watermark
    assert watermark == audit_numbers["watermark"]
    left = numbers_join_report.operator(0, "left-keyWithTsToValues")
    orders = spark.read.format("statestore").option("path", cp).option("storeName", left.store_name).load()
    behind_watermark = orders.where(F.col("value.order_time") < F.lit(watermark)).count()
    past_the_bound = orders.where(F.col("value.order_time") < F.lit(watermark - dt.timedelta(hours=2))).count()
    older_than_an_hour = orders.where(F.col("value.order_time") < F.lit(watermark - dt.timedelta(hours=1))).count()
    assert behind_watermark > 1000 and past_the_bound == 0 and older_than_an_hour > 300
    assert left.rows_behind_watermark == past_the_bound == 0  # a fixed 1 h grace counted the older ones
    assert (left.join_grace_seconds, numbers_join_report.operator(0, "right-keyWithTsToValues").join_grace_seconds) == (
        7200, 0)
    assert "EVICTION_STALLED" not in {f.code for f in numbers_join_report.findings}

    left = numbers_bare_report.operator(0, "left-keyWithTsToValues")  # no job: the configured 1 h stands in
    assert left.rows_behind_watermark == older_than_an_hour and left.join_grace_seconds == 3600
    [stalled] = [f for f in numbers_bare_report.findings if f.code == "EVICTION_STALLED"]
    assert "watermark - 1 h: join_eviction_grace_seconds from the audit config" in stalled.message


def test_watermark_lag_of_a_chosen_batch_uses_the_batch_time(audit_numbers, numbers_join_report, numbers_bare_report):
    assert "WATERMARK_LAG" not in {f.code for f in numbers_bare_report.findings}  # by the wall clock: 2 days behind
    assert numbers_bare_report.audited_at - numbers_bare_report.batch_timestamp > dt.timedelta(days=2)
    assert numbers_bare_report.watermark_lag_seconds < 3600  # the batch ran right after its data arrived
    assert numbers_bare_report.pinned_batch and numbers_bare_report.batch_id == numbers_join_report.batch_id
