"""query_health_sensor and the run-failure alert on a real Dagster instance and the real control plane, no JVM:
a lease left by a killed process, a failed run, a stalled query; the failure alert through a loopback webhook."""
import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from dagster import AssetKey, DagsterEventType, build_run_status_sensor_context, instance_for_test

from stateops import progress
from stateops.audit.history import record
from stateops.audit.model import AuditReport, Finding, OperatorAudit
from stateops.control import ControlSettings, acquire, current_lease, maintenance
from stateops.remediation.alerts import WebhookSettings, sender_for

from tests.support.code_location import SPECS
from tests.support.fake_checkpoint import QUERY_ID, FakeCheckpoint
from stateops.sensors.health import run_failure_alert
from tests.support.sensor_harness import RUNBOOK_OP, Harness

pytestmark = pytest.mark.e2e

JOB = "user_activity"
HEALTH = "query_health_sensor"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(tmp_path, monkeypatch, layout):
    path = tmp_path / "stateops.toml"
    path.write_text(f'[jobs.{JOB}]\nwatermark_delay = "2 hours"\n[remediation.jobs.{JOB}]\n'
                    "progress_timeout_seconds = 60\n")
    monkeypatch.setenv("STATEOPS_CONFIG", str(path))
    return path


def _part(result, job: str = JOB) -> str:
    assert not result.run_requests
    return next(p for p in result.skip_reason.skip_message.split(" | ") if p.startswith(job))


def _fail_a_run(harness: Harness, layout) -> str:
    """A real run of the job that fails before Spark starts (the job is locked by a runbook)."""
    maintenance.acquire(layout, JOB, runbook_id="rb-test", actor="test", reason="make the run fail fast")
    try:
        result = harness.repo.get_job(f"{JOB}_job").execute_in_process(instance=harness.instance, raise_on_error=False)
    finally:
        maintenance.release(layout, JOB, runbook_id="rb-test", actor="test")
    assert not result.success
    return result.run_id


def test_failed_run_restarts_once_then_cooldown(layout, tmp_path, monkeypatch):
    _config(tmp_path, monkeypatch, layout)
    with instance_for_test() as instance:
        harness = Harness(instance)
        assert "idle, no finished run, no batch recorded" in _part(harness.tick(HEALTH))
        failed = _fail_a_run(harness, layout)
        result = harness.tick(HEALTH)
        [request] = result.run_requests
        assert request.job_name == f"{JOB}_job" and request.tags["stateops/key"] == f"failed:{failed}"
        assert request.tags["stateops/rule"] == "health.failed_run -> restart"
        assert _part(harness.tick(HEALTH, result.cursor)).startswith(f"{JOB}: failed:{failed} was already acted on")
        # The restart fails too (still a fast failure): no restart loop, the cooldown holds the next one back.
        maintenance.acquire(layout, JOB, runbook_id="rb-test", actor="test", reason="make the restart fail")
        restart = harness.launch(request)
        maintenance.release(layout, JOB, runbook_id="rb-test", actor="test")
        assert not restart.success and restart.dagster_run.tags["stateops/action"] == "restart"
        assert "cooldown after run " + restart.run_id in _part(harness.tick(HEALTH, result.cursor))


