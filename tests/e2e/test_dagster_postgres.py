"""Dagster on PostgreSQL: orchestration/dagster-postgres.yaml as the instance's dagster.yaml, a real
PostgreSQL server started on loopback (tests/support/servers/postgres.py), the user_activity job asset and its deep
audit materialized with real Spark and Delta, then the `state_recovery` runbook (a real adjust) on it.

Oracles: the database itself (runs and event_logs tables read with psycopg2, not through Dagster), a second
instance built from the same yaml (what the webserver or daemon on another host would see), and the job's
Delta table for the metadata's numbers. Skips with the reason where PostgreSQL is not installed.
"""
from __future__ import annotations

import os
import shutil

import psycopg2
import pytest
from dagster import AssetKey, DagsterInstance, materialize
from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator
from deltalake import DeltaTable

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from tests.support.code_location import job_assets
from stateops.dagster.audits.assets import deep_audit_key
from tests.support.code_location import deep_audit_assets
from tests.support.code_location import state_recovery
from stateops.dagster.resources import default_resources
from stateops.control import overrides

pytestmark = [pytest.mark.e2e, pytest.mark.long]

YAML = os.path.join(os.path.dirname(__file__), "..", "..", "orchestration", "dagster-postgres.yaml")
JOB = "user_activity"


def test_job_asset_and_deep_audit_on_a_postgres_instance(spark, layout, tmp_path, monkeypatch, postgres_url):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(YAML, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url.replace("postgresql://", "postgresql+psycopg2://"))
    generate(layout, GeneratorConfig(events=400, files=3, users=40, minutes_per_file=15, seed=29))
    spec = get_job(JOB)

    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.run_queue_config.max_concurrent_runs == 4
        result = materialize([*job_assets, deep_audit_assets[JOB]], instance=instance, resources=default_resources(),
                             selection=[AssetKey(spec.sink_table), deep_audit_key(spec)])
        assert result.success
        run_id = result.run_id
        # the runbook on this instance: a real adjust, its run and events in PostgreSQL too
        monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
        monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", "0")
        recovered = state_recovery.execute_in_process(
            run_config={"ops": {"recover": {"config": {"job": JOB, "mode": "adjust", "watermark_delay": "20 minutes",
                                                       "reason": "postgres", "confirm": JOB, "dry_run": False}}}},
            resources=default_resources(), instance=instance)
        assert recovered.output_for_node("recover") == "succeeded"
        assert overrides.in_force(layout, JOB)["watermark_delay"].value == "20 minutes"

    rows = DeltaTable(layout.table(spec.sink_table)).to_pyarrow_table().num_rows
    with DagsterInstance.from_config(str(home)) as reader:  # a fresh instance: what other hosts see
        job_event = reader.get_latest_materialization_event(AssetKey(spec.sink_table))
        audit_event = reader.get_latest_materialization_event(deep_audit_key(spec))
        assert job_event.run_id == run_id and audit_event.run_id == run_id
        job_meta = job_event.asset_materialization.metadata
        assert job_meta["batches"].value == 3 and job_meta["output_rows"].value >= rows > 0
        audit_meta = audit_event.asset_materialization.metadata
        assert audit_meta["audit_kind"].value == "deep" and audit_meta["batch_id"].value >= 2
        assert audit_meta["state_rows_total"].value > 0

    with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute("select status from runs where run_id = %s", (run_id,))
        assert cur.fetchall() == [("SUCCESS",)]
        cur.execute("select asset_key, event from event_logs where run_id = %s and "
                    "dagster_event_type = 'ASSET_MATERIALIZATION'", (run_id,))
        stored = dict(cur.fetchall())
    assert set(stored) == {AssetKey(spec.sink_table).to_string(), deep_audit_key(spec).to_string()}
    assert '"batches"' in stored[AssetKey(spec.sink_table).to_string()]
    with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute("select pipeline_name, status from runs where run_id = %s", (recovered.run_id,))
        assert cur.fetchall() == [("state_recovery", "SUCCESS")]
        cur.execute("select count(*) from event_logs where run_id = %s and dagster_event_type = 'ASSET_OBSERVATION'",
                    (recovered.run_id,))
        assert cur.fetchone()[0] >= 5, "each runbook step observed on the job asset, stored in PostgreSQL"
