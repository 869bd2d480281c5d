"""What the next start loads (stateops.checkpoints.restart_cost), from a checkpoint's listing, and RESTART_COST.

Oracle: the listing written here by hand, as Spark lays out a RocksDB changelog checkpoint (stateops.checkpoints
.restart's rules: a start after batch N loads version N+1 from its latest snapshot and the deltas after it), and
the arithmetic of the rates given. The estimate against measured starts: tests/spark/test_restart_cost.py.
"""
from __future__ import annotations

import datetime as _dt
import json

import pytest

from stateops import progress
from stateops.audit.findings import evaluate
from stateops.audit.model import AuditReport
from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.listing import Entry, Tree
from stateops.checkpoints.restart import parse
from stateops.checkpoints.restart_cost import (DEFAULT_OPEN_MS_PER_STORE, DEFAULT_REPLAY_MS_PER_FILE, LOAD_MS, LOADED,
                                               REPLAY_MS, REPLAYED, Rates, estimate, measured_rates, store_loads)

NOW = _dt.datetime(2026, 12, 3, tzinfo=_dt.timezone.utc)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _checkpoint(latest: int, partitions: int, snapshot: int | None, changelog_size: int = 500):
    """A checkpoint of one RocksDB store per partition after batch `latest`: changelogs 1..latest+1, and a
    snapshot `<snapshot>.zip` naming one SST file where given."""
    files = {"metadata": Entry(50, 0.0)}
    texts = {}
    for b in range(latest + 1):
        files[f"offsets/{b}"] = files[f"commits/{b}"] = Entry(100, 0.0)
        texts[f"/cp/offsets/{b}"] = ("v1\n" + json.dumps({"batchTimestampMs": b, "conf": {
            "spark.sql.shuffle.partitions": str(partitions)}}) + "\n").encode()
    for p in range(partitions):
        for v in range(1, latest + 2):
            files[f"state/0/{p}/{v}.changelog"] = Entry(changelog_size, 0.0)
        if snapshot:
            files[f"state/0/{p}/{snapshot}.zip"] = Entry(1000, 0.0)
            files[f"state/0/{p}/SSTs/00{p}-a.sst"] = Entry(9000, 0.0)
    tree = Tree("/cp", files)
    parsed = parse(tree, lambda paths: {p: texts[p] for p in paths if p in texts})
    for store in parsed.stores:
        if snapshot:
            parsed.references[store.snapshot(snapshot)] = {f"00{store.partition}-a.sst"}
    return parsed


def test_a_start_loads_each_stores_latest_snapshot_and_replays_the_changelogs_after_it():
    loads = store_loads(_checkpoint(latest=59, partitions=2, snapshot=40))
    assert [(s.partition, s.version, s.snapshot, s.changelogs) for s in loads] == [(0, 60, 40, 20), (1, 60, 40, 20)]
    assert {s.snapshot_bytes for s in loads} == {1000 + 9000}  # the zip and the SST file it names
    assert {s.changelog_bytes for s in loads} == {20 * 500}
    fresh = store_loads(_checkpoint(latest=59, partitions=2, snapshot=None))
    assert {(s.snapshot, s.changelogs, s.snapshot_bytes) for s in fresh} == {(0, 60, 0)}  # from the empty store


def _operator(**metrics):
    return {"operator_name": "dedupe", "custom_metrics": metrics}


def test_the_rates_are_spark_s_own_numbers_of_the_job_s_earlier_starts_else_the_defaults():
    starts = [[_operator(**{LOADED: 2, REPLAYED: 30, REPLAY_MS: 600, LOAD_MS: 800}), _operator()],
              [_operator(**{LOADED: 2, REPLAYED: 10, REPLAY_MS: 200, LOAD_MS: 400})],
              [_operator(**{LOADED: 0, REPLAYED: 0})]]                       # a batch that loaded nothing
    rates = measured_rates(starts)
    assert rates.restarts == 2 and rates.replay_ms_per_file == 20 and rates.open_ms_per_store == 100
    cold = [[_operator(**{LOADED: 4, REPLAYED: 0, REPLAY_MS: 0, LOAD_MS: 3300})], *starts[:2]]  # a process's first
    assert measured_rates(cold).open_ms_per_store == 100  # the median over the starts: one cold start sets nothing
    assert "measured by Spark on 2" in rates.source
    unmeasured = measured_rates([])
    assert (unmeasured.replay_ms_per_file, unmeasured.open_ms_per_store, unmeasured.restarts) == (
        DEFAULT_REPLAY_MS_PER_FILE, DEFAULT_OPEN_MS_PER_STORE, 0) and "defaults" in unmeasured.source


