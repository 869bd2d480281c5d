"""Sensor tick benchmark: one tick of each StateOps sensor over a long history, against what a tick that
opened a Spark session would pay.

  tick:   the sensor evaluated with Dagster's sensor context on a real (temporary) instance, over a home with
          the job's real checkpoint (user_activity, run once with Spark) and ops tables holding `--audit-rows`
          audit rows (findings alongside) and `--progress-rows` progress rows, appended in `--commits`
          commits each (Delta logs with many commits, as months of audits and batches leave them)
  spark:  a fresh process that builds the project's Spark session (stateops.jobs.runtime.session.get_session) and runs one
          trivial query: the floor of any tick that would open a session (the JVM start)

Ticks: one discarded warm-up, then `--ticks` per sensor; the median is reported. Spark: `--spark-runs`
fresh processes, median. Ratio = spark / tick. Ticks are measured twice: on the tables as appended (one
small file per commit) and after the daily `retention` run compacted and checkpointed the ops tables (its
real plan and apply, the policy of bench/bench_retention.py), which is how the tables look in steady state.

  .venv/bin/python -m bench.bench_sensors [--quick]
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Sequence

import pyarrow as pa

from stateops.jobs.definition.environment import Environment, get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.session import get_session

from bench.common import Report, machine, sensor_ticks, workdir
from stateops import progress
from stateops.audit import deep_audit
from stateops.audit.history import AUDITS, AUDITS_SCHEMA, FINDINGS, FINDINGS_SCHEMA, audit_rows, finding_rows
from stateops.delta import append_rows
from stateops.layout import Layout

SENSORS = ("state_skew_sensor", "state_growth_sensor", "query_health_sensor")
SPARK_PROBE = ("from stateops.jobs.definition.spark_settings import SparkSettings; "
               "from stateops.jobs.runtime.session import get_session; get_session(SparkSettings.from_env()).range(1).count()")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 audit rows, 10,000 progress rows, 3 ticks")
    parser.add_argument("--audit-rows", type=int, default=10_000)
    parser.add_argument("--progress-rows", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=500, help="commits per ops table (default 500)")
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--spark-runs", type=int, default=3)
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.audit_rows, args.progress_rows, args.commits, args.ticks, args.spark_runs = 1_000, 10_000, 50, 3, 1
    return args


def _history(spark, layout: Layout, audit_rows_wanted: int, progress_rows_wanted: int, commits: int) -> dict:
    """A real deep audit and real progress rows of user_activity, repeated back in time into long tables."""
    spec = get_job("user_activity")
    report = deep_audit(spark, spec.checkpoint_path(layout), layout=layout, job=spec.name)
    now = dt.datetime.now(dt.timezone.utc)
    real_progress = progress.read(layout, spec.name).to_pylist()
    audits, findings, batches = [], [], []
    n = 0
    while len(audits) < audit_rows_wanted:
        report.audited_at = now - dt.timedelta(hours=n + 1)
        audit_id = uuid.uuid4().hex
        audits += audit_rows(report, audit_id)
        findings += finding_rows(report, audit_id)
        n += 1
    for i in range(progress_rows_wanted):
        row = dict(real_progress[i % len(real_progress)])
        row["batch_id"] = -progress_rows_wanted + i  # older batches of the same query, before the real ones
        row["timestamp"] = now - dt.timedelta(seconds=10 * (progress_rows_wanted - i) + 3600)
        batches.append(row)
    for name, rows, schema in ((AUDITS, audits[:audit_rows_wanted], AUDITS_SCHEMA), (FINDINGS, findings, FINDINGS_SCHEMA),
                               (progress.TABLE, batches, progress.SCHEMA)):
        step = max(1, -(-len(rows) // commits))
        for start in range(0, len(rows), step):
            append_rows(layout.ops_table(name), pa.Table.from_pylist(rows[start:start + step], schema=schema))
    return {"audits": min(len(audits), audit_rows_wanted), "findings": len(findings),
            "progress": len(batches) + len(real_progress)}


def _tick_seconds(name: str, ticks: int) -> list[float]:
    timings, result = sensor_ticks(name, ticks)
    print(f"{name}: {result.skip_reason.skip_message[:160] if result.skip_reason else result.run_requests}")
    return timings


def _spark_seconds(runs: int) -> list[float]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", SPARK_PROBE], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
        timings.append(time.perf_counter() - started)
    return timings


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(argv)
    spark = spark or get_session(SparkSettings.from_env())
    report = Report("sensors")
    with workdir(args) as root:
        layout = Layout(os.path.join(root, "home"))
        os.environ["STATEOPS_HOME"] = layout.home
        os.environ.pop("STATEOPS_CONFIG", None)
        generate(layout, GeneratorConfig(events=2000, files=4, users=200, seed=42))
        from stateops.jobs.runtime.runner import run_job

        run_job(spark, get_job("user_activity"), layout, settings=read_settings())
        counts = _history(spark, layout, args.audit_rows, args.progress_rows, args.commits)
        print(f"history: {counts} in {args.commits} commits per table; {machine()}")
        spark_s = statistics.median(_spark_seconds(args.spark_runs))
        appended = {name: statistics.median(_tick_seconds(name, args.ticks)) for name in SENSORS}
        _compact_ops_tables(layout, root)
        compacted = {name: statistics.median(_tick_seconds(name, args.ticks)) for name in SENSORS}
        rows = [(name, f"{appended[name] * 1000:.0f} ms", f"{compacted[name] * 1000:.0f} ms", f"{spark_s:.1f} s",
                 f"{spark_s / appended[name]:.0f}x", f"{spark_s / compacted[name]:.0f}x") for name in SENSORS]
        report.table(f"Sensor tick ({counts['audits']} audit rows, {counts['progress']} progress rows, "
                     f"{args.commits} commits per table)",
                     ("sensor", "tick, as appended", "tick, after retention", "Spark session (median)",
                      "ratio, as appended", "ratio, after retention"), rows)
    return report


def _compact_ops_tables(layout: Layout, root: str) -> None:
    """The daily retention run on the ops tables (compact, checkpoint, vacuum), as the `retention` asset does."""
    from bench.bench_retention import OPS_POLICY
    from stateops.jobs.runtime.retention import retention_scope
    from stateops import retention

    config = os.path.join(root, "ops-policy.toml")
    with open(config, "w") as handle:
        handle.write(OPS_POLICY)
    scope = retention_scope(Environment.from_env(layout=layout, config_path=config))
    for _ in range(2):  # the second run vacuums what the first one's compaction replaced
        applied = retention.apply(scope, retention.make_plan(scope), actor="bench", fresh=True)
        assert applied.ok, applied.render()


if __name__ == "__main__":
    main()
