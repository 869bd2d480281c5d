"""The sensors over ops tables written by real audits of real queries: real Spark (the job's own query on
generated input), real deep audits recorded in Delta, a real Dagster instance, Dagster's sensor context;
requested runs executed in process as the daemon would launch them.

Skew: the generator's clustered ids (Spark's murmur3 sends them to partition 0 of 4) skew user_activity's
dedup store across many keys. Oracle for the skew: Spark's state reader counted directly.
"""
import os
import shutil

import pyarrow as pa
import pytest
from dagster import AssetObservation, instance_for_test
from deltalake import write_deltalake

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.targets import resolve_audit
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.audit import deep_audit, record
from stateops.audit.history import AUDITS, AUDITS_SCHEMA, FINDINGS
from stateops.control import maintenance
from stateops.layout import Layout
from stateops.remediation.alerts import WebhookSettings, sender_for

from tests.support.audit_queries import oracle_rows
from tests.support.sensor_harness import RUNBOOK_OP, Harness
from tests.support.servers.webhook import Server

pytestmark = pytest.mark.spark

JOB = "user_activity"
SKEW, GROWTH, HEALTH = "state_skew_sensor", "state_growth_sensor", "query_health_sensor"


def _audit(spark, layout: Layout) -> str:
    target = resolve_audit(JOB, Catalog.load(layout, os.environ["STATEOPS_CONFIG"]))
    return record(layout, deep_audit(spark, target.checkpoint, thresholds=target.thresholds, layout=layout, job=JOB,
                                     join_bound=target.join_bound))


def _skip(result) -> str:
    assert not result.run_requests, [r.job_name for r in result.run_requests]
    return result.skip_reason.skip_message


def _job_part(reason: str, job: str = JOB) -> str:
    return next(part for part in reason.split(" | ") if job in part.split(":")[0] or part.startswith(job))


def test_skew_across_many_keys_escalates_then_launches_one_runbook_per_finding(spark, sensor_home, monkeypatch):
    layout, configure = sensor_home
    hook = Server([200])
    monkeypatch.setenv("STATEOPS_ALERT_WEBHOOK_URL", hook.url)
    monkeypatch.setenv("STATEOPS_ALERT_BACKOFF_SECONDS", "0.01")
    generate(layout, GeneratorConfig(events=800, files=4, users=100, clustered_share=0.9, clustered_partitions=4,
                                     minutes_per_file=15, seed=31))
    spec = get_job(JOB)
    run_job(spark, spec, layout, settings=read_settings())
    with instance_for_test() as instance:
        harness = Harness(instance)
        # No deep audit yet: the fast audit in the tick (bytes) does not reach its 64 MiB floor: a skip, with why.
        first = harness.tick(SKEW)
        assert "no deep audit of this query yet" in _job_part(_skip(first)), first.skip_reason

        audit_1 = _audit(spark, layout)
        escalated = harness.tick(SKEW, first.cursor)
        [request] = escalated.run_requests
        assert request.job_name == f"{JOB}_deep_audit" and request.tags["stateops/action"] == "escalate"
        assert request.tags["stateops/audit_id"] == audit_1 and "1 of 2 consecutive" not in request.run_key
        launched = harness.launch(request)  # the deep audit run, as the daemon would launch it (Spark)
        assert launched.success
        again = harness.tick(SKEW, escalated.cursor)
        [request] = again.run_requests
        assert request.job_name == "state_recovery", request
        config = request.run_config["ops"][RUNBOOK_OP]["config"]
        assert {k: config[k] for k in ("job", "mode", "shuffle_partitions", "dry_run")} == {
            "job": JOB, "mode": "repartition", "shuffle_partitions": 9, "dry_run": True}
        assert "confirm" not in config  # plan mode: the person who launches it for real confirms
        tags = request.tags
        audit_2 = tags["stateops/audit_id"]
        assert audit_2 != audit_1 and tags["stateops/finding_code"] == "STATE_SKEW"
        assert tags["stateops/rule"] == "skew.many_keys -> repartition 4 -> 9 partitions"
        assert audit_2 in config["reason"] and tags["stateops/rule"] in config["reason"]
        # The finding's numbers agree with Spark's state reader: partition 0 holds the clustered ids.
        finding_op = int(tags["stateops/key"].split(":")[2])
        direct = oracle_rows(spark, spec.checkpoint_path(layout), operatorId=finding_op)
        assert max(direct, key=direct.get) == 0 and direct[0] / sum(direct.values()) > 0.8
        [observation] = again.asset_events
        assert isinstance(observation, AssetObservation) and observation.asset_key.path == [spec.sink_table]
        assert observation.metadata["remediation/audit_id"].value == audit_2
        assert observation.metadata["remediation/runbook"].value["mode"] == "repartition"
        run = harness.launch(request)
        assert run.success and run.dagster_run.tags["stateops/key"] == tags["stateops/key"]

        # Storm: tick after tick sees the same finding; nothing more is launched, with or without the cursor.
        cursor = again.cursor
        for _ in range(10):
            result = harness.tick(SKEW, cursor)
            assert "was already acted on" in _job_part(_skip(result)), result.skip_reason
            cursor = result.cursor
        lost = _job_part(_skip(harness.tick(SKEW, None)))
        assert f"already acted on by run {run.dagster_run.run_id}" in lost
        assert sender_for(WebhookSettings.from_env()).flush(30)
        assert len(hook.bodies) == 1 and "remediate (skew.many_keys" in hook.bodies[0][1]["text"]

        # A new deep audit is a new finding: the cooldown, then the daily budget, then the lock hold it back.
        audit_3 = _audit(spark, layout)
        assert "cooldown after run" in _job_part(_skip(harness.tick(SKEW, cursor)))
        configure(f"\n[remediation.jobs.{JOB}]\ncooldown_seconds = 0\ndaily_budget = 1\n")
        assert "daily budget used: 1 of 1" in _job_part(_skip(harness.tick(SKEW, cursor)))
        configure(f"\n[remediation.jobs.{JOB}]\ncooldown_seconds = 0\nmode = \"auto\"\n")
        maintenance.acquire(layout, JOB, runbook_id="rb-alice", actor="alice", reason="resize by hand")
        held = _job_part(_skip(harness.tick(SKEW, cursor)))
        assert "runbook rb-alice (alice" in held and "holds the maintenance lock" in held
        maintenance.release(layout, JOB, runbook_id="rb-alice", actor="alice")
        [request] = harness.tick(SKEW, cursor).run_requests
        config = request.run_config["ops"][RUNBOOK_OP]["config"]
        assert request.tags["stateops/audit_id"] == audit_3 and (config["dry_run"], config["confirm"]) == (False, JOB)


