"""The progress table of a long-running job stays bounded: rows arrive through the real ProgressBuffer (a
group per commit, not a commit per batch), and each simulated day the real retention plan and apply on the
ops tables (compact, checkpoint, vacuum, log cleanup) bring the table back to a handful of files, with
every batch still there exactly once. Without the daily retention the same writes pile up (the control).
The fast audit's progress read is timed before and after compaction (printed with -s; bench/bench_retention.py
measures it at a week's size)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from stateops.jobs.definition.environment import Environment
from stateops.jobs.runtime.retention import retention_scope
from stateops import progress, retention
from stateops.audit.context import recent_progress
from stateops.layout import Layout
from stateops.progress import FlushSettings, ProgressBuffer

pytestmark = pytest.mark.unit

QUERIES = ("q-stateful", "q-deadletter")
DAYS, BATCHES_PER_DAY, GROUP = 4, 300, 40
POLICY = """[retention.ops_tables]
compact = true
compact_min_files = 2
vacuum_after = "0 hours"
log_retention = "0 seconds"
"""


def event(query: str, batch: int, at: datetime) -> dict:
    return {"name": query, "id": query, "runId": "run-1", "batchId": batch, "timestamp": at.isoformat(),
            "numInputRows": 10, "batchDuration": 50, "durationMs": {"triggerExecution": 50},
            "stateOperators": [{"operatorName": "dedupe", "numRowsTotal": batch, "numRowsUpdated": 1}],
            "sources": [{"description": "files", "startOffset": batch, "endOffset": batch + 1, "numInputRows": 10}]}


def table_files(home, name: str = "progress") -> tuple[int, int]:
    """(data files, log files) of an ops table on disk."""
    folder = home / "ops" / "tables" / name
    data = [p for p in folder.rglob("*.parquet") if "_delta_log" not in p.parts]
    return len(data), sum(1 for p in (folder / "_delta_log").iterdir() if p.is_file())


def run_days(home, with_retention: bool, config: str | None) -> list[tuple[int, int, int, float, float]]:
    """Per day: (commits, data files, log files, progress read seconds before, after retention)."""
    layout = Layout(str(home))
    start = datetime.now(timezone.utc) - timedelta(days=DAYS)
    buffer = ProgressBuffer(layout, FlushSettings(flush_seconds=3600, flush_rows=GROUP))
    out = []
    for day in range(DAYS):
        for batch in range(day * BATCHES_PER_DAY, (day + 1) * BATCHES_PER_DAY):
            for query in QUERIES:
                buffer.add(progress.progress_row(event(query, batch, start + timedelta(seconds=10 * batch)),
                                                 "long_job", "run-1"))
        buffer.flush()
        began = time.perf_counter()
        assert len(recent_progress(layout, QUERIES[0], 20)) == 20
        read_before = time.perf_counter() - began
        if with_retention:
            scope = retention_scope(Environment.from_env(layout=layout, config_path=config))
            report = retention.apply(scope, retention.make_plan(scope), actor="daily")
            assert report.ok, report.render()
        began = time.perf_counter()
        assert len(recent_progress(layout, QUERIES[0], 20)) == 20
        out.append((buffer.commits, *table_files(home), read_before, time.perf_counter() - began))
    buffer.close()
    return out


@pytest.mark.long  # the default run: retention's progress rules, rollup and horizon (test_retention)
def test_progress_table_stays_bounded_over_many_batches(tmp_path, monkeypatch):
    config = tmp_path / "retention.toml"
    config.write_text(POLICY)
    kept = tmp_path / "kept"
    kept.mkdir()
    days = run_days(kept, True, str(config))
    total = DAYS * BATCHES_PER_DAY * len(QUERIES)
    # The buffer: one commit per group of rows, not one per batch.
    assert days[-1][0] == total // GROUP
    for commits, data, log, before, after in days:
        print(f"commits {commits}, data files {data}, log files {log}, progress read {before * 1000:.1f} ms "
              f"before retention, {after * 1000:.1f} ms after")
    per_day = BATCHES_PER_DAY * len(QUERIES) // GROUP
    for day, (_, data, log, _, _) in enumerate(days):
        # The compacted file, plus the files its compaction replaced today: a run vacuums before it rewrites,
        # so readers of the previous version keep their files until the next run. Never more than a day's.
        assert data <= per_day + 2 and log <= 6, (day, data, log)
        assert data <= days[0][1] + 1, (day, data)  # not growing with the days
    rows = progress.read(Layout(str(kept))).to_pylist()
    assert sorted((r["query_id"], r["batch_id"]) for r in rows) == \
        sorted((q, b) for q in QUERIES for b in range(DAYS * BATCHES_PER_DAY))
    # The control: the same writes without retention keep every group's file and log entry.
    piled = tmp_path / "piled"
    piled.mkdir()
    control = run_days(piled, False, None)
    assert control[-1][1] == total // GROUP and control[-1][2] >= total // GROUP
