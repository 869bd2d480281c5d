"""The `state_recovery` Dagster job in process, on a real job checkpoint, real Spark, Delta and Dagster instance:
a dry run (the default) puts the plan in the run's metadata and changes nothing on disk; bad config fails
with one line naming the Launchpad field and the fix, changing nothing; a confirmed `adjust` succeeds with
one event per step, the override recorded, a verifying archive, and the sink equal to the batch oracle
with the new delay from the restart's first batch on.

Oracles: sha256 of every file under the home, tests/support/oracle.py, the override history, the archive manifest."""
import signal
import subprocess
from dataclasses import replace

import pytest
from dagster import DagsterEventType, DagsterRunStatus

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.control import current_lease, maintenance, overrides
from stateops.control.fence.lease import Lease
from stateops.storage.holders import HOST, start_ticks
from stateops.clock import now_iso
from stateops.checkpoints import archive
from stateops.runbooks import read_entries
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.trees import file_hashes

from stateops.dagster.definitions import defs
from stateops.dagster.recovery.runbook import terminate_holder
from tests.support.code_location import state_recovery
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

JOB = "user_activity"
INPUT = GeneratorConfig(events=400, files=4, users=30, late_share=0.05, duplicate_share=0.05, minutes_per_file=15,
                        seed=41)
COLUMNS = ["window_start", "window_end", "user_id", "events", "value_sum"]
MINUTE = 60_000


def _launch(instance, **config):
    """Launch the job with the resources as the code location builds them (for this test's STATEOPS_HOME)."""
    return state_recovery.execute_in_process(run_config={"ops": {"recover": {"config": {"job": JOB, **config}}}},
                                             resources=default_resources(), instance=instance, raise_on_error=False)


def _output_metadata(result) -> dict:
    (output,) = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_OUTPUT]
    return {key: value.value for key, value in output.step_output_data.metadata.items()}


def _failure(result) -> str:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.message.strip()
    assert "\n" not in message, message
    return message.split(": ", 1)[1]


def test_dry_run_refusals_and_adjust_from_dagster(spark, layout, dagster_instance, monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", "0")
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    generate(layout, INPUT)
    run_job(spark, spec, layout, settings=read_settings())
    before = file_hashes(layout.home)

    planned = _launch(dagster_instance, mode="adjust", watermark_delay="20 minutes", reason="late data")
    assert planned.success
    metadata = _output_metadata(planned)
    assert metadata["outcome"] == "planned" and planned.output_for_node("recover") == "planned"
    assert metadata["plan_json"]["settings_after"]["watermark_delay"] == "20 minutes"
    assert metadata["plan_json"]["dry_run"] is True
    assert "(dry run: nothing is changed)" in metadata["plan"] and "adjust" in metadata["plan"]
    assert dagster_instance.get_run_by_id(planned.run_id).tags["stateops/job"] == JOB

    refusals = {
        "confirm: no confirm does not confirm the runbook on user_activity. Fix: set confirm: user_activity":
            {"mode": "adjust", "watermark_delay": "20 minutes", "dry_run": False},
        "watermark_delay: is required for mode adjust. Fix: pass watermark_delay": {"mode": "adjust"},
        "shuffle_partitions: does not apply to mode adjust": {"mode": "adjust", "watermark_delay": "20 minutes",
                                                              "shuffle_partitions": 8},
    }
    for expected, config in refusals.items():
        result = _launch(dagster_instance, **config)
        assert not result.success and _failure(result).startswith(expected), _failure(result)
    assert file_hashes(layout.home) == before, "a dry run and the refusals changed nothing on disk"

    # New input lands while nothing runs; the confirmed runbook restarts the job bounded (as it ran) on it.
    generate(layout, replace(INPUT, files=2, events=200, start="2026-01-01T01:00:00+00:00", seed=42))
    result = _launch(dagster_instance, mode="adjust", watermark_delay="20 minutes", reason="late data",
                     confirm=JOB, dry_run=False)
    assert result.success
    metadata = _output_metadata(result)
    assert metadata["outcome"] == "succeeded", metadata.get("error")
    assert metadata["verification"]["ok"] and metadata["audit_before"]["operators"]
    assert metadata["audit_after"]["batch_id"] > metadata["audit_before"]["batch_id"]
    observed = [(o.metadata["step"].value, o.metadata["phase"].value) for o in result.asset_observations_for_node(
        "recover")]
    steps = [s["name"] for s in metadata["plan_json"]["steps"]]
    assert [s for s, phase in observed if phase == "done" and s in steps] == steps, observed
    assert all(o.asset_key.path == [spec.sink_table] for o in result.asset_observations_for_node("recover"))

    assert overrides.in_force(layout, JOB)["watermark_delay"].value == "20 minutes"
    assert not archive.verify(spec.archive_path(layout), metadata["runbook_id"]), "the archive verifies"
    assert maintenance.current(layout, JOB) is None and current_lease(layout, JOB) is None
    journal = read_entries(archive.runbook_dir(spec.archive_path(layout), metadata["runbook_id"]))
    (restart,) = [e["details"] for e in journal if e["step"] == "restart" and e["phase"] == "done"]
    switch = restart["latest_committed_batch"] + 1
    batches = oracle.typed_batches(layout.landing("events"), "events", checkpoint)
    assert switch < len(batches), "the restart processed new batches"
    expected = oracle.user_activity(batches, oracle.delays_switching(len(batches), 10 * MINUTE, 20 * MINUTE, switch))
    assert set(table_rows(layout.table(JOB), COLUMNS)) == expected



def _lease(run_id: str | None, pid: int) -> Lease:
    return Lease(lease_id="holder", job=JOB, run_id=run_id or "cli-run", dagster_run_id=run_id, runbook_id=None,
                 pid=pid, pid_started=start_ticks(pid), host=HOST, started=now_iso(), heartbeat=now_iso(),
                 mode="continuous")


def test_terminate_ends_the_holders_run_through_the_instance_or_refuses(dagster_instance):
    """A started run the launcher cannot reach (no code server: made here, not launched) whose process still
    runs: killed and reported cancelled. A holder without a Dagster run, or with a run of another instance:
    refused (False), nothing killed."""
    holder = subprocess.Popen(["sleep", "600"])
    try:
        logs = []
        terminate = terminate_holder(dagster_instance, logs.append, grace_seconds=0)
        assert terminate(_lease(None, holder.pid)) is False
        assert terminate(_lease("0" * 8 + "-0000-0000-0000-" + "0" * 12, holder.pid)) is False
        assert holder.poll() is None, "a refused termination kills nothing"
        run = dagster_instance.create_run_for_job(
            job_def=defs.get_job_def("state_recovery"), status=DagsterRunStatus.STARTED,
            run_config={"ops": {"recover": {"config": {"job": JOB, "mode": "adjust"}}}})
        assert terminate(_lease(run.run_id, holder.pid)) is True
        assert holder.wait(timeout=60) == -signal.SIGKILL
        assert dagster_instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELED
        assert f"killed pid {holder.pid} of Dagster run {run.run_id}" in logs[-1]
    finally:
        holder.kill()
