"""kill -9 of a running job process (Python driver and JVM together) at random points, then a restart:
the Delta table still equals the oracle, with no duplicate and no loss."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from stateops.checkpoint import Checkpoint
from stateops.delta import open_table
from tests import oracle
from tests.delta_rows import table_rows

pytestmark = pytest.mark.e2e

INPUT = GeneratorConfig(events=2000, files=10, users=200, late_share=0.03, duplicate_share=0.08,
                        malformed_share=0.02, orders=200, minutes_per_file=15, seed=5)
STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")


def _committed(checkpoint: str) -> int:
    try:
        return len(Checkpoint(checkpoint).committed_batches())
    except FileNotFoundError:
        return 0


def _start_and_kill(job: str, home: str, after_commits: int, seed: int) -> int:
    """Run `stateops jobs run JOB` in its own process group; SIGKILL it all mid-run. Returns commits seen."""
    env = {**os.environ, "STATEOPS_HOME": home}
    checkpoint = os.path.join(home, "checkpoints", job)
    proc = subprocess.Popen([STATEOPS, "jobs", "run", job], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while _committed(checkpoint) < after_commits:
        assert proc.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, "the job made no progress"
        time.sleep(0.05)
    time.sleep(random.Random(seed).uniform(0.0, 0.8))  # somewhere inside the next batch or commit
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    return _committed(checkpoint)


def _table_and_oracles(job: str, home, spec, restarted_at: int):
    """The table, and the oracle's two admissible outcomes: the uninterrupted run, and the same run with
    the restart's first batch admitting late rows (Spark 4.2 does that when it re-executes a batch)."""
    delay = spec.watermark_seconds * 1000
    if job == "order_payments":
        got = table_rows(home.table(job), ["order_id", "payment_id", "order_time", "payment_time"])
        orders = oracle.typed_batches(home.landing("orders"), "orders")
        payments = oracle.typed_batches(home.landing("payments"), "payments")
        outcomes = [oracle.order_payments(orders, payments, delay, restarts=r) for r in ((), {restarted_at})]
    else:
        got = table_rows(home.table(job), ["window_start", "window_end", "user_id", "events", "value_sum"])
        events = oracle.typed_batches(home.landing("events"), "events")
        outcomes = [oracle.user_activity(events, delay, restarts=r) for r in ((), {restarted_at})]
    return got, outcomes


@pytest.mark.parametrize("job,after_commits,seed", [
    ("user_activity", 1, 1),
    ("user_activity", 3, 2),
    ("user_activity", 5, 3),
    ("order_payments", 2, 4),
])
def test_kill_9_then_restart_equals_oracle(spark, layout, job, after_commits, seed):
    generate(layout, INPUT)
    seen = _start_and_kill(job, layout.home, after_commits, seed)
    assert seen < INPUT.files, "the kill must land before the run finished"
    spec = load_jobs()[job]
    run_job(spark, spec, layout)
    # Batches 0..seen-1 were committed; the restart runs batch `seen` first.
    got, outcomes = _table_and_oracles(job, layout, spec, restarted_at=seen)
    assert len(got) == len(set(got)), "no duplicate rows after the restart"
    assert set(got) in outcomes, (f"{len(set(got) - outcomes[0])} rows not in the uninterrupted oracle, "
                                  f"{len(outcomes[0] - set(got))} missing")
    malformed = sum(oracle.malformed_count(layout.landing(i.name), i.name) for i in spec.inputs)
    dead = table_rows(layout.deadletter_table(job), ["raw"]) if open_table(layout.deadletter_table(job)) else []
    assert len(dead) == malformed
