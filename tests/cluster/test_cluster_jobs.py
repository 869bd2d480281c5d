"""The jobs, the deep audit and explain-key on a real Spark standalone cluster (master + two workers on
loopback, `STATEOPS_SPARK_MASTER=spark://...`), checked against the same oracles as in local mode.

Two driver processes in all, to keep the module near two minutes on a quiet 2-core machine: a
`stateops jobs run user_activity` that a fault point kills right after the Delta commit of batch 2
(before Spark's commits/2), then one driver that runs every other command through the real CLI
(tests/support/cli_session.py): both jobs, the audit, explain-key and the crashed job's restart.
"""
from __future__ import annotations

import os

import pytest

from stateops.jobs.definition.catalog import Catalog
from stateops import progress
from tests.support.delta_rows import committed_transactions
from tests.support.outcomes import assert_equals_oracle

pytestmark = [pytest.mark.cluster, pytest.mark.long]


def _assert_table_equals_oracle(layout, job: str) -> None:
    assert_equals_oracle(layout, Catalog.load(layout, None).job(job))


def test_every_command_ran_and_both_workers_ran_executors(cluster, cluster_commands):
    assert cluster_commands["codes"][:2] + cluster_commands["codes"][3:] == [0, 0, 0, 0], cluster_commands["out"]
    assert cluster_commands["codes"][2] in (0, 1), cluster_commands["out"][2]  # audit: 1 when it has error findings
    apps = cluster.state()["completedapps"]
    assert len(apps) == 2 and all(app["name"] == "stateops" for app in apps)
    # Each application got an executor on each worker, and those executors ran tasks.
    for app in apps:
        dirs = [d for d in cluster.executor_dirs() if f"/{app['id']}/" in d]
        assert {d.split("/work/")[0] for d in dirs} == {f"{cluster.root}/worker-0", f"{cluster.root}/worker-1"}
        assert any("Finished task" in open(os.path.join(d, "stderr"), errors="replace").read() for d in dirs)


def test_user_activity_on_the_cluster_equals_the_oracle(cluster_commands):
    assert cluster_commands["out"][0]["batches"] == cluster_commands["input"].files
    _assert_table_equals_oracle(cluster_commands["plain"], "user_activity")


def test_order_payments_on_the_cluster_equals_the_oracle(cluster_commands):
    assert cluster_commands["out"][1]["output_rows"] > 0
    _assert_table_equals_oracle(cluster_commands["plain"], "order_payments")


def test_deep_audit_counts_what_spark_reported_for_the_batch(cluster_commands):
    """Oracle: the state rows Spark's own progress event reported for the audited batch."""
    report = cluster_commands["out"][2]
    rows = progress.read(cluster_commands["plain"], "user_activity").to_pylist()
    reported = [r["state_rows_total"] for r in rows
                if r["batch_id"] == report["batch_id"] and r["query_name"] == "user_activity"]
    assert len(reported) == 1 and reported[0] > 0
    assert sum(op["rows_total"] for op in report["operators"]) == reported[0]
    assert {op["operator_name"] for op in report["operators"]} == {"dedupeWithinWatermark", "stateStoreSave"}
    for op in report["operators"]:
        assert sum(op["rows_per_partition"].values()) == op["rows_total"]


def test_explain_key_on_the_cluster_checkpoint(cluster_commands):
    data = cluster_commands["out"][3]
    assert data["job"] == "order_payments" and data["key"] == cluster_commands["paid"]
    assert data["reason"] == "emitted" and data["output_rows"]


def test_fault_after_delta_commit_then_restart_skips_exactly_that_batch(cluster_commands):
    crash = cluster_commands["crash"]
    assert crash["offsets"] and not crash["commit"] and crash["delta_version"] == cluster_commands["crashed_batch"]
    result = cluster_commands["out"][4]
    assert result["batches_skipped"] == 1
    table = cluster_commands["crashed"].table("user_activity")
    after = committed_transactions(table)
    batches = [batch for _, batch, _ in after]
    assert len(batches) == len(set(batches)), "a batch was committed twice"
    assert after[:len(crash["before"])] == crash["before"] and max(batches) == cluster_commands["input"].files - 1
    _assert_table_equals_oracle(cluster_commands["crashed"], "user_activity")
