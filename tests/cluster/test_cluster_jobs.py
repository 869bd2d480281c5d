"""The jobs, the deep audit and explain-key on a real Spark standalone cluster (master + two workers on
loopback, `STATEOPS_SPARK_MASTER=spark://...`), checked against the same oracles as in local mode.

Two driver processes in all, to keep the module near two minutes on a quiet 2-core machine: a
`stateops jobs run user_activity` that a fault point kills right after the Delta commit of batch 2
(before Spark's commits/2), then one driver that runs every other command through the real CLI
(tests/cluster/cli_session.py): both jobs, the audit, explain-key and the crashed job's restart.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from jobs.generator import GeneratorConfig, generate
from jobs.sink import query_app_id
from stateops import progress
from stateops.faults import ENV
from stateops.layout import Layout
from tests.delta_rows import committed_transactions
from tests.e2e.test_kill_restart import STATEOPS, _assert_table_equals_oracle

pytestmark = pytest.mark.cluster

INPUT = GeneratorConfig(events=800, files=4, users=60, late_share=0.04, late_minutes=30, duplicate_share=0.05,
                        malformed_share=0.02, orders=80, minutes_per_file=15, seed=23)
CRASHED = 2


def _cli(cluster, commands: list[list[str]]) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "tests.cluster.cli_session", json.dumps(commands)],
                          env=cluster.env(), capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])["results"]


@pytest.fixture(scope="module")
def ran(cluster, tmp_path_factory):
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
    return {"plain": plain, "crashed": crashed, "crash": crash, "paid": paid,
            "out": [json.loads(r["output"]) if r["exit_code"] in (0, 1) else r for r in results],
            "codes": [r["exit_code"] for r in results]}


def test_every_command_ran_and_both_workers_ran_executors(cluster, ran):
    assert ran["codes"][:2] + ran["codes"][3:] == [0, 0, 0, 0], ran["out"]
    assert ran["codes"][2] in (0, 1), ran["out"][2]  # audit: 1 when it has error findings
    apps = cluster.state()["completedapps"]
    assert len(apps) == 2 and all(app["name"] == "stateops" for app in apps)
    # Each application got an executor on each worker, and those executors ran tasks.
    for app in apps:
        dirs = [d for d in cluster.executor_dirs() if f"/{app['id']}/" in d]
        assert {d.split("/work/")[0] for d in dirs} == {f"{cluster.root}/worker-0", f"{cluster.root}/worker-1"}
        assert any("Finished task" in open(os.path.join(d, "stderr"), errors="replace").read() for d in dirs)


def test_user_activity_on_the_cluster_equals_the_oracle(ran):
    assert ran["out"][0]["batches"] == INPUT.files
    _assert_table_equals_oracle(ran["plain"], "user_activity")


def test_order_payments_on_the_cluster_equals_the_oracle(ran):
    assert ran["out"][1]["output_rows"] > 0
    _assert_table_equals_oracle(ran["plain"], "order_payments")


def test_deep_audit_counts_what_spark_reported_for_the_batch(ran):
    """Oracle: the state rows Spark's own progress event reported for the audited batch."""
    report = ran["out"][2]
    rows = progress.read(ran["plain"], "user_activity").to_pylist()
    reported = [r["state_rows_total"] for r in rows
                if r["batch_id"] == report["batch_id"] and r["query_name"] == "user_activity"]
    assert len(reported) == 1 and reported[0] > 0
    assert sum(op["rows_total"] for op in report["operators"]) == reported[0]
    assert {op["operator_name"] for op in report["operators"]} == {"dedupeWithinWatermark", "stateStoreSave"}
    for op in report["operators"]:
        assert sum(op["rows_per_partition"].values()) == op["rows_total"]


def test_explain_key_on_the_cluster_checkpoint(ran):
    data = ran["out"][3]
    assert data["job"] == "order_payments" and data["key"] == ran["paid"]
    assert data["reason"] == "emitted" and data["output_rows"]


def test_fault_after_delta_commit_then_restart_skips_exactly_that_batch(ran):
    crash = ran["crash"]
    assert crash["offsets"] and not crash["commit"] and crash["delta_version"] == CRASHED
    result = ran["out"][4]
    assert result["batches_skipped"] == 1
    table = ran["crashed"].table("user_activity")
    after = committed_transactions(table)
    batches = [batch for _, batch, _ in after]
    assert len(batches) == len(set(batches)), "a batch was committed twice"
    assert after[:len(crash["before"])] == crash["before"] and max(batches) == INPUT.files - 1
    _assert_table_equals_oracle(ran["crashed"], "user_activity")