def test_stale_lease_restarts_the_job(layout, tmp_path, monkeypatch):
    _config(tmp_path, monkeypatch, layout)
    code = ("import os; from stateops.layout import Layout; from stateops.control import ControlSettings, acquire; "
            f"acquire(Layout({layout.home!r}), {JOB!r}, run_id='doomed', settings=ControlSettings.from_env()); "
            "os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    lease = current_lease(layout, JOB)
    assert lease is not None and lease.run_id == "doomed"
    with instance_for_test() as instance:
        [request] = Harness(instance).tick(HEALTH).run_requests
    assert request.job_name == f"{JOB}_job" and request.tags["stateops/key"] == f"stale:{lease.lease_id}"
    assert request.tags["stateops/rule"] == "health.stale_lease -> restart"


def test_a_stale_leases_dagster_run_is_ended_and_its_pool_slot_freed(layout, tmp_path, monkeypatch):
    """A run killed with -9 never reports its end: Dagster keeps it STARTED, or its code server marks it failed,
    and either way its slot in the job's pool (limit 1), which the restart needs, stays claimed. The tick that sees
    its lease stale marks it failed if need be and frees the slot."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    _config(tmp_path, monkeypatch, layout)
    pool = f"stateops_job_{JOB}"
    with instance_for_test() as instance:
        dead = create_run_for_test(instance, job_name=f"{JOB}_job", status=DagsterRunStatus.STARTED)
        live = create_run_for_test(instance, job_name=f"{JOB}_job", status=DagsterRunStatus.STARTED)
        instance.event_log_storage.set_concurrency_slots(pool, 1)
        assert instance.event_log_storage.claim_concurrency_slot(pool, dead.run_id, "step").is_claimed
        code = ("import os; from stateops.layout import Layout; from stateops.control import ControlSettings, "
                f"acquire; acquire(Layout({layout.home!r}), {JOB!r}, run_id='doomed', dagster_run_id={dead.run_id!r}, "
                "settings=ControlSettings.from_env()); os._exit(0)")
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
        [request] = Harness(instance).tick(HEALTH).run_requests
        assert request.tags["stateops/rule"] == "health.stale_lease -> restart"
        assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(live.run_id).status == DagsterRunStatus.STARTED, "only the lease's run"
        assert instance.event_log_storage.get_concurrency_info(pool).active_slot_count == 0
        assert instance.event_log_storage.claim_concurrency_slot(pool, "the-restart", "step").is_claimed
        failure = [e for e in instance.all_logs(dead.run_id) if e.dagster_event and e.dagster_event.is_run_failure]
        assert failure and "lease of this run went stale" in failure[0].message
        # The launcher's code server saw the run worker die and marked it failed itself: the slot stays claimed
        # (Dagster frees ended runs' slots only with run monitoring on); the tick frees it.
        killed = create_run_for_test(instance, job_name=f"{JOB}_job", status=DagsterRunStatus.FAILURE)
        instance.event_log_storage.free_concurrency_slots_for_run("the-restart")
        assert instance.event_log_storage.claim_concurrency_slot(pool, killed.run_id, "step").is_claimed
        code = code.replace(dead.run_id, killed.run_id).replace("'doomed'", "'killed'")
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
        Harness(instance).tick(HEALTH)
        assert instance.event_log_storage.get_concurrency_info(pool).active_slot_count == 0


def test_stalled_query_gets_the_guarded_restart(layout, tmp_path, monkeypatch):
    config = _config(tmp_path, monkeypatch, layout)
    settings = ControlSettings(heartbeat_seconds=0.2, lease_timeout_seconds=5)
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    with acquire(layout, JOB, run_id="stuck", settings=settings) as held:
        with instance_for_test() as instance:
            harness = Harness(instance)
            # The lease is live and fresh: however quiet, a run that just started is not stalled.
            assert "running (run stuck)" in _part(harness.tick(HEALTH))
            row = {"job": JOB, "query_name": JOB, "query_id": "q1", "run_id": "r", "stateops_run_id": "stuck",
                   "batch_id": 7, "timestamp": hour_ago, "input_rows": 10, "batch_duration_ms": 5,
                   "durations_json": "{}", "watermark": hour_ago, "state_rows_total": 5, "state_rows_updated": 1,
                   "state_memory_bytes": 1, "rows_dropped_by_watermark": 0, "state_operators_json": "[]",
                   "sources_json": "[]"}
            progress.append(layout, [row])
            started = (datetime.now(timezone.utc) - timedelta(minutes=30)).isoformat()
            lease_file = os.path.join(layout.ops_dir(JOB), "control", "lease.json")
            with open(lease_file) as handle:
                record = json.load(handle)
            with open(lease_file, "w") as handle:  # as if it started half an hour ago
                json.dump({**record, "started": started}, handle)
            assert "running (run stuck), last batch 7" in _part(harness.tick(HEALTH))  # no input waits: quiet
            os.makedirs(layout.landing("events"), exist_ok=True)
            with open(os.path.join(layout.landing("events"), "late.json"), "w") as handle:
                handle.write("{}\n")
            [request] = harness.tick(HEALTH).run_requests
            assert request.job_name == "state_recovery"
            assert request.tags["stateops/key"] == f"stalled:{held.lease.lease_id}:7"
            config = request.run_config["ops"][RUNBOOK_OP]["config"]
            assert (config["mode"], config.get("watermark_delay"), config["dry_run"]) == ("restart", None, True)
            # The runbook it launches plans the guarded restart (it was an adjust to the delay in force, which the
            # runbook refuses: "nothing to adjust", and the stalled query was never restarted).
            FakeCheckpoint(layout.checkpoint(JOB)).batches(range(8)).store(0, partitions=4)
            planned = harness.launch(request)
            assert planned.success, [e.message for e in planned.all_events if e.is_failure]


def test_each_tick_reports_the_streams_health_on_its_asset_between_runs(layout, tmp_path, monkeypatch):
    """No run is open: the tick's observation on the job's asset says how the stream stands (the lease's state, its
    newest batch and how old it is, the newest audit's findings), again only when that changed. Oracles: the
    progress row, the audit recorded and the lease written here."""
    _config(tmp_path, monkeypatch, layout)
    checkpoint = FakeCheckpoint(layout.checkpoint(JOB)).batches(range(8)).store(0, partitions=4)
    asset = AssetKey(SPECS[JOB].output_asset)

    def health(result) -> dict:
        found = [e.metadata for e in result.asset_events if e.asset_key == asset and "health/state" in e.metadata]
        assert len(found) <= 1, found
        return {k: v.value for k, v in found[0].items()} if found else {}

    with instance_for_test() as instance:
        harness = Harness(instance)
        first = harness.tick(HEALTH)
        seen = health(first)
        assert seen["health/state"] == "idle" and "health/batch" not in seen and "health/findings" not in seen
        assert not health(harness.tick(HEALTH, cursor=first.cursor))  # nothing changed: no new event
        hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
        progress.append(layout, [{"job": JOB, "query_name": JOB, "query_id": QUERY_ID, "run_id": "r",
                                  "stateops_run_id": "s", "batch_id": 7, "timestamp": hour_ago, "input_rows": 10,
                                  "batch_duration_ms": 5, "durations_json": "{}", "watermark": hour_ago,
                                  "state_rows_total": 5, "state_rows_updated": 1, "state_memory_bytes": 1,
                                  "rows_dropped_by_watermark": 0, "state_operators_json": "[]", "sources_json": "[]"}])
        store = OperatorAudit(operator_id=0, operator_name="stateStoreSave", store_name="default", num_partitions=4)
        report = AuditReport(checkpoint.path, 7, hour_ago, [store], kind="fast", job=JOB, query_id=QUERY_ID,
                             findings=[Finding("WATERMARK_LAG", "warn", None, None, "an hour behind", "look")])
        audit_id = record(layout, report)
        second = harness.tick(HEALTH, cursor=first.cursor)
        seen = health(second)
        assert (seen["health/state"], seen["health/batch"], seen["health/input_rows"]) == ("idle", 7, 10)
        assert 3500 <= seen["health/batch_age_seconds"] <= 3700
        assert seen["health/audit_id"] == audit_id and seen["health/audit_kind"] == "fast"
        assert seen["health/findings"] == "WATERMARK_LAG warn"
        assert (seen["health/findings_error"], seen["health/findings_warn"]) == (0, 1)
        assert not health(harness.tick(HEALTH, cursor=second.cursor))
        with acquire(layout, JOB, run_id="now", settings=ControlSettings(heartbeat_seconds=0.2)):
            live = health(harness.tick(HEALTH, cursor=second.cursor))
        assert (live["health/state"], live["health/run"]) == ("running", "now")


def test_run_failure_alert_posts_to_the_webhook(layout, monkeypatch, tmp_path):
    _config(tmp_path, monkeypatch, layout)
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("STATEOPS_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        with instance_for_test() as instance:
            harness = Harness(instance)
            run_id = _fail_a_run(harness, layout)
            run = instance.get_run_by_id(run_id)
            failure = next(e for e in instance.all_logs(run_id) if e.dagster_event_type == DagsterEventType.RUN_FAILURE)
            context = build_run_status_sensor_context(sensor_name="stateops_run_failure_alert", dagster_instance=instance,
                                                      dagster_run=run, dagster_event=failure.dagster_event)
            run_failure_alert(context.for_run_failure())
            assert sender_for(WebhookSettings.from_env()).flush(30)
    finally:
        server.shutdown()
        server.server_close()
    [body] = bodies
    assert body["text"].startswith(f"[ERROR] {JOB}_job failed: run {run_id} of {JOB}_job failed")
    assert SPECS[JOB].name in body["blocks"][0]["text"]["text"]


def test_sensors_in_the_code_location_with_descriptions():
    from dagster import DefaultSensorStatus

    from stateops.dagster.definitions import defs

    repo = defs.get_repository_def()
    sensors = {s.name: s for s in repo.sensor_defs}
    assert set(sensors) == {"state_skew_sensor", "state_growth_sensor", "query_health_sensor",
                            "stateops_run_failure_alert"}
    for sensor in sensors.values():
        assert sensor.default_status == DefaultSensorStatus.STOPPED and len(sensor.description) > 80, sensor.name
    for name in ("state_skew_sensor", "state_growth_sensor"):
        assert {t.job_name for t in sensors[name].targets} == {f"{job}_deep_audit" for job in SPECS} | {"state_recovery"}
    assert {t.job_name for t in sensors["query_health_sensor"].targets} == {f"{job}_job" for job in SPECS} | {
        "state_recovery"}
