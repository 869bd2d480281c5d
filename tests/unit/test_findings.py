"""Findings, thresholds and store profiles: pure logic, no JVM."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from stateops.audit.findings import (cleanup_finding, evaluate, eviction_finding, growth_finding,
                                     large_state_finding, no_watermark_finding, operator_progress,
                                     skew_finding, unbounded_dedup_finding, watermark_lag_finding)
from stateops.audit.model import CODES, AuditReport, Finding, OperatorAudit, skew_ratio
from stateops.audit.profile import parse_schema_file, profile
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

def test_skew_ratio_is_max_over_median_with_empty_partitions_counted():
    assert skew_ratio(rows(10, 10, 10, 10)) == 1.0
    assert skew_ratio(rows(900, 30, 30, 40)) == pytest.approx(900 / 35, abs=1e-3)
    assert skew_ratio(rows(5, 0, 0, 0)) == 5.0  # median floored at 1
    assert skew_ratio(rows(0, 0)) is None
    assert skew_ratio({}) is None


def test_balanced_store_has_no_skew_finding():
    assert skew_finding(op(rows_total=4000, rows_per_partition=rows(1000, 1100, 950, 950)), T) is None


def test_hot_partition_gives_skew_with_the_numbers():
    audit = op(rows_total=2000, rows_per_partition=rows(1820, 60, 60, 60))
    finding = skew_finding(audit, T)
    assert finding.code == "STATE_SKEW" and finding.severity == "warn"
    assert "partition 0 holds 1820 of 2000 rows" in finding.message and "30.3" in finding.message
    assert "salt" in finding.recommendation
    assert skew_finding(op(rows_total=6000, rows_per_partition=rows(5940, 20, 20, 20)), T).severity == "error"


def test_skew_ignores_small_stores_and_respects_configured_ratio():
    assert skew_finding(op(rows_total=100, rows_per_partition=rows(97, 1, 1, 1)), T) is None
    audit = op(rows_total=2000, rows_per_partition=rows(1820, 60, 60, 60))
    assert skew_finding(audit, T.with_overrides({"skew_ratio": 40, "skew_ratio_error": 0})) is None


def test_skew_by_bytes_for_fast_audits():
    mib = 1024 * 1024
    audit = op(rows_total=None, bytes_total=130 * mib, bytes_per_partition=rows(100 * mib, 10 * mib, 10 * mib, 10 * mib))
    finding = skew_finding(audit, T)
    assert finding and "MiB" in finding.message and "bytes per partition = 10" in finding.message


# --- eviction, dedup, watermark ----------------------------------------------------------------------

def test_eviction_stalled_share_levels():
    wm = NOW - dt.timedelta(hours=1)
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=0), wm, T) is None
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=5), wm, T) is None  # 0.5% < 1%
    warn = eviction_finding(op(rows_total=1000, rows_behind_watermark=50), wm, T)
    assert warn.severity == "warn" and "50 of 1000 rows (5.0%)" in warn.message
    assert "complete mode" in warn.recommendation
    join = eviction_finding(op(kind="join", store_name="left-keyWithIndexToValue", rows_total=100,
                               rows_behind_watermark=60, event_time_column="value.order_time"), wm, T)
    assert join.severity == "error" and "grace" in join.message and "time-range" in join.recommendation
    assert eviction_finding(op(rows_total=1000, rows_behind_watermark=500), None, T) is None


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
    assert finding.severity == "warn" and "2 d 0 h behind" in finding.message and finding.operator_id is None
    strict = T.with_overrides({"watermark_lag_error_seconds": 86400})
    assert watermark_lag_finding(NOW - dt.timedelta(days=2), NOW, strict).severity == "error"
    assert watermark_lag_finding(None, NOW, T) is None


# --- growth, cleanup, size --------------------------------------------------------------------------

def history_row(**kw):
    base = dict(operator_id=0, store_name="default", rows_total=10_000, bytes_total=1_000_000, min_batch_id=0,
                max_batch_id=100, batch_id=100, kind="deep", audited_at=NOW - dt.timedelta(hours=1))
    base.update(kw)
    return base


def test_growth_against_the_oldest_audit_in_the_lookback():
    history = [history_row(rows_total=10_000, batch_id=10), history_row(rows_total=14_000, batch_id=20)]
    finding = growth_finding(op(rows_total=25_000, bytes_total=1_000_000), history, T)
    assert finding.severity == "warn" and "rows grew 2.50x" in finding.message
    assert "from 10000 (batch 10" in finding.message and "to 25000" in finding.message
    assert growth_finding(op(rows_total=40_000), history, T).severity == "error"
    assert growth_finding(op(rows_total=12_000), history, T) is None  # 1.2x
    assert growth_finding(op(rows_total=30_000), [], T) is None
    tiny = [history_row(rows_total=10, bytes_total=10)]
    assert growth_finding(op(rows_total=100, bytes_total=10), tiny, T) is None  # below growth_min_rows
    assert growth_finding(op(rows_total=100, bytes_total=10), tiny, T.with_overrides({"growth_min_rows": 1}))


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
    assert len(CODES) == 9


def test_thresholds_from_config_defaults_global_and_per_job():
    config = {"audit": {"skew_ratio": 12, "jobs": {"user_activity": {"skew_ratio": 20, "growth_min_rows": 5}}}}
    assert Thresholds.from_config({}, "x").skew_ratio == 10
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
    assert dedup.unbounded_dedup and dedup.event_time is None
    dedup_time = profile("dedupe", "default", _struct(("event_id", "string", {}), ("t", "timestamp", WM)), None)
    assert not dedup_time.unbounded_dedup and dedup_time.event_time.column == "key.t"
    within = profile("dedupeWithinWatermark", "default", _struct(("event_id", "string", {})),
                     _struct(("expiresAtMicros", "long", {})))
    assert within.event_time.shape == "micros" and not within.unbounded_dedup
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
