"""Checkpoints written by PySpark 3.5 (tests/fixtures/spark35, written by `bash scripts/spark35-checkpoints` with
tests/support/spark35_writer.py), before any run on Spark 4.2: Spark 3.5 writes no operator metadata, so Spark 4.2's
`state-metadata` lists none of their operators, yet its state reader reads each store given the operator and store.
StateOps reads the operators from their store folders and schema files (stateops.checkpoints.operators.describe):
the deep and fast audits, explain-key and a retention plan work on them, and the oracle is Spark 4.2's state
reader, asked for each store by name as the fixture's writer made it (not as StateOps lists them)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from stateops import retention
from stateops.audit import deep_audit, fast_audit
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.sparkstate import reading_format
from stateops.explain import explain_key
from stateops.explain.model import ExplainTarget
from stateops.jobs.definition.environment import Environment
from stateops.jobs.runtime.retention import retention_scope
from stateops.layout import Layout
from stateops.retention.model import DELETE_FILES

from tests.support.audit_queries import nonzero, oracle_rows
from tests.support.spark35 import FIXTURES, WRITTEN

pytestmark = pytest.mark.spark

def _reader_rows(spark, checkpoint: str, operator: int, store: str) -> dict[int, int]:
    options = {"operatorId": operator} | ({} if store == "default" else {"storeName": store})
    return oracle_rows(spark, checkpoint, **options)


def test_the_fixtures_are_spark_35s_own():
    """The premise: no operator metadata in any of them, Spark 3.5's default store in three and RocksDB with changelog
    checkpointing in one, five committed batches or more."""
    for name in WRITTEN:
        checkpoint = Checkpoint.open(str(FIXTURES / name / "checkpoint"))
        assert not list((FIXTURES / name / "checkpoint" / "state").glob("*/_metadata")), name
        conf = checkpoint.batch_metadata(checkpoint.latest_committed_batch())["conf"]
        rocksdb = name == "dedup_rocksdb_changelog"
        assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(
            "RocksDBStateStoreProvider" if rocksdb else "HDFSBackedStateStoreProvider"), name
        assert len(checkpoint.committed_batches()) >= 4, name


@pytest.mark.parametrize("name", WRITTEN)
def test_the_deep_audit_of_a_spark_35_checkpoint_equals_spark_42s_state_reader(spark, spark35, name):
    checkpoint = spark35[name]
    opened = Checkpoint.open(checkpoint)
    with reading_format(spark, 1):
        assert spark.read.format("state-metadata").load(checkpoint).collect() == []  # Spark 4.2 lists none
    report = deep_audit(spark, checkpoint)
    assert {(op.operator_id, op.store_name): (op.operator_name, op.kind) for op in report.operators} == WRITTEN[name]
    assert not [f for f in report.findings if f.code == "STATE_UNREADABLE"], report.findings
    for op in report.operators:
        expected = _reader_rows(spark, checkpoint, op.operator_id, op.store_name)
        assert nonzero(op.rows_per_partition) == expected and sum(expected.values()) > 0, (name, op.store_name)
        assert op.rows_total == sum(expected.values())
        assert op.num_partitions == 2 and op.max_batch_id == opened.latest_committed_batch()
        on_disk = sum(os.path.getsize(os.path.join(where, f)) for where, _, files in
                      os.walk(opened.state_dir(op.operator_id, 0, op.store_name)) for f in files
                      if not f.startswith(".") and "_metadata" not in where)
        assert op.bytes_per_partition[0] == on_disk, (name, op.store_name)


@pytest.mark.parametrize("name", WRITTEN)
def test_the_fast_audit_names_the_same_operators_and_bytes(spark, spark35, name):
    deep = deep_audit(spark, spark35[name])
    fast = fast_audit(spark35[name])
    assert [(o.operator_id, o.store_name, o.operator_name, o.kind) for o in fast.operators] == [
        (o.operator_id, o.store_name, o.operator_name, o.kind) for o in deep.operators]
    assert [o.bytes_per_partition for o in fast.operators] == [o.bytes_per_partition for o in deep.operators]


@pytest.mark.parametrize("name, kind", [("aggregation_hdfs", "window"), ("dedup_rocksdb_changelog", "window"),
                                        ("pandas_state", "custom")])
def test_explain_key_finds_a_key_where_spark_42s_reader_holds_it(spark, spark35, name, kind):
    """explain-key names the operators and partitions where Spark 4.2's reader holds the key `u1`."""
    checkpoint = spark35[name]
    expected = set()
    for operator, store in WRITTEN[name]:
        frame = spark.read.format("statestore").option("path", checkpoint).option("operatorId", operator).load()
        for row in frame.collect():
            if "u1" in json.dumps(row.asDict(recursive=True)["key"], default=str):
                expected.add((operator, row.partition_id))
    found = explain_key(spark, ExplainTarget(name, checkpoint, kind=kind), "u1")
    assert {(r["operator_id"], r["partition_id"]) for r in found.in_state} == expected and expected
    assert found.reason and found.explanation


def test_a_retention_plan_on_a_spark_35_checkpoint_keeps_what_a_restart_reads(spark, spark35, tmp_path, monkeypatch):
    """A home whose user_activity checkpoint is one Spark 3.5 wrote (RocksDB with changelog): retention's plan names
    its operators as the files show them, deletes history past Spark's minBatchesToRetain, and after it is applied
    Spark 4.2's reader reads the latest batch's state as it read it before."""
    home = tmp_path / "home"
    checkpoint = home / "checkpoints" / "user_activity"
    shutil.copytree(spark35["dedup_rocksdb_changelog"], checkpoint)
    config = tmp_path / "stateops.toml"
    config.write_text("[retention]\nrewind_batches = 1\n")
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({"spark.sql.streaming.minBatchesToRetain": "2"}))
    scope = retention_scope(Environment.from_env(layout=Layout(str(home)), config_path=str(config)))
    before = {store: _reader_rows(spark, str(checkpoint), *store) for store in WRITTEN["dedup_rocksdb_changelog"]}
    inventory = retention.take_inventory(scope)
    [entry] = [c for c in inventory.to_dict()["checkpoints"] if c["job"] == "user_activity" and c["kind"] == "job"]
    assert [(o["operator_id"], o["operator_name"]) for o in entry["operators"]] == [(0, "stateStoreSave"),
                                                                                    (1, "dedupe")]
    plan = retention.make_plan(scope, inventory)
    deleted = [rel for item in plan.items if item.action == DELETE_FILES and item.target == str(checkpoint)
               for rel, _ in item.paths]
    assert any(rel.startswith("offsets/") for rel in deleted) and any(rel.startswith("state/") for rel in deleted)
    assert retention.apply(scope, plan, actor="spark35").ok
    assert not any((checkpoint / rel).exists() for rel in deleted)
    assert {store: _reader_rows(spark, str(checkpoint), *store) for store in before} == before
