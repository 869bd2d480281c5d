"""Fast audit and the history tables on a checkpoint tree laid out as Spark writes it (no JVM).

Spark-built checkpoints are audited fast in tests/spark/test_audit_deep.py; here the tree is written by
hand (tests/support/fake_checkpoint.py) so that sizes, versions and progress rows are exact and the no-JVM promise
can be checked.
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stateops import progress as progress_table
from stateops.audit import Thresholds, fast_audit, load_findings, load_history, record
from stateops.remediation.growth import decide_growth
from stateops.remediation.policy import Policy
from stateops.remediation.signals import Trail
from stateops.checkpoints.checkpoint import NotACheckpointError
from tests.support.fake_checkpoint import ROCKSDB, FakeCheckpoint

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _utf(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def schema_file(key_fields, value_fields) -> bytes:
    def struct(fields):
        return json.dumps({"type": "struct", "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": m} for n, t, m in fields]}, separators=(",", ":"))
    return (_utf("v2") + (1).to_bytes(4, "big") + _utf(struct(key_fields)) + (1).to_bytes(4, "big")
            + _utf(struct(value_fields)))


def _checkpoint(root: Path) -> FakeCheckpoint:
    """Query q-1 on RocksDB with 4 shuffle partitions, Hadoop checksums next to every file (as Spark writes them)."""
    return FakeCheckpoint(root, "q-1", provider=ROCKSDB, partitions=4, crc=True)


def _commit(cp: FakeCheckpoint, batch: int, watermark: dt.datetime | None) -> None:
    """offsets/<batch> with the watermark in force (RocksDB, 4 partitions: the checkpoint's conf), commits/<batch>."""
    cp.batch(batch, watermark_ms=int(watermark.timestamp() * 1000) if watermark else 0,
             timestamp_ms=int(T0.timestamp() * 1000))


def _changelog(cp: FakeCheckpoint, op: int, partition: int, version: int, size: int, store: str = "default") -> None:
    cp.state(op, partition, version, "changelog", size=size, store=store)  # its .crc is written too, and ignored


DEDUP_SCHEMA = schema_file([("event_id", "string", {})], [("__dummy__", "string", {})])


def _dedup_tree(tmp_path) -> FakeCheckpoint:
    tree = _checkpoint(tmp_path / "cp")
    tree.operator(0, "dedupe", schema=DEDUP_SCHEMA)
    for batch in range(3):
        _commit(tree, batch, T0 + dt.timedelta(minutes=10 * batch) if batch else None)
        for p in range(4):
            _changelog(tree, 0, p, batch + 1, 5000 if p == 0 else 200)
    return tree


def progress_rows(query_id="q-1", batches=3, dropped=40):
    ops = lambda b: json.dumps([{"operator_name": "dedupe", "num_rows_total": 1000 * (b + 1),
                                 "num_rows_dropped_by_watermark": dropped}])
    return [{"job": "j", "query_id": query_id, "batch_id": b, "input_rows": 1000, "timestamp": T0,
             "state_operators_json": ops(b)} for b in range(batches)]


def test_inventory_bytes_versions_schema_and_progress(tmp_path):
    dedup_tree = _dedup_tree(tmp_path)
    t = Thresholds().with_overrides({"skew_min_bytes": 1000})
    report = fast_audit(str(dedup_tree.root), thresholds=t, progress=progress_rows(), now=T0)
    assert report.kind == "fast" and report.batch_id == 2 and report.watermark == T0 + dt.timedelta(minutes=20)
    assert report.query_id == "q-1"
    [op] = report.operators
    assert (op.operator_name, op.store_name, op.num_partitions, op.kind) == ("dedupe", "default", 4, "dedup")
    assert op.bytes_per_partition == {0: 15000, 1: 600, 2: 600, 3: 600} and op.bytes_total == 16800
    assert (op.min_batch_id, op.max_batch_id) == (0, 2)
    assert op.rows_total == 3000 and op.rows_per_partition == {} and op.skew_basis == "bytes"
    assert op.skew_ratio == 3.571 and op.rows_dropped_by_watermark == 120  # max/mean bytes: 15000 / 4200
    codes = {f.code: f for f in report.findings}
    assert codes["UNBOUNDED_DEDUP"].severity == "error" and "(event_id)" in codes["UNBOUNDED_DEDUP"].message
    assert codes["STATE_SKEW"].severity == "error" and "partition 0 holds 89% of the bytes" in codes["STATE_SKEW"].message
    assert codes["STATE_SKEW"].details["cause"] == "unknown"  # no keys per partition without the state reader
    assert codes["LATE_DATA_DROPS"].severity == "warn" and "120 late rows" in codes["LATE_DATA_DROPS"].message
    assert "WATERMARK_LAG" not in codes  # now == T0, watermark 20 min ahead
    doc = report.to_json()
    assert doc["operators"][0]["bytes_per_partition"] == {"0": 15000, "1": 600, "2": 600, "3": 600}
    assert doc["operators"][0]["rows_total"] == 3000


def test_history_gives_growth_and_cleanup_stuck(layout, tmp_path):
    dedup_tree = _dedup_tree(tmp_path)
    t = Thresholds().with_overrides({"growth_min_bytes": 1, "min_batches_to_retain": 1, "cleanup_slack_batches": 0,
                                     "skew_ratio": 100})
    first = fast_audit(str(dedup_tree.root), thresholds=t, layout=layout, now=T0)
    audit_id = record(layout, first)
    assert [f.code for f in first.findings] == ["UNBOUNDED_DEDUP"]
    for batch in (3, 4, 5):  # state keeps growing, old versions are never cleaned
        _commit(dedup_tree, batch, T0 + dt.timedelta(minutes=10 * batch))
        for p in range(4):
            _changelog(dedup_tree, 0, p, batch + 1, 9000 if p == 0 else 400)
    history = load_history(layout, str(dedup_tree.root) + "/")  # same checkpoint, other spelling
    assert [(h["audit_id"], h["bytes_total"], h["kind"]) for h in history] == [(audit_id, 16800, "fast")]
    second = fast_audit(str(dedup_tree.root), thresholds=t, layout=layout, now=T0 + dt.timedelta(hours=1))
    codes = {f.code: f for f in second.findings}
    assert codes["STATE_GROWTH"].severity == "warn"  # 16800 -> 47400 bytes: 2.82x (error from 3x)
    assert "bytes grew 2.82x from 16.4 KiB" in codes["STATE_GROWTH"].message
    assert codes["CLEANUP_STUCK"].severity == "error" and "minBatchId is still 0" in codes["CLEANUP_STUCK"].message
    record(layout, second)
    recorded = {f["code"]: f for f in load_findings(layout, str(dedup_tree.root))}
    assert set(recorded) >= {"STATE_GROWTH", "CLEANUP_STUCK", "UNBOUNDED_DEDUP"}
    growth = json.loads(recorded["STATE_GROWTH"]["details_json"])  # the numbers, for policies
    assert growth["kind"] == "fast" and growth["bytes"]["from"] == 16800 and growth["window_seconds"] == 86400
    assert recorded["UNBOUNDED_DEDUP"]["details_json"] is None
    assert load_history(layout, str(dedup_tree.root), query_id="another-query") == []


def test_progress_is_read_from_the_ops_table_by_query_id(layout, tmp_path):
    dedup_tree = _dedup_tree(tmp_path)
    progress_table.append(layout, [dict(progress_table.progress_row(
        {"id": qid, "batchId": b, "numInputRows": 500, "timestamp": "2026-01-01T00:00:00Z",
         "stateOperators": [{"operatorName": "dedupe", "numRowsTotal": 777 + b, "numRowsDroppedByWatermark": 0}]},
        "j", "run")) for qid in ("q-1", "other") for b in range(2)])
    [op] = fast_audit(str(dedup_tree.root), layout=layout).operators
    assert op.rows_total == 778


def test_untracked_rows_are_unknown_not_zero(layout, tmp_path):
    """RocksDB's trackTotalNumberOfRows off: Spark reports numRowsTotal 0 whatever the state holds. The progress
    row records the count as unknown, the fast audit then sizes the state by its files (bytes) instead of
    reporting an empty state, and the asset metadata leaves the row entries out."""
    from orchestration.audits.assets import audit_metadata
    from orchestration.streaming_jobs.assets import progress_metadata

    dedup_tree = _dedup_tree(tmp_path)
    events = [{"id": "q-1", "batchId": b, "numInputRows": 500, "timestamp": "2026-01-01T00:00:00Z",
               "stateOperators": [{"operatorName": "dedupe", "numRowsTotal": 0, "numRowsUpdated": 400,
                                   "numRowsDroppedByWatermark": 0}]} for b in range(2)]
    counted = progress_table.progress_row(json.loads(json.dumps(events[1])), "j", "run")
    assert counted["state_rows_total"] == 0  # as Spark reports it: indistinguishable from an empty state
    for event in events:
        progress_table.rows_untracked(event)
    rows = [progress_table.progress_row(e, "j", "run") for e in events]
    assert [r["state_rows_total"] for r in rows] == [None, None]
    assert json.loads(rows[1]["state_operators_json"])[0]["num_rows_total"] is None
    assert json.loads(rows[1]["state_operators_json"])[0]["num_rows_updated"] == 400  # the rest is kept
    progress_table.append(layout, rows)
    report = fast_audit(str(dedup_tree.root), layout=layout,
                        thresholds=Thresholds().with_overrides({"large_state_bytes": 10_000}))
    [op] = report.operators
    assert op.rows_total is None and op.bytes_total == 16800
    large = {f.code: f for f in report.findings}["LARGE_STATE"]
    assert "store default): ? rows, 16.4 KiB on disk" in large.message  # counted: "0 rows"
    meta = progress_metadata(events[1])
    assert "state_rows" not in meta and not any(k.startswith("state_rows/") for k in meta)
    assert meta["input_rows"] == 500
    audit_meta = audit_metadata(report, record(layout, report), layout, "j")
    assert audit_meta["state_rows_total"] is None and audit_meta["state_bytes_total"] == 16800
    assert not any(k.startswith("rows/") for k in audit_meta)


def test_join_stores_have_bytes_but_no_row_split(tmp_path):
    tree = _checkpoint(tmp_path / "join")
    stores = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")
    tree.operator(0, "symmetricHashJoin", stores=stores, partitions=2)
    _commit(tree, 0, None)
    for store in stores:
        for p in range(2):
            _changelog(tree, 0, p, 1, 100, store=store)
    ops = fast_audit(str(tree.root), progress=[{"batch_id": 0, "input_rows": 10, "state_operators_json": json.dumps(
        [{"operator_name": "symmetricHashJoin", "num_rows_total": 10}])}]).operators
    assert [o.store_name for o in ops] == list(stores)
    assert all(o.rows_total is None and o.bytes_total == 200 and o.kind == "join" for o in ops)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(NotACheckpointError, match="does not exist"):
        fast_audit(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpointError, match="not a Structured Streaming checkpoint"):
        fast_audit(str(tmp_path / "empty"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotACheckpointError, match="is a file"):
        fast_audit(str(tmp_path / "file"))
    _checkpoint(tmp_path / "fresh")
    with pytest.raises(NotACheckpointError, match="no committed batch"):
        fast_audit(str(tmp_path / "fresh"))


def test_fast_audit_never_loads_spark(tmp_path):
    dedup_tree = _dedup_tree(tmp_path)
    code = ("import sys; from stateops.audit import fast_audit; r = fast_audit(sys.argv[1]); "
            "assert r.operators and 'pyspark' not in sys.modules and 'dagster' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code, str(dedup_tree.root)], check=True, timeout=60)


# --- SLOW_COMMIT, SLOW_STATE_UPDATES, SLOW_CLEANUP --------------------------------------------------------------
# Spark's own times per stateful operator (commitTimeMs, allUpdatesTimeMs, allRemovalsTimeMs), kept by the progress
# table from a progress event as Spark writes it, at the design's monitoring table's levels: silent below the
# warning, a warning, an error; the median over the recent batches, so one slow batch pages no one; the growth
# sensor's decision an alert with the finding's fix.

def _event(batch: int, commit_ms: int, updates_ms: int, removals_ms: int, updated: int) -> dict:
    """A progress event's fields as Spark's StreamingQueryProgress JSON holds them."""
    return {"id": "q-1", "batchId": batch, "numInputRows": 1000, "timestamp": "2026-01-01T00:00:00Z",
            "stateOperators": [{"operatorName": "dedupe", "numRowsTotal": 3000, "numRowsUpdated": updated,
                                "numRowsRemoved": 7, "commitTimeMs": commit_ms, "allUpdatesTimeMs": updates_ms,
                                "allRemovalsTimeMs": removals_ms, "numRowsDroppedByWatermark": 0}]}


def _slow_codes(tmp_path, *batches, thresholds: Thresholds | None = None) -> dict:
    rows = [progress_table.progress_row(_event(b, *times), "j", "run") for b, times in enumerate(batches)]
    report = fast_audit(str(_dedup_tree(tmp_path).root), thresholds=thresholds or Thresholds(), progress=rows,
                        now=T0)
    return {f.code: f for f in report.findings if f.code.startswith("SLOW_")}


HEALTHY = (2_000, 300, 1_000, 1_000)  # commit 2 s, updates 0.3 ms per row, cleanup 1 s


@pytest.mark.parametrize("slow, code, warn, error", [
    (0, "SLOW_COMMIT", 12_000, 31_000),         # checkpoint duration: 10-30 s a warning, > 30 s critical
    (1, "SLOW_STATE_UPDATES", 15_000, 60_000),  # per updated row of 1,000: 15 ms, 60 ms (10-50 ms a warning)
    (2, "SLOW_CLEANUP", 6_000, 16_000),         # cleanup: 5-15 s a warning, > 15 s critical
])
def test_each_finding_is_silent_below_its_warning_then_warns_then_errs(tmp_path, slow, code, warn, error):
    assert _slow_codes(tmp_path / "healthy", HEALTHY, HEALTHY, HEALTHY) == {}
    for value, severity in ((warn, "warn"), (error, "error")):
        times = tuple(value if i == slow else v for i, v in enumerate(HEALTHY))
        found = _slow_codes(tmp_path / severity, times, times, times)
        assert set(found) == {code} and found[code].severity == severity, found
        assert found[code].operator_id == 0 and "median of its last 3 batches" in found[code].message
        assert found[code].recommendation


def test_the_updates_of_a_whole_batch_count_at_the_commits_levels(tmp_path):
    """Many cheap updates still hold the batch: 12 s of updates over 100,000 rows (0.12 ms each) is a warning."""
    times = (2_000, 12_000, 1_000, 100_000)
    found = _slow_codes(tmp_path, times, times, times)
    assert set(found) == {"SLOW_STATE_UPDATES"} and found["SLOW_STATE_UPDATES"].severity == "warn"
    assert found["SLOW_STATE_UPDATES"].details["ms_per_updated_row"] == 0.12


def test_one_slow_batch_among_healthy_ones_pages_no_one_and_the_levels_are_settings(tmp_path):
    slow = (40_000, 300, 1_000, 1_000)
    assert _slow_codes(tmp_path / "one", HEALTHY, slow, HEALTHY, HEALTHY, HEALTHY) == {}
    assert set(_slow_codes(tmp_path / "most", slow, slow, HEALTHY, slow, slow)) == {"SLOW_COMMIT"}
    strict = Thresholds().with_overrides({"slow_commit_ms": 1_000, "slow_commit_ms_error": 0})
    found = _slow_codes(tmp_path / "strict", HEALTHY, HEALTHY, HEALTHY, thresholds=strict)
    assert found["SLOW_COMMIT"].severity == "warn", "an error threshold of 0 leaves the warning"


def test_rows_before_spark_times_were_kept_find_nothing(tmp_path):
    rows = [{"batch_id": b, "input_rows": 10, "state_operators_json": '[{"operator_name": "dedupe", '
             '"num_rows_total": 5}]'} for b in range(3)]
    report = fast_audit(str(_dedup_tree(tmp_path).root), progress=rows, now=T0)
    assert not [f for f in report.findings if f.code.startswith("SLOW_")]


def test_the_growth_sensor_alerts_with_the_fix_an_error_first():
    trail = Trail()
    trail.audits.append({"audit_id": "a1", "audited_at": T0, "batch_id": 3, "watermark": T0, "rows_total": 10,
                         "partitions": {(0, "default"): 4}})
    trail.findings["a1"] = [{"audit_id": "a1", "operator_id": 0, "store_name": None, "code": code,
                             "severity": severity, "message": f"{code} message", "recommendation": f"{code} fix",
                             "details_json": None}
                            for code, severity in (("SLOW_CLEANUP", "warn"), ("SLOW_COMMIT", "error"))]
    decision = decide_growth("j", trail, Policy(), Thresholds(), [], watermark_delay="10 minutes",
                             watermark_min="5 minutes")
    assert decision.action == "alert" and decision.rule == "growth.slow_commit -> alert (its fix)"
    assert "SLOW_COMMIT error" in decision.reason and "Fix: SLOW_COMMIT fix" in decision.reason