def test_growth_escalates_on_progress_then_tightens_the_watermark(spark, sensor_home):
    layout, _configure = sensor_home
    spec = get_job(JOB)
    generate(layout, GeneratorConfig(events=600, files=3, users=300, minutes_per_file=10, seed=5))
    run_job(spark, spec, layout, settings=read_settings())
    with instance_for_test() as instance:
        harness = Harness(instance)
        # With a 2-hour delay nothing is evicted: the progress rows show the state growing while the watermark
        # advances; cheap numbers, so the tick asks for the deep audit.
        [request] = harness.tick(GROWTH).run_requests
        assert request.job_name == f"{JOB}_deep_audit" and request.tags["stateops/rule"] == "growth.progress -> deep audit"
        _audit(spark, layout)
        generate(layout, GeneratorConfig(events=1800, files=6, users=300, minutes_per_file=10, seed=6,
                                         start="2026-01-01T00:30:00+00:00"))
        run_job(spark, spec, layout, settings=read_settings())
        _audit(spark, layout)  # against the first: STATE_GROWTH, the watermark having advanced
        result = harness.tick(GROWTH)
        [request] = result.run_requests
        config = request.run_config["ops"][RUNBOOK_OP]["config"]
        assert (config["mode"], config["watermark_delay"]) == ("adjust", "60 minutes")
        assert request.tags["stateops/finding_code"] == "STATE_GROWTH"
        assert request.tags["stateops/rule"] == "growth -> adjust (watermark delay 2 hours -> 60 minutes)"


def _tables(layout: Layout) -> str:
    return os.path.dirname(layout.ops_table(AUDITS))


def test_broken_ops_tables_make_every_sensor_skip_with_a_reason(spark, sensor_home):
    layout, _configure = sensor_home
    generate(layout, GeneratorConfig(events=200, files=1, users=50, minutes_per_file=10, seed=9))
    run_job(spark, get_job(JOB), layout, settings=read_settings())
    _audit(spark, layout)
    saved = os.path.join(os.path.dirname(layout.home), "saved-tables")
    shutil.copytree(_tables(layout), saved)

    def restore():
        shutil.rmtree(_tables(layout))
        shutil.copytree(saved, _tables(layout))

    with instance_for_test() as instance:
        harness = Harness(instance)
        assert "shows no actionable skew" in _job_part(_skip(harness.tick(SKEW)))

        shutil.rmtree(layout.ops_table(AUDITS))  # missing: as if nothing was ever audited
        assert "no deep audit of this query yet" in _job_part(_skip(harness.tick(SKEW)))

        write_deltalake(layout.ops_table(AUDITS), AUDITS_SCHEMA.empty_table())  # empty
        assert "no deep audit of this query yet" in _job_part(_skip(harness.tick(SKEW)))

        restore()  # schema drift: a column written as text by something else
        drifted = pa.table({"audit_id": ["x"], "rows_total": ["many"]})
        shutil.rmtree(layout.ops_table(AUDITS))
        write_deltalake(layout.ops_table(AUDITS), drifted)
        for sensor in (SKEW, GROWTH):
            reason = _skip(harness.tick(sensor))
            assert reason.startswith(f"{sensor}: ops table audits (") and "schema drift" in reason, reason
            assert "Fix: move the table aside" in reason

        restore()  # a corrupt data file
        data = [os.path.join(root, f) for root, _d, files in os.walk(layout.ops_table(FINDINGS))
                for f in files if f.endswith(".parquet")]
        with open(data[0], "wb") as handle:
            handle.write(b"not parquet at all")
        reason = _skip(harness.tick(SKEW))
        assert reason.startswith(f"{SKEW}: ops table findings (") and "cannot be read" in reason, reason

        restore()  # a corrupt transaction log
        log = os.path.join(layout.ops_table("progress"), "_delta_log", "00000000000000000000.json")
        with open(log, "w") as handle:
            handle.write("{broken")
        for sensor in (GROWTH, HEALTH):
            reason = _skip(harness.tick(sensor))
            assert reason.startswith(f"{sensor}: ops table progress (") and "cannot be opened" in reason, reason
