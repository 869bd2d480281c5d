"""The control plane in Dagster, on real instances, without a JVM: the maintenance lock blocks job
materializations and every schedule; a live lease skips the job schedules (not the audits) and fails a
materialization naming the holder; job runs wait for each other in a concurrency pool of one (the
shipped instance config)."""
import json
import os
import threading
import time
import uuid

import pytest
import yaml
from dagster import (DagsterRunStatus, RunRequest, SkipReason, build_schedule_context, instance_for_test,
                     materialize)

from stateops.control import ControlSettings, acquire, current_lease, maintenance
from stateops.storage.holders import HOST

from stateops.dagster.streaming_jobs.assets import pool_name
from tests.support.code_location import SPECS, job_assets
from stateops.dagster.definitions import defs
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

JOB = "user_activity"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAST = ControlSettings(heartbeat_seconds=0.2, lease_timeout_seconds=5)


def _tick(instance, name: str):
    """Evaluate a schedule; the context is closed after, so the instance it opens does not outlive it."""
    with build_schedule_context(instance=instance, resources=default_resources()) as context:
        return defs.get_repository_def().get_schedule_def(name)(context)


def _ticks(instance, names) -> dict:
    return {name: _tick(instance, name) for name in names}


def _job_schedules():
    return [f"{name}_every_15_minutes" for name in SPECS]


def _audit_schedules():
    return [f"{name}_deep_audit_hourly" for name in SPECS]


def _asset(job: str):
    return next(a for a in job_assets if a.key.path == [SPECS[job].sink_table])


def _failure(result) -> str:
    """The step failure's one line (Dagster prefixes the exception class)."""
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message.strip()
    assert message.startswith("dagster._core.definitions.events.Failure: ") and "\n" not in message, message
    return message.split(": ", 1)[1]


def _committed_checkpoint(layout, job: str) -> None:
    """The files that make a checkpoint look committed to the schedules (metadata, offsets/0, commits/0)."""
    path = SPECS[job].checkpoint_path(layout)
    for folder in ("offsets", "commits"):
        os.makedirs(f"{path}/{folder}")
        with open(f"{path}/{folder}/0", "w") as handle:
            handle.write("v1\n{}\n")
    with open(f"{path}/metadata", "w") as handle:
        handle.write(json.dumps({"id": str(uuid.uuid4())}) + "\n")


def test_maintenance_lock_blocks_materializations_and_every_schedule(layout, persistent_dagster_instance):
    for job in SPECS:
        _committed_checkpoint(layout, job)
    ticks = _ticks(persistent_dagster_instance, _job_schedules() + _audit_schedules())
    assert all(isinstance(t, RunRequest) for t in ticks.values())
    for job in SPECS:
        maintenance.acquire(layout, job, runbook_id=f"rb-{job}", actor="alice", reason="archive state")

    for name, tick in _ticks(persistent_dagster_instance, _job_schedules() + _audit_schedules()).items():
        job = next(j for j in SPECS if name.startswith(j + "_"))
        assert isinstance(tick, SkipReason), name
        assert f"{job} is under maintenance: locked by runbook rb-{job} (alice" in tick.skip_message, name

    result = materialize([_asset(JOB)], resources=default_resources(), instance=persistent_dagster_instance,
                         raise_on_error=False)
    assert not result.success
    message = _failure(result)
    assert message.startswith(f"{JOB} is under maintenance: locked by runbook rb-{JOB}") and "\n" not in message

    maintenance.release(layout, JOB, runbook_id=f"rb-{JOB}", actor="alice")
    ticks = _ticks(persistent_dagster_instance, [f"{JOB}_every_15_minutes", f"{JOB}_deep_audit_hourly"])
    assert all(isinstance(t, RunRequest) for t in ticks.values())


def test_a_live_lease_skips_job_schedules_and_fails_materializations(layout, persistent_dagster_instance):
    _committed_checkpoint(layout, JOB)
    with acquire(layout, JOB, run_id="cli-run", dagster_run_id=None, settings=FAST):
        ticks = _ticks(persistent_dagster_instance, [f"{JOB}_every_15_minutes", f"{JOB}_deep_audit_hourly"])
        skip = ticks[f"{JOB}_every_15_minutes"]
        assert isinstance(skip, SkipReason)
        assert f"{JOB} is already running: lease held by run cli-run, pid {os.getpid()} on {HOST}" in skip.skip_message
        # Audits read committed batches only: a running job is audited (long-running jobs need it).
        assert isinstance(ticks[f"{JOB}_deep_audit_hourly"], RunRequest)
        result = materialize([_asset(JOB)], resources=default_resources(), instance=persistent_dagster_instance,
                             raise_on_error=False)
        assert not result.success
        assert _failure(result).startswith(f"{JOB} is already running: lease held by run cli-run, pid {os.getpid()}")
    assert isinstance(_ticks(persistent_dagster_instance, [f"{JOB}_every_15_minutes"])[f"{JOB}_every_15_minutes"], RunRequest)


def test_job_runs_share_a_pool_of_one(layout):
    """With the shipped instance config, a run of a job waits while its pool's one slot is taken."""
    with open(os.path.join(ROOT, "orchestration", "dagster.yaml")) as handle:
        config = yaml.safe_load(handle)
    assert config["concurrency"] == {"pools": {"default_limit": 1}}
    pool = pool_name(SPECS[JOB])
    assert defs.get_repository_def().asset_graph.get(_asset(JOB).key).pools == {pool}
    maintenance.acquire(layout, JOB, runbook_id="rb-1", actor="t", reason="keep the run short (no Spark)")
    with instance_for_test(overrides=config) as instance:
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default(pool)
        assert storage.get_concurrency_info(pool).slot_count == 1
        assert storage.claim_concurrency_slot(pool, "first-run", "user_activity").is_claimed  # a run in flight
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.setdefault("result", materialize(
            [_asset(JOB)], resources=default_resources(), instance=instance, raise_on_error=False)), daemon=True)
        runner.start()

        def blocked_run():
            for record in instance.get_run_records():
                if any("blocked by limit for pool " + pool in (e.message or "")
                       for e in instance.all_logs(record.dagster_run.run_id)):
                    return record.dagster_run.run_id
            return None

        deadline = time.monotonic() + 120
        while blocked_run() is None:
            assert time.monotonic() < deadline and runner.is_alive(), "the second run did not wait for the pool"
            time.sleep(0.2)
        assert instance.get_run_by_id(blocked_run()).status == DagsterRunStatus.STARTED and runner.is_alive()
        storage.free_concurrency_slots_for_run("first-run")
        runner.join(120)
        assert not runner.is_alive()
        # It ran once the slot was free: as far as the control plane, which refused it (the lock).
        assert "under maintenance" in _failure(outcome["result"])
    assert current_lease(layout, JOB) is None
