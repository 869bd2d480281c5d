"""The stream-stream join's state format (issue 45): new checkpoints get format 4 (the session factory's default), a
checkpoint written in format 2 keeps it (Spark reads the format from its offset log), restarts, is audited with its
four stores and explained, and `stateops jobs describe` says which format is in force; a rebuild keeps format 2
(issue 51: a rebuild keeps the store and formats it is not asked to change), and moves the job to format 4 when
STATEOPS_SPARK_CONF asks for it; the table equals the batch recomputation of all input before and after."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops.audit import deep_audit
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.cli.main import main
from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import JOIN_STATE_FORMAT
from stateops.checkpoints.sparkstate import join_state_format
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.scenarios import rocksdb_config
from tests.support.spark_confs import sql_confs

# Long tier (the default run: format 4 in force on every new join: test_jobs_oracle, test_kill_restart, the audits).
pytestmark = [pytest.mark.spark, pytest.mark.long]

JOB = "order_payments"
INPUT = GeneratorConfig(events=0, orders=240, files=4, users=40, late_share=0.05, malformed_share=0.02,
                        minutes_per_file=15, seed=45)
COLUMNS = ["order_id", "payment_id", "order_time", "payment_time"]


def _format(layout) -> int:
    checkpoint = Checkpoint.open(layout.checkpoint(JOB))
    return join_state_format(checkpoint.batch_metadata(checkpoint.offset_batches()[-1]).get("conf", {}))


def _described(layout) -> dict:
    done = CliRunner().invoke(main, ["--home", layout.home, "jobs", "describe", JOB, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.output)["join_state_format"]


def _equals_oracle(layout, spec) -> None:
    batches = {name: oracle.typed_batches(layout.landing(name), name, layout.checkpoint(JOB))
               for name in ("orders", "payments")}
    expected = oracle.order_payments(batches["orders"], batches["payments"], spec.watermark_seconds * 1000)
    got = table_rows(layout.table(JOB), COLUMNS)
    assert expected and len(got) == len(set(got)) and set(got) == expected


def test_a_format_2_checkpoint_keeps_its_format_and_a_rebuild_moves_it_to_4_when_asked(spark, layout, monkeypatch,
                                                                                      tmp_path):
    monkeypatch.setenv("STATEOPS_CONFIG", rocksdb_config(tmp_path, JOB))  # format 4 needs RocksDB's column families
    spec = load_jobs(layout=layout)[JOB]
    assert _described(layout) == {"value": 4, "source": "a new checkpoint's, from the session"}
    generate(layout, INPUT)
    with sql_confs(spark, {JOIN_STATE_FORMAT: "2"}):  # as a checkpoint written before format 4 was the default
        run_job(spark, spec, layout, settings=read_settings())
    assert _format(layout) == 2 and _described(layout)["value"] == 2

    generate(layout, replace(INPUT, files=2, orders=120, seed=46, first_order=1000,
                             start="2026-01-01T02:00:00+00:00"))
    run_job(spark, spec, layout, settings=read_settings())  # the session's default is 4: the checkpoint keeps 2
    assert _format(layout) == 2
    _equals_oracle(layout, spec)
    report = deep_audit(spark, layout.checkpoint(JOB), layout=layout, job=JOB, join_bound=spec.join_bound)
    assert [op.store_name for op in report.operators] == [
        "left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    left = report.operator(0, "left-keyWithIndexToValue")
    assert left.rows_total and left.keys_total == report.operator(0, "left-keyToNumValues").rows_total

    rebuild = ["--home", layout.home, "recover", "run", JOB, "--mode", "rebuild", "--confirm", JOB]
    done = CliRunner().invoke(main, rebuild)
    assert done.exit_code == 0, done.output
    assert _format(layout) == 2 and "keeps the old one's state store and formats" in done.output
    _equals_oracle(layout, spec)
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({JOIN_STATE_FORMAT: "4"}))  # asked for
    done = CliRunner().invoke(main, rebuild)
    assert done.exit_code == 0, done.output
    assert "join format 2, checkpoint format 1 to rocksdb (changelog on), join format 4" in done.output
    assert _format(layout) == 4 and _described(layout)["value"] == 4
    generate(layout, replace(INPUT, files=2, orders=120, seed=47, first_order=2000,
                             start="2026-01-01T04:00:00+00:00"))
    run_job(spark, spec, layout, settings=read_settings())
    report = deep_audit(spark, layout.checkpoint(JOB), layout=layout, job=JOB, join_bound=spec.join_bound)
    assert [op.store_name for op in report.operators] == ["left-keyWithTsToValues", "right-keyWithTsToValues"]
    left = report.operator(0, "left-keyWithTsToValues")
    distinct = (spark.read.format("statestore").option("path", layout.checkpoint(JOB))
                .option("storeName", left.store_name).load().select("key.field0").distinct().count())
    assert left.rows_total and left.keys_total == distinct
    _equals_oracle(layout, spec)  # the rebuild replayed every file into the table: no pair doubled, none lost
