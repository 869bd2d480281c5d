"""Bad input never silences a job (poison timestamps per job: tests/spark/test_jobs_oracle.py).

The future-time rule decides a row at the exact boundary once, alike for the stateful and the dead-letter
query. A progress table that cannot be written is counted and logged, and the job's output stays right.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta, timezone

import pytest

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from stateops.layout import Layout
from tests import oracle
from tests.delta_rows import table_rows

pytestmark = pytest.mark.spark

SMALL = GeneratorConfig(events=600, files=3, users=40, malformed_share=0.02)


def test_the_boundary_row_lands_in_exactly_one_query(spark, tmp_path):
    """Arrival = the file's modification time, the same for both queries: a row exactly at the tolerance
    is kept by the stateful query, one millisecond beyond it is a dead letter, and nothing is lost."""
    layout = Layout(str(tmp_path / "stateops"))
    landing = tmp_path / "stateops" / "landing" / "events"
    landing.mkdir(parents=True)
    arrival = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
    at_limit, beyond = arrival + timedelta(days=1), arrival + timedelta(days=1, milliseconds=1)
    rows = [("e-normal", arrival - timedelta(hours=1)), ("e-limit", at_limit), ("e-beyond", beyond)]
    path = landing / "part-0000.json"
    path.write_text("".join(json.dumps({"event_id": i, "user_id": i, "event_time": t.isoformat(), "action": "view",
                                        "value": 1.0}) + "\n" for i, t in rows))
    nanos = round(arrival.timestamp() * 1000) * 1_000_000
    os.utime(path, ns=(nanos, nanos))
    run_job(spark, load_jobs()["user_activity"], layout)
    kept = {user for _, _, user in table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id"])}
    dead = table_rows(layout.deadletter_table("user_activity"), ["raw", "error"])
    assert kept == {"e-normal", "e-limit"}
    assert [json.loads(raw)["event_id"] for raw, _ in dead] == ["e-beyond"]
    assert "2026-03-02 12:00:00.124" in dead[0][1] and "2026-03-01 12:00:00.123" in dead[0][1]


def test_a_failed_progress_append_is_counted_and_the_output_stays_right(spark, tmp_path, caplog):
    layout = Layout(str(tmp_path / "stateops"))
    generate(layout, SMALL)
    progress = tmp_path / "stateops" / "ops" / "tables" / "progress"
    progress.parent.mkdir(parents=True)
    progress.write_text("a file where the progress table should be\n")
    spec = load_jobs()["user_activity"]
    with caplog.at_level(logging.WARNING, logger="jobs.runner"):
        result = run_job(spark, spec, layout)
    # Both queries report at least one progress event per file, and not one could be recorded.
    assert result.progress_write_failures >= 2 * SMALL.files
    warnings = [r for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(warnings) == result.progress_write_failures
    assert str(progress) in warnings[0].getMessage()
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    events = oracle.typed_batches(layout.landing("events"), "events")
    assert set(got) == oracle.user_activity(events, spec.watermark_seconds * 1000)
    assert result.batches == SMALL.files


def test_each_query_runs_in_its_scheduler_pool(spark, tmp_path, monkeypatch):
    """Both queries still run and write (nothing lost), each in its fair-scheduler pool: Spark's jobs of the
    stateful query's batches in `stateful` (offered a free core first), the dead-letter query's in
    `deadletter`; the caller's thread keeps its own pool."""
    from jobs import runner
    from jobs.sink import DeltaSink

    context = spark.sparkContext
    assert context._jsc.sc().getSchedulingMode().toString() == "FAIR"
    assert context._jsc.sc().getPoolForName("stateful").get().minShare() >= 1000
    assert context._jsc.sc().getPoolForName("deadletter").get().minShare() == 0
    pools: dict[str, set] = {}
    write = DeltaSink.__call__

    def recording(self, df, batch_id):  # the pool Spark schedules this batch's jobs in, then the real write
        pools.setdefault(os.path.basename(self.table_uri), set()).add(context.getLocalProperty("spark.scheduler.pool"))
        write(self, df, batch_id)

    monkeypatch.setattr(runner.DeltaSink, "__call__", recording)
    layout = Layout(str(tmp_path / "stateops"))
    generate(layout, SMALL)
    result = run_job(spark, load_jobs()["user_activity"], layout)
    assert pools == {"user_activity": {"stateful"}, "user_activity_deadletter": {"deadletter"}}
    assert result.output_rows > 0 and result.deadletter_rows > 0
    assert context.getLocalProperty("spark.scheduler.pool") is None
