"""Findings, thresholds and store profiles: pure logic, no JVM."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from stateops.audit.findings import (CONFIGURED_GRACE, cleanup_finding, evaluate, eviction_finding, growth_finding,
                                     large_state_finding, latest_state_memory, no_watermark_finding, operator_progress,
                                     skew_finding, unbounded_dedup_finding, watermark_lag_finding)
from stateops.audit.model import CODES, AuditReport, Finding, OperatorAudit, skew_ratio
from stateops.checkpoints.profile import parse_schema_file, profile
from stateops.audit.thresholds import Thresholds
from stateops.errors import ConfigError

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
T = Thresholds()


def op(**kw) -> OperatorAudit:
    base = dict(operator_id=0, operator_name="stateStoreSave", store_name="default", num_partitions=4,
                kind="aggregation", watermarked=True, event_time_column="key.window.end")
    base.update(kw)
    return OperatorAudit(**base)


def rows(*counts: int) -> dict[int, int]:
    return dict(enumerate(counts))


# --- skew ----------------------------------------------------------------------------------------------

def test_skew_ratio_is_max_over_mean_over_every_partition():
    assert skew_ratio(rows(10, 10, 10, 10)) == 1.0
    assert skew_ratio(rows(900, 30, 30, 40)) == 3.6
    assert skew_ratio(rows(5, 0, 0, 0)) == 4.0  # the ceiling: the partition count
    assert skew_ratio(rows(*[200] * 6, *[0] * 10)) == pytest.approx(200 / 75, abs=1e-3)  # the issue's 6 of 16
    assert skew_ratio(rows(*[100] * 9, *[0] * 7)) == pytest.approx(100 / 56.25, abs=1e-3)  # and 9 of 16
    assert skew_ratio(rows(0, 0)) is None
    assert skew_ratio({}) is None


def keyed(*counts: int, **kw) -> OperatorAudit:
    """A store whose rows are its keys (aggregation, dedup): what the deep audit reports."""
    per_partition = rows(*counts)
    return op(rows_total=sum(counts), rows_per_partition=per_partition, keys_total=sum(counts),
              keys_per_partition=dict(per_partition), **kw)


def skew(audit: OperatorAudit, t: Thresholds = T):
    finding = skew_finding(audit, t)
    return (finding.severity, finding.details["cause"]) if finding else None


def test_the_issues_examples_get_the_severity_a_user_expects():
    assert skew(keyed(*[200] * 6, *[0] * 10)) is None  # evenly over 6 of 16: 2.7x, no partition is hot
    assert skew(keyed(*[100] * 9, *[0] * 7)) is None
    hot = keyed(700, *[20] * 15)  # one partition of 16 holds 70%
    assert skew(hot) == ("error", "many_keys")
    d = skew_finding(hot, T).details
    assert (d["basis"], d["ratio"], d["hot_partition"], d["hot_share"], d["partitions"], d["empty_partitions"]) == (
        "rows", 11.2, 0, 0.7, 16, 0)
    assert (d["hot_partition_keys"], d["keys"], d["hot_key_share"]) == (700, 1000, pytest.approx(1 / 700, abs=1e-4))
    assert d["hashing_max_keys"] < 700 and (d["warn_ratio"], d["error_ratio"]) == (4.0, 8.0)


def test_thresholds_work_at_4_and_at_200_partitions():
    assert skew(keyed(1000, 1100, 950, 950)) is None
    assert skew(keyed(1820, 60, 60, 60)) == ("error", "many_keys")  # 91% of 4: 3.64x, above 0.8 x 4 = 3.2x
    warn = skew_finding(keyed(1300, 240, 230, 230), T)  # 65% of 4: 2.6x, above 0.6 x 4 = 2.4x
    assert warn.severity == "warn" and (warn.details["warn_ratio"], warn.details["error_ratio"]) == (2.4, 3.2)
    assert "partition 0 holds 65% of the rows (1300 of 2000 rows), 2.6x an even split over 4 partitions" in warn.message
    assert skew(keyed(1100, 300, 300, 300)) is None  # 55%: a lopsided split, not a hot partition
    spread_200 = [5] * 200
    assert skew(keyed(*spread_200[:-1], 105)) == ("error", "many_keys")  # 105 of 1100 keys on one of 200: 19x
    assert skew(keyed(*[4] * 199, 17)) is None  # 3.4x, what hashing 813 keys over 200 partitions does anyway


def test_spreads_that_hashing_explains_are_not_skew():
    # 1000 keys over 400 partitions: 2.5 per partition on average, 12 on one is chance (4.8x).
    chance = keyed(12, *[3] * 190, *[2] * 209)
    assert skew_ratio(chance.rows_per_partition) == 4.8
    assert skew(chance) is None
    crowded = keyed(60, *[3] * 142, *[2] * 257)  # 60 keys on one partition are not chance
    assert skew_ratio(crowded.rows_per_partition) == 24.0 and skew(crowded) == ("error", "many_keys")


def join_side(per_partition: dict[int, int], keys_per_partition: dict[int, int], heaviest: dict[int, dict]):
    return op(kind="join", operator_name="symmetricHashJoin", store_name="left-keyWithIndexToValue",
              rows_total=sum(per_partition.values()), rows_per_partition=per_partition,
              keys_total=sum(keys_per_partition.values()), keys_per_partition=keys_per_partition,
              heaviest_keys=heaviest, num_partitions=len(per_partition))


def test_few_keys_leave_partitions_empty_and_that_is_not_skew():
    # Three join keys with 400 rows each over 16 partitions: 13 partitions must stay empty.
    per = {p: 0 for p in range(16)} | {3: 400, 7: 400, 11: 400}
    keys = {p: 0 for p in range(16)} | {3: 1, 7: 1, 11: 1}
    heaviest = {p: {"key": {"field0": f"k{p}"}, "rows": 400} for p in (3, 7, 11)}
    finding = skew_finding(join_side(per, keys, heaviest), T)
    assert (finding.severity, finding.details["cause"], finding.details["empty_partitions"]) == ("info", "few_keys", 13)
    assert "only 3 keys for 16 partitions, so 13 partitions hold no state" in finding.message
    assert "not skew" in finding.message and "fewer shuffle partitions" in finding.recommendation
    # Two of them on one partition (hashing does that): still few keys, not a hot partition.
    per2 = {p: 0 for p in range(16)} | {3: 800, 11: 400}
    keys2 = {p: 0 for p in range(16)} | {3: 2, 11: 1}
    heaviest2 = {3: {"key": {"field0": "k3"}, "rows": 400}, 11: {"key": {"field0": "k11"}, "rows": 400}}
    assert skew(join_side(per2, keys2, heaviest2)) == ("info", "few_keys")


def test_one_hot_join_key():
    per = {0: 930, 1: 25, 2: 20, 3: 25}  # 900 rows of one order id plus 100 single-row keys
    keys = {0: 31, 1: 25, 2: 20, 3: 25}
    heaviest = {0: {"key": {"field0": "HOT"}, "rows": 900}, 1: {"key": {"field0": "a"}, "rows": 1}}
    finding = skew_finding(join_side(per, keys, heaviest), T)
    d = finding.details
    assert (finding.severity, d["cause"], d["hot_key"], d["hot_key_share"]) == ("error", "hot_key", {"field0": "HOT"},
                                                                                pytest.approx(900 / 930, abs=1e-4))
    assert 'one key, {"field0": "HOT"}, holds 97% of that partition' in finding.message
    assert "before the join" in finding.recommendation


def test_skew_by_bytes_for_fast_audits():
    mib = 1024 * 1024
    audit = op(rows_total=None, bytes_total=130 * mib, bytes_per_partition=rows(100 * mib, 10 * mib, 10 * mib, 10 * mib))
    finding = skew_finding(audit, T)
    assert finding.severity == "warn" and finding.details["cause"] == "unknown"  # no key counts in a fast audit
    assert "(100.0 MiB of 130.0 MiB on disk)" in finding.message and "3.08x an even split" in finding.message
    assert skew_finding(op(rows_total=None, bytes_total=13 * mib, bytes_per_partition=rows(10 * mib, mib, mib, mib)),
                        T) is None  # below skew_min_bytes


def test_skew_ignores_small_stores_and_respects_configured_thresholds():
    assert skew_finding(keyed(97, 1, 1, 1), T) is None
    assert skew_finding(keyed(1820, 60, 60, 60), T.with_overrides({"skew_share": 0.95, "skew_share_error": 0})) is None
    assert skew(keyed(1820, 60, 60, 60), T.with_overrides({"skew_share_error": 0})) == ("warn", "many_keys")
    with pytest.raises(ConfigError, match=r"audit.skew_share: 60 is above 1.*0.6 for 60%"):
        Thresholds.from_config({"audit": {"skew_share": 60}})


# --- eviction, dedup, watermark ----------------------------------------------------------------------

def test_eviction_stalled_share_levels():
    wm = NOW - dt.timedelta(hours=1)
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=0), wm, T) is None
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=5), wm, T) is None  # 0.5% < 1%
    warn = eviction_finding(op(rows_total=1000, rows_behind_watermark=50), wm, T)
    assert warn.severity == "warn" and "50 of 1000 rows (5.0%)" in warn.message
    assert "complete mode" in warn.recommendation
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=500), None, T) is None


def test_eviction_stalled_names_the_join_bound_it_used():
    wm = NOW - dt.timedelta(hours=1)
    side = dict(kind="join", store_name="left-keyWithIndexToValue", rows_total=100, rows_behind_watermark=60,
                event_time_column="value.order_time")
    bound = eviction_finding(op(**side, join_grace_seconds=300, join_grace_source="the left side's wait under the "
                                "join's time bound (job order_payments)"), wm, T)
    assert bound.severity == "error" and "time-range" in bound.recommendation
    assert ("(value.order_time < watermark - 5 min: the left side's wait under the join's time bound (job "
            "order_payments))") in bound.message
    assert "join_eviction_grace_seconds" not in bound.recommendation and bound.details["join_grace_seconds"] == 300
    fallback = eviction_finding(op(**side, join_grace_seconds=3600, join_grace_source=CONFIGURED_GRACE), wm, T)
    assert "watermark - 1 h: join_eviction_grace_seconds from the audit config" in fallback.message
    assert "audit it by job name" in fallback.recommendation


def test_unbounded_dedup_only_for_dedup_without_event_time_keys():
    finding = unbounded_dedup_finding(op(operator_name="dedupe", kind="dedup", event_time_column=None,
                                         key_columns=["event_id"], rows_total=10000))
    assert finding.severity == "error" and "(event_id)" in finding.message
    assert "dropDuplicatesWithinWatermark" in finding.recommendation
    assert unbounded_dedup_finding(op(kind="dedup", event_time_column="key.event_time")) is None
    assert unbounded_dedup_finding(op(kind="dedup_within_watermark", event_time_column=None)) is None


def test_no_watermark():
    stateful = op(watermarked=False, event_time_column=None, rows_total=40)
    finding = no_watermark_finding(stateful, None, 2)
    assert finding.severity == "error" and "batch 2" in finding.message and "withWatermark" in finding.recommendation
    assert no_watermark_finding(stateful, NOW, 2) is None
    assert no_watermark_finding(op(watermarked=True, rows_total=40), None, 0) is None  # first batch
    custom = op(kind="custom", operator_name="applyInPandasWithState", watermarked=False, rows_total=40)
    assert no_watermark_finding(custom, None, 0) is None
    assert no_watermark_finding(custom, None, 3).severity == "warn"
    assert no_watermark_finding(op(watermarked=False, rows_total=0), None, 3) is None
    # what the message says of the schema is what the audit read: its key columns, or none read at all
    assert "no event-time column in the state schema" in no_watermark_finding(
        op(watermarked=False, event_time_column=None, rows_total=40, key_columns=["user_id"]), None, 2).message
    unread = no_watermark_finding(op(operator_name="transformWithStateInPySparkExec", kind="custom", watermarked=False,
                                     event_time_column=None, rows_total=40), None, 2)
    assert "its state schema was not read" in unread.message and "no event-time column" not in unread.message


def test_join_watermark_is_judged_per_operator_not_per_store():
    stores = [op(kind="join", operator_name="symmetricHashJoin", store_name=name, rows_total=10,
                 watermarked=name.endswith("Value"), event_time_column=None)
              for name in ("left-keyToNumValues", "left-keyWithIndexToValue")]
    report = AuditReport("/cp", 0, None, stores, audited_at=NOW)
    assert [f.code for f in evaluate(report, T)] == []
    unwatermarked = [op(kind="join", operator_name="symmetricHashJoin", store_name=s.store_name, rows_total=10,
                        watermarked=False) for s in stores]
    found = evaluate(AuditReport("/cp", 3, None, unwatermarked, audited_at=NOW), T)
    assert [(f.code, f.store_name) for f in found] == [("NO_WATERMARK", None)]


def test_watermark_lag():
    assert watermark_lag_finding(NOW - dt.timedelta(minutes=30), NOW, T) is None
    finding = watermark_lag_finding(NOW - dt.timedelta(days=2), NOW, T)
    assert finding.severity == "warn" and "2 d 0 h behind now" in finding.message and finding.operator_id is None
    strict = T.with_overrides({"watermark_lag_error_seconds": 86400})
    assert watermark_lag_finding(NOW - dt.timedelta(days=2), NOW, strict).severity == "error"
    assert watermark_lag_finding(None, NOW, T) is None


def test_watermark_lag_of_a_chosen_batch_is_measured_at_the_batch_time():
    batch_time = NOW - dt.timedelta(days=3)
    watermark = batch_time - dt.timedelta(minutes=12)
    chosen = AuditReport("/cp", 7, watermark, [], audited_at=NOW, batch_timestamp=batch_time, pinned_batch=True)
    assert chosen.watermark_lag_seconds == 12 * 60
    assert [f.code for f in evaluate(chosen, T)] == []
    latest = AuditReport("/cp", 7, watermark, [], audited_at=NOW, batch_timestamp=batch_time)
    [lag] = evaluate(latest, T)
    assert lag.code == "WATERMARK_LAG" and "behind now" in lag.message
    stalled = AuditReport("/cp", 7, batch_time - dt.timedelta(days=1), [], audited_at=NOW, batch_timestamp=batch_time,
                          pinned_batch=True)
    [lag] = evaluate(stalled, T)
    assert "1 d 0 h behind batch 7's own time" in lag.message


# --- growth, cleanup, size --------------------------------------------------------------------------

def history_row(**kw):
    base = dict(operator_id=0, store_name="default", rows_total=10_000, bytes_total=1_000_000, min_batch_id=0,
                max_batch_id=100, batch_id=100, kind="deep", audited_at=NOW - dt.timedelta(hours=1))
    base.update(kw)
    return base


def test_growth_against_the_oldest_audit_in_the_window():
    history = [history_row(rows_total=10_000, batch_id=10), history_row(rows_total=14_000, batch_id=20)]
    finding = growth_finding(op(rows_total=25_000, bytes_total=1_000_000), history, T, "deep", NOW)
    assert finding.severity == "warn" and "rows grew 2.50x" in finding.message
    assert "from 10000 (batch 10" in finding.message and "to 25000" in finding.message
    assert "against the oldest deep audit in the last 24 h (growth window)" in finding.message
    assert finding.details["rows"]["baseline_batch_id"] == 10 and finding.details["window_seconds"] == 86400
    assert growth_finding(op(rows_total=40_000), history, T, "deep", NOW).severity == "error"
    assert growth_finding(op(rows_total=12_000), history, T, "deep", NOW) is None  # 1.2x
    assert growth_finding(op(rows_total=30_000), [], T, "deep", NOW) is None
    tiny = [history_row(rows_total=10, bytes_total=10)]
    assert growth_finding(op(rows_total=100, bytes_total=10), tiny, T, "deep", NOW) is None  # below growth_min_rows
    assert growth_finding(op(rows_total=100, bytes_total=10), tiny, T.with_overrides({"growth_min_rows": 1}),
                          "deep", NOW)


def test_growth_compares_like_with_like_over_the_window():
    hours = lambda h: NOW - dt.timedelta(hours=h)  # noqa: E731
    history = [  # oldest first, as load_history returns them
        history_row(kind="deep", rows_total=5_000, batch_id=1, audited_at=hours(30)),  # before the window
        history_row(kind="deep", rows_total=10_000, batch_id=5, audited_at=hours(20)),
        history_row(kind="fast", rows_total=4_000, batch_id=6, audited_at=hours(19)),
        history_row(kind="fast", rows_total=16_000, batch_id=40, audited_at=hours(2)),
        history_row(kind="deep", rows_total=15_000, batch_id=41, audited_at=hours(1)),
    ]
    deep = growth_finding(op(rows_total=25_000), history, T, "deep", NOW)
    assert "rows grew 2.50x from 10000 (batch 5, 2025-12-31T16:00:00+00:00, 20 h 0 min earlier)" in deep.message
    fast = growth_finding(op(rows_total=25_000), history, T, "fast", NOW)
    assert "rows grew 6.25x from 4000 (batch 6" in fast.message and "oldest fast audit" in fast.message
    narrow = T.with_overrides({"growth_window_seconds": 3 * 3600})
    assert "rows grew 1.67x from 15000 (batch 41" in growth_finding(op(rows_total=25_000), history, narrow, "deep",
                                                                    NOW).message
    narrow_fast = growth_finding(op(rows_total=30_000), history, narrow, "fast", NOW).message
    assert "rows grew 1.88x from 16000 (batch 40" in narrow_fast and "in the last 3 h (growth window)" in narrow_fast


def test_cleanup_stuck_needs_min_batch_frozen_across_audits():
    previous = history_row(min_batch_id=0, max_batch_id=300)
    stuck = cleanup_finding(op(min_batch_id=0, max_batch_id=400), previous, T)
    assert stuck.code == "CLEANUP_STUCK" and stuck.severity == "error" and "401 batches" in stuck.message
    assert cleanup_finding(op(min_batch_id=0, max_batch_id=160), history_row(min_batch_id=0, max_batch_id=155),
                           T).severity == "warn"
    assert cleanup_finding(op(min_batch_id=250, max_batch_id=400), previous, T) is None  # advancing
    assert cleanup_finding(op(min_batch_id=0, max_batch_id=90), history_row(max_batch_id=80), T) is None  # young
    assert cleanup_finding(op(min_batch_id=0, max_batch_id=400), None, T) is None


def test_large_state():
    assert large_state_finding(op(rows_total=1000, bytes_total=10_000), T) is None
    assert large_state_finding(op(rows_total=20_000_000, bytes_total=10_000), T).severity == "warn"
    assert large_state_finding(op(rows_total=1, bytes_total=200 * 1024 ** 3), T).severity == "error"


# --- progress: late drops --------------------------------------------------------------------------

def progress_row(batch_id, input_rows, dropped, names=("stateStoreSave", "dedupeWithinWatermark")):
    ops = [{"operator_name": n, "num_rows_total": 100 + batch_id, "num_rows_dropped_by_watermark": d}
           for n, d in zip(names, dropped)]
    return {"batch_id": batch_id, "input_rows": input_rows, "state_operators_json": json.dumps(ops)}


def test_operator_progress_maps_plan_order_to_operator_ids():
    progress = [progress_row(b, 1000, (0, 30)) for b in range(5)]
    inputs, per_op = operator_progress(progress, [(0, "stateStoreSave"), (1, "dedupeWithinWatermark")], 3)
    assert inputs == 3000
    assert per_op == {0: {"rows_total": 104, "dropped": 0}, 1: {"rows_total": 104, "dropped": 90}}


def test_late_data_drops_from_progress():
    audits = [op(), op(operator_id=1, operator_name="dedupeWithinWatermark", kind="dedup_within_watermark",
                       rows_dropped_by_watermark=90)]
    report = AuditReport("/cp", 4, NOW, audits, audited_at=NOW)
    found = [f for f in evaluate(report, T, input_rows=3000) if f.code == "LATE_DATA_DROPS"]
    assert len(found) == 1 and found[0].operator_id == 1 and "90 late rows" in found[0].message
    assert found[0].severity == "warn"  # 3%
    assert not [f for f in evaluate(report, T, input_rows=100_000) if f.code == "LATE_DATA_DROPS"]


# --- model, thresholds, profiles -----------------------------------------------------------------------

def test_contract_names_are_exact():
    report = AuditReport("/cp", 3, NOW, [op(rows_total=2, rows_per_partition={0: 2, 1: 0},
                                             top_keys=[{"key": {"t": NOW}, "value_bytes": 8}])],
                         [Finding("STATE_SKEW", "warn", 0, "default", "m", "r")], audited_at=NOW)
    doc = json.loads(json.dumps(report.to_json()))
    assert list(doc) == ["checkpoint", "batch_id", "watermark", "operators", "findings"]
    assert list(doc["operators"][0]) == ["operator_id", "operator_name", "store_name", "num_partitions",
                                         "min_batch_id", "max_batch_id", "rows_total", "rows_per_partition",
                                         "bytes_total", "bytes_per_partition", "skew_ratio", "top_keys"]
    assert list(doc["findings"][0]) == ["code", "severity", "operator_id", "store_name", "message",
                                        "recommendation"]
    assert doc["operators"][0]["rows_per_partition"] == {"0": 2, "1": 0}
    assert doc["watermark"] == "2026-01-01T12:00:00+00:00"
    assert doc["operators"][0]["top_keys"][0]["key"] == {"t": "2026-01-01T12:00:00+00:00"}
    with pytest.raises(ValueError):
        Finding("NOT_A_CODE", "warn", None, None, "m", "r")
    assert len(CODES) == 16 and CODES[-7:] == ("STATE_UNREADABLE", "KAFKA_LAG", "STATE_MEMORY",  # KAFKA_LAG: issue 21
                                               "SLOW_COMMIT", "SLOW_STATE_UPDATES", "SLOW_CLEANUP",  # issue 74
                                               "RESTART_COST")


def test_thresholds_from_config_defaults_global_and_per_job():
    config = {"audit": {"skew_ratio": 12, "jobs": {"user_activity": {"skew_ratio": 20, "growth_min_rows": 5}}}}
    assert Thresholds.from_config({}, "x").skew_ratio == 4
    assert Thresholds.from_config(config, "user_sessions").skew_ratio == 12
    job = Thresholds.from_config(config, "user_activity")
    assert (job.skew_ratio, job.growth_min_rows, job.top_keys) == (20, 5, 5)
    with pytest.raises(ConfigError, match=r"audit.jobs.user_activity.skew_ration: is not an audit threshold"):
        Thresholds.from_config({"audit": {"jobs": {"user_activity": {"skew_ration": 3}}}}, "user_activity")
    with pytest.raises(ConfigError, match="not a number"):
        Thresholds.from_config({"audit": {"skew_ratio": "high"}})
    with pytest.raises(ConfigError, match="whole number"):
        Thresholds.from_config({"audit": {"top_keys": 2.5}})


def _struct(*fields):
    return {"type": "struct", "fields": [dict(name=n, type=t, nullable=True, metadata=m) for n, t, m in fields]}


WM = {"spark.watermarkDelayMs": 600000}
WINDOW = {"type": "struct", "fields": [{"name": "start", "type": "timestamp", "nullable": True, "metadata": {}},
                                       {"name": "end", "type": "timestamp", "nullable": True, "metadata": {}}]}


def test_profiles_find_the_evicting_column():
    agg = profile("stateStoreSave", "default", _struct(("window", WINDOW, WM), ("user_id", "string", {})), None)
    assert (agg.kind, agg.event_time.column, agg.watermarked) == ("aggregation", "key.window.end", True)
    dedup = profile("dedupe", "default", _struct(("event_id", "string", {})), None)
    assert dedup.kind == "dedup" and dedup.event_time is None  # what UNBOUNDED_DEDUP looks for
    dedup_time = profile("dedupe", "default", _struct(("event_id", "string", {}), ("t", "timestamp", WM)), None)
    assert dedup_time.event_time.column == "key.t"
    within = profile("dedupeWithinWatermark", "default", _struct(("event_id", "string", {})),
                     _struct(("expiresAtMicros", "long", {})))
    assert within.kind != "dedup" and within.event_time.shape == "micros"
    join = profile("symmetricHashJoin", "left-keyWithIndexToValue", _struct(("field0", "string", {})),
                   _struct(("order_time", "timestamp", WM), ("matched", "boolean", {})))
    assert join.has_matched and join.event_time.join_grace and join.event_time.column == "value.order_time"
    custom = profile("applyInPandasWithState", "default", _struct(("user_id", "string", {})),
                     _struct(("groupState", "string", {}), ("timeoutTimestamp", "long", {})))
    assert custom.kind == "custom" and custom.event_time.shape == "millis" and not custom.watermarked


def _utf(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def test_parse_schema_file_reads_spark_framing():
    key, value = _struct(("event_id", "string", {})), _struct(("expiresAtMicros", "long", {}))
    data = (_utf("v2") + (1).to_bytes(4, "big") + _utf(json.dumps(key)) + (1).to_bytes(4, "big")
            + _utf(json.dumps(value)))
    assert parse_schema_file(data) == (key, value)
    assert parse_schema_file(b"garbage") == (None, None)


# --- STATE_MEMORY --------------------------------------------------------------------------------------------

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.parametrize("provider, spark_estimate, estimated, expected", [
    (HDFS, 300 * 2**20, None, None),               # 15% of 2 GiB: below the warn share
    (HDFS, 600 * 2**20, None, "warn"),             # 29%: Spark's own estimate, from the progress
    (HDFS, 1200 * 2**20, None, "error"),           # 59%
    (HDFS, None, 1100 * 2**20, "error"),           # no progress row: the deep audit's estimate
    (HDFS, None, None, None),                      # neither: nothing to judge (the fast audit without progress)
    (ROCKSDB, 1200 * 2**20, None, None),           # RocksDB's state lives off the heap: only the table's levels
    (ROCKSDB, None, 3 * 2**30, None),              # the deep audit's heap estimate says nothing of RocksDB's
])
def test_the_in_memory_store_is_judged_against_the_heap_the_settings_give_it(provider, spark_estimate, estimated,
                                                                               expected):
    report = AuditReport("/cp", 9, NOW, [op(rows_total=10, estimated_bytes=estimated)], audited_at=NOW,
                         provider=provider, job="user_activity")
    found = [f for f in evaluate(report, T, state_memory=spark_estimate) if f.code == "STATE_MEMORY"]
    assert [f.severity for f in found] == ([expected] if expected else [])
    if found:
        f = found[0]
        assert "audit.state_memory_heap_bytes" in f.message and "2.0 GiB" in f.message
        assert "stateops recover run user_activity --mode switch-store --to rocksdb --confirm user_activity" in \
            f.recommendation
        assert f.details["source"] == ("progress" if spark_estimate else "deep audit")
    smaller = Thresholds(state_memory_heap_bytes=2**30)  # a 1 GiB heap: the same state is more of it
    assert [f.code for f in evaluate(report, smaller, state_memory=spark_estimate)
            if f.code == "STATE_MEMORY"] == (["STATE_MEMORY"] if provider == HDFS and (spark_estimate or estimated)
                                             and (spark_estimate or estimated) >= 2**30 // 4 else [])


@pytest.mark.parametrize("provider", [HDFS, ROCKSDB])
@pytest.mark.parametrize("used, expected", [
    (2 * 2**30 - 1, None),                         # the monitoring table: < 2 GB healthy
    (2 * 2**30, "warn"),                           # 2-4 GB a warning
    (4 * 2**30 - 1, "warn"),
    (4 * 2**30, "error"),                          # > 4 GB critical
])
def test_every_store_s_memory_is_judged_at_the_monitoring_table_s_levels(provider, used, expected):
    """The heap share off (state_memory_heap_bytes 0) leaves the table's levels alone: the same for both stores,
    each with its own fix (RocksDB's memory is bounded by its settings, the in-memory store moves to RocksDB)."""
    report = AuditReport("/cp", 9, NOW, [op(rows_total=10)], audited_at=NOW, provider=provider, job="user_activity")
    t = Thresholds(state_memory_heap_bytes=0)
    found = [f for f in evaluate(report, t, state_memory=used) if f.code == "STATE_MEMORY"]
    assert [f.severity for f in found] == ([expected] if expected else [])
    if found:
        (f,) = found
        assert "audit.state_memory_bytes" in f.message and "2.0 GiB / 4.0 GiB" in f.message
        assert f.details["store"] == ("rocksdb" if provider == ROCKSDB else "memory")
        assert ("boundedMemoryUsage" in f.recommendation) == (provider == ROCKSDB)
        assert ("switch-store" in f.recommendation) == (provider == HDFS)
    raised = Thresholds(state_memory_heap_bytes=0, state_memory_bytes=8 * 2**30, state_memory_bytes_error=16 * 2**30)
    assert not [f for f in evaluate(report, raised, state_memory=used) if f.code == "STATE_MEMORY"]


def test_the_latest_batchs_memory_estimate_is_read_from_the_progress():
    progress = [{"batch_id": 4, "state_memory_bytes": 10}, {"batch_id": 7, "state_memory_bytes": 30},
                {"batch_id": 5, "state_memory_bytes": 20}]
    assert latest_state_memory(progress) == 30 and latest_state_memory([]) is None
