"""The next start's estimate (stateops.checkpoints.restart_cost) against starts Spark measured itself.

user_activity on RocksDB (its catalog's store is Spark's in-memory one) with changelog checkpointing, five bounded
runs: the first a CLI run in a JVM of its own that snapshots every version (minDeltasForSnapshot 1, the maintenance
thread that uploads them every 200 ms: its interval is the process's first query's), the others in the test's session
with no snapshot (minDeltasForSnapshot 1000), so each later start loads the first run's last snapshot and replays
every changelog after it.
The rates come from the second, third and fourth starts (the median: the first of them loads RocksDB in the test's
JVM for the first time); the estimate is made after the fourth run left more than 50 changelogs a store after its
snapshot, and the fifth start measures it. Oracle: Spark's own load time of the stores on that start
(`rocksdbLoadLatencyMs`, summed over the tasks, of the operator that reports it: the deduplication; the aggregation
opens its store twice in a batch and the second open resets its numbers), and the checkpoint's files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops import progress
from stateops.audit.fast import fast_audit
from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.listing import Tree, read_many
from stateops.checkpoints.operators import describe
from stateops.checkpoints.restart import load_references, parse
from stateops.checkpoints.restart_cost import LOAD_MS, LOADED, REPLAYED, estimate, measured_rates, store_loads
from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from tests.support.spark_confs import sql_confs

# the long tier: 56 micro-batches to leave 50 changelogs a store; the default run has the estimate's arithmetic and the
# finding's levels over a checkpoint's listing (tests/unit/test_restart_cost.py)
pytestmark = [pytest.mark.spark, pytest.mark.long]

JOB = "user_activity"
NO_SNAPSHOT = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1000"}
SNAPSHOTS = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
             "spark.sql.streaming.stateStore.maintenanceInterval": "200ms"}
STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")


def _files(layout, count: int, first: int) -> None:
    """`count` more input files, one micro-batch each, after the `first` already written (10 minutes apart)."""
    hour, minute = divmod(first * 10, 60)
    generate(layout, GeneratorConfig(events=count * 40, files=count, users=30, seed=first,
                                     start=f"2026-01-0{1 + hour // 24}T{hour % 24:02d}:{minute:02d}:00+00:00"))


def _dedup_id(checkpoint: str) -> int:
    return next(op for op in Checkpoint.open(checkpoint).operator_ids()
                if describe(Checkpoint.open(checkpoint), op).operator_name.startswith("dedupe"))


def _first_batch_of_last_run(layout) -> dict:
    rows = progress.read(layout, JOB).to_pylist()
    last = max(rows, key=lambda r: r["timestamp"])["stateops_run_id"]
    return min((r for r in rows if r["stateops_run_id"] == last), key=lambda r: r["batch_id"])


def test_the_estimate_is_within_2x_of_the_start_spark_measured(spark, layout, tmp_path):
    spec = replace(get_job(JOB), state_store="rocksdb")
    checkpoint = spec.checkpoint_path(layout)
    _files(layout, 5, 0)
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\nstate_store = "rocksdb"\n')
    env = {**os.environ, "STATEOPS_HOME": layout.home, "STATEOPS_CONFIG": str(config),
           "STATEOPS_SPARK_CONF": json.dumps(SNAPSHOTS)}
    first = subprocess.run([STATEOPS, "jobs", "run", JOB], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    with sql_confs(spark, NO_SNAPSHOT):
        written = 5
        for count in (5, 5, 40):
            _files(layout, count, written)
            written += count
            run_job(spark, spec, layout, settings=read_settings())
        tree = Tree.list(checkpoint)
        files = parse(tree, read_many)
        load_references(files, read_many)
        dedup = _dedup_id(checkpoint)
        loads = [s for s in store_loads(files) if s.operator == dedup]
        assert min(s.changelogs for s in loads) >= 50 and all(s.snapshot and s.snapshot_bytes for s in loads), loads
        starts = progress.start_rows(layout, [JOB])[JOB]
        assert len(starts) == 3  # the first batches of the runs after the first (which loaded nothing)
        rates = measured_rates(progress.operators(r) for r in starts)
        assert rates.restarts == 3 and rates.replay_ms_per_file > 0
        predicted = estimate(loads, rates, cores=None, batch=files.latest)

        _files(layout, 1, written)
        run_job(spark, spec, layout, settings=read_settings())
    first = _first_batch_of_last_run(layout)
    assert first["batch_id"] == files.latest + 1 and first["state_loads"] == len(loads)
    (measured,) = [op["custom_metrics"] for op in progress.operators(first) if op["custom_metrics"].get(LOADED)]
    assert measured[REPLAYED] == sum(s.changelogs for s in loads)  # the files say what Spark replayed
    ratio = predicted.task_ms / measured[LOAD_MS]
    assert 0.5 <= ratio <= 2.0, (predicted.to_dict(), measured)

    after = progress.next_start(checkpoint, layout, JOB).to_dict()  # what the audits and jobs status judge
    assert after["changelogs"] >= 100 and "measured by Spark on 4" in after["rates"]["source"]
    report = fast_audit(checkpoint, layout=layout, job=JOB)
    assert not [f for f in report.findings if f.code == "RESTART_COST"]  # seconds, far below a minute
    tight = Thresholds(restart_budget_seconds=0.001, restart_budget_seconds_error=3600)
    (found,) = [f for f in fast_audit(checkpoint, layout=layout, job=JOB, thresholds=tight).findings
                if f.code == "RESTART_COST"]
    assert found.severity == "warn" and "minDeltasForSnapshot = 1" in found.recommendation
    status = CliRunner().invoke(_main(), ["--home", layout.home, "jobs", "status", JOB, "--json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.output)["restart"]["batch"] == Checkpoint.open(checkpoint).latest_committed_batch()


def _main():
    from stateops.cli.main import main
    return main