def test_the_estimate_is_the_task_time_over_the_cores_and_the_interval_brings_it_within_budget():
    loads = store_loads(_checkpoint(latest=99, partitions=4, snapshot=None))
    rates = Rates(replay_ms_per_file=50.0, open_ms_per_store=100.0, snapshot_bytes_per_second=1e9, restarts=3)
    cost = estimate(loads, rates, cores=2, batch=99)
    assert cost.task_ms == 4 * (100 + 100 * 50) and cost.parallelism == 2 and cost.seconds == cost.task_ms / 2000
    assert (cost.stores, cost.changelogs, cost.most_changelogs, cost.snapshots) == (4, 400, 100, 0)
    assert estimate(loads, rates, cores=None, batch=99).parallelism == 4  # unknown cores: every partition at once
    k = cost.snapshot_interval(budget_seconds=5)
    assert 4 * (100 + k * 50) / 2000 <= 5 < 4 * (100 + (k + 1) * 50) / 2000
    text = cost.summary()
    assert "after batch 99" in text and "400 changelog file(s)" in text and "up to 100 per store" in text


@pytest.mark.parametrize("seconds, expected", [(59.0, None), (60.0, "warn"), (299.0, "warn"), (300.0, "error")])
def test_restart_cost_fires_past_its_budget_with_the_snapshot_interval_that_brings_it_back(seconds, expected):
    loads = store_loads(_checkpoint(latest=99, partitions=2, snapshot=None))
    per_file = (seconds * 1000 * 2 / 2 - DEFAULT_OPEN_MS_PER_STORE) / 100  # 2 stores on 2 cores: one store's time
    cost = estimate(loads, Rates(per_file, DEFAULT_OPEN_MS_PER_STORE, 1e9, 1), cores=2, batch=99)
    assert cost.seconds == pytest.approx(seconds, abs=0.01)
    report = AuditReport("/cp", 99, NOW, [], audited_at=NOW, provider=ROCKSDB, job="user_activity")
    found = [f for f in evaluate(report, Thresholds(), restart=cost) if f.code == "RESTART_COST"]
    assert [f.severity for f in found] == ([expected] if expected else [])
    if found:
        (f,) = found
        k = f.details["snapshot_interval"]
        assert (k < 100 if seconds > 60 else k == 100)  # at the budget exactly, 100 changelogs just fit
        assert f"spark.sql.streaming.stateStore.minDeltasForSnapshot = {k}" in f.recommendation
        assert cost.snapshot_interval(60) == k and "audit.restart_budget_seconds" in f.message
        assert f.details["changelogs"] == 200 and f.details["seconds"] == cost.seconds
    assert not [f for f in evaluate(report, Thresholds(restart_budget_seconds=0, restart_budget_seconds_error=0),
                                    restart=cost) if f.code == "RESTART_COST"]  # 0: the finding off


def test_a_progress_row_keeps_the_stores_loaded_and_the_cores():
    event = {"id": "q", "runId": "r", "name": "j", "batchId": 7, "timestamp": "2026-12-03T10:00:00.000Z",
             "durationMs": {"triggerExecution": 10}, "stateopsCores": 2,
             "stateOperators": [{"operatorName": "dedupe", "customMetrics": {LOADED: 2, REPLAYED: 4}},
                                {"operatorName": "stateStoreSave", "customMetrics": {LOADED: 0}}]}
    row = progress.progress_row(event, "j", "run")
    assert row["state_loads"] == 2 and row["cores"] == 2
    assert [op["custom_metrics"].get(LOADED) for op in progress.operators(row)] == [2, 0]
    plain = progress.progress_row({**event, "stateOperators": [{"operatorName": "x"}], "stateopsCores": None},
                                  "j", "run")
    assert plain["state_loads"] is None and plain["cores"] is None  # the in-memory store reports no loads
    assert progress.latest_cores([{"cores": 4, "timestamp": 1, "batch_id": 1}, {"cores": 2, "timestamp": 2,
                                                                                 "batch_id": 2}]) == 2
