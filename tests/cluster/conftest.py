"""A real Spark standalone cluster (master + two workers, 1 core and 1 GiB each, loopback) per module, and the
commands the cluster tests check, run once on it."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.sinkstate import query_app_id
from stateops.faults import ENV
from stateops.layout import Layout
from tests.support.delta_rows import committed_transactions
from tests.support.kill_trials import STATEOPS
from tests.support.servers.spark_cluster import spark_cluster

INPUT = GeneratorConfig(events=800, files=4, users=60, late_share=0.04, late_minutes=30, duplicate_share=0.05,
                        malformed_share=0.02, orders=80, minutes_per_file=15, seed=23)
CRASHED = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with spark_cluster(str(tmp_path_factory.mktemp("spark-cluster"))) as started:
        yield started


def _cli(cluster, commands: list[list[str]]) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "tests.support.cli_session", json.dumps(commands)],
                          env=cluster.env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])["results"]


@pytest.fixture(scope="module")
def cluster_commands(cluster, tmp_path_factory):
    """Two driver processes on the cluster: `stateops jobs run user_activity` killed by a fault point right after
    the Delta commit of batch 2 (before Spark's commits/2), then one driver running every other command through
    the real CLI (tests/support/cli_session.py): both jobs, the audit, explain-key and the crashed job's restart."""
    root = tmp_path_factory.mktemp("cluster-homes")
    plain, crashed = Layout(str(root / "plain")), Layout(str(root / "crashed"))
    generated = generate(plain, INPUT)
    generate(crashed, INPUT)

    fault = f"sink.after_commit:table=user_activity,batch={CRASHED}"
    log = root / "crashed-run.log"
    with open(log, "w") as out:  # a file, not a pipe: nothing waits on the JVM's copy of the descriptors
        proc = subprocess.Popen([STATEOPS, "jobs", "run", "user_activity"], stdout=out, stderr=subprocess.STDOUT,
                                env=cluster.env(STATEOPS_HOME=crashed.home, **{ENV: fault}), start_new_session=True)
    try:
        assert proc.wait(timeout=1800) == -signal.SIGKILL, log.read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the driver's JVM, should it outlive the driver
    assert "fault sink.after_commit" in log.read_text()
    logs = crashed.checkpoint("user_activity")
    crash = {"offsets": os.path.exists(f"{logs}/offsets/{CRASHED}"),
             "commit": os.path.exists(f"{logs}/commits/{CRASHED}"),
             "delta_version": DeltaTable(crashed.table("user_activity")).transaction_version(
                 query_app_id("user_activity", logs)),
             "before": committed_transactions(crashed.table("user_activity"))}

    paid = sorted(k for k, case in generated.payment_cases.items() if case == "paid")[0]
    results = _cli(cluster, [
        ["--home", plain.home, "jobs", "run", "user_activity", "--json"],
        ["--home", plain.home, "jobs", "run", "order_payments", "--json"],
        ["--home", plain.home, "audit", "user_activity", "--json"],
        ["--home", plain.home, "explain-key", "order_payments", "--key", paid, "--json"],
        ["--home", crashed.home, "jobs", "run", "user_activity", "--json"],
    ])
    return {"input": INPUT, "crashed_batch": CRASHED, "plain": plain, "crashed": crashed, "crash": crash, "paid": paid,
            "out": [json.loads(r["output"]) if r["exit_code"] in (0, 1) else r for r in results],
            "codes": [r["exit_code"] for r in results]}
