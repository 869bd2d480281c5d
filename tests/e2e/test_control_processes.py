"""One writer per job across processes: a CLI run and a Dagster run each hold the job's lease while a second
CLI run, a second Dagster run and the job schedule are refused naming them; a kill -9'ed holder leaves a
stale lease that the next run takes over (journaled); `stateops jobs stop` ends a long-running Dagster run
gracefully. Oracles: the lease and actions records, the processes' exit codes and output, tests/support/oracle.py."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from dagster import (AssetKey, DagsterInstance, RunRequest, SkipReason, build_schedule_context, instance_for_test,
                     materialize)

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.cli.main import main
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops import actions
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import current_lease
from stateops.storage.holders import HOST
from tests.support import oracle
from tests.support.delta_rows import table_rows

from tests.support.code_location import job_assets
from stateops.dagster.definitions import defs
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

JOB = "user_activity"
BIN = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INPUT = GeneratorConfig(events=600, files=3, users=60, late_share=0.03, duplicate_share=0.05, minutes_per_file=15,
                        seed=17)
DEADLINE = 300


def _env(layout, tmp_path, monkeypatch):
    """STATEOPS_HOME and a config with a short trigger interval, for this process and the children."""
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\ntrigger_interval = "2 seconds"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    generate(layout, INPUT)
    return {**os.environ, "STATEOPS_HOME": layout.home, "STATEOPS_CONFIG": str(config)}


def _start(args: list[str], env: dict, tmp_path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen(args, env=env, cwd=ROOT, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)


def _holding_everything(layout, proc: subprocess.Popen):
    """Wait until `proc` holds the lease and has committed every landed file; returns the lease."""
    checkpoint = get_job(JOB).checkpoint_path(layout)
    deadline = time.monotonic() + DEADLINE
    while True:
        assert proc.poll() is None, f"the holder ended early (exit {proc.returncode})"
        assert time.monotonic() < deadline, "the holder did not consume its input"
        lease = current_lease(layout, JOB)
        if lease is not None and lease.pid == proc.pid and os.path.exists(f"{checkpoint}/commits"):
            cp = Checkpoint(checkpoint)
            files = cp.source_files().get(0, [])
            committed = cp.committed_batches()
            if len(files) == INPUT.files and committed and max(b for _, b in files) <= committed[-1]:
                return lease
        time.sleep(0.2)


def _second_cli_is_refused(env: dict, holder_words: list[str]) -> None:
    done = subprocess.run([f"{BIN}/stateops", "jobs", "run", JOB], env=env, capture_output=True, text=True,
                          timeout=DEADLINE)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: {JOB} is already running: lease held by run "), line
    for words in holder_words:
        assert words in line, (words, line)


def _dagster_run_is_refused(holder_words: list[str]) -> None:
    asset = next(a for a in job_assets if a.key.path == [JOB])
    with instance_for_test() as instance:
        result = materialize([asset], resources=default_resources(), instance=instance, raise_on_error=False)
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        message = failure.step_failure_data.error.message.strip()
        assert "\n" not in message and f"{JOB} is already running: lease held by run " in message
        for words in holder_words:
            assert words in message, (words, message)
        with build_schedule_context(instance=instance, resources=default_resources()) as context:
            tick = defs.get_repository_def().get_schedule_def(f"{JOB}_every_15_minutes")(context)
            audit = defs.get_repository_def().get_schedule_def(f"{JOB}_deep_audit_hourly")(context)
        assert isinstance(tick, SkipReason) and all(words in tick.skip_message for words in holder_words)
        assert isinstance(audit, RunRequest), "a running job is audited"


def _status(layout) -> dict:
    result = CliRunner().invoke(main, ["--home", layout.home, "jobs", "status", JOB, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _table_equals_oracle(layout) -> None:
    events = oracle.typed_batches(layout.landing("events"), "events")
    got = table_rows(layout.table(JOB), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert sorted(got) == sorted(oracle.user_activity(events, get_job(JOB).watermark_seconds * 1000))


@pytest.mark.long  # the default run: processes racing for one lease (test_control), a killed holder's stale lease
# (test_sensors_health), a killed runbook resumed at once (test_runbooks), `jobs status` (test_home_move)
def test_cli_holder_refuses_second_runs_and_a_kill_9_leaves_a_lease_the_next_run_takes_over(spark, layout,
                                                                                            tmp_path, monkeypatch):
    env = _env(layout, tmp_path, monkeypatch)
    holder = _start([f"{BIN}/stateops", "jobs", "run", JOB, "--mode", "continuous"], env, tmp_path, "holder")
    try:
        lease = _holding_everything(layout, holder)
        words = [f"run {lease.run_id}", f"pid {holder.pid} on {HOST}", f"since {lease.started}"]
        _second_cli_is_refused(env, words)
        _dagster_run_is_refused(words)
        status = _status(layout)
        assert status["state"] == "running" and status["lease"]["pid"] == holder.pid
        checkpoint = Checkpoint(get_job(JOB).checkpoint_path(layout))
        assert status["checkpoint"]["latest_committed_batch"] == checkpoint.committed_batches()[-1]
        assert status["checkpoint"]["watermark"].startswith("2026-01-01T")
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
    assert holder.wait(timeout=60) == -signal.SIGKILL

    status = _status(layout)
    assert status["state"] == "stale" and status["lease"]["run_id"] == lease.run_id
    assert status["lease"]["stale_reason"] == f"pid {holder.pid} on {HOST} is no longer running"
    stop = CliRunner().invoke(main, ["--home", layout.home, "jobs", "stop", JOB])
    assert stop.exit_code == 0 and f"{JOB} is not running (stale lease of run {lease.run_id}" in stop.output

    result = run_job(spark, get_job(JOB), layout, settings=read_settings())  # takes the stale lease over
    (takeover,) = actions.read(layout, JOB, "lease_takeover")
    assert takeover["run_id"] == result.run_id
    assert takeover["details"]["previous"]["lease_id"] == lease.lease_id
    assert takeover["details"]["stale_reason"] == f"pid {holder.pid} on {HOST} is no longer running"
    assert current_lease(layout, JOB) is None
    _table_equals_oracle(layout)


@pytest.mark.long  # the default run: a Dagster run refused beside a holder (test_control_dagster), a stop request
# honoured by a running query (test_control_runner), the CLI holder across processes (above)
def test_dagster_holder_refuses_second_runs_and_stops_gracefully_on_request(layout, tmp_path, monkeypatch):
    env = _env(layout, tmp_path, monkeypatch)
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    shutil.copy(os.path.join(ROOT, "orchestration", "dagster.yaml"), dagster_home / "dagster.yaml")
    config = json.dumps({"ops": {JOB: {"config": {"mode": "continuous"}}}})
    holder = _start([f"{BIN}/dagster", "asset", "materialize", "-m", "stateops.dagster.definitions", "--select", JOB,
                     "--config-json", config], {**env, "DAGSTER_HOME": str(dagster_home)}, tmp_path, "dagster")
    try:
        lease = _holding_everything(layout, holder)
        assert lease.dagster_run_id and lease.run_id == lease.dagster_run_id
        words = [f"Dagster run {lease.dagster_run_id}", f"pid {holder.pid} on {HOST}", f"since {lease.started}"]
        _second_cli_is_refused(env, words)
        _dagster_run_is_refused(words)

        stop = CliRunner().invoke(main, ["--home", layout.home, "jobs", "stop", JOB, "--wait", str(DEADLINE),
                                         "--reason", "end of test", "--actor", "tester"])
        assert stop.exit_code == 0, stop.output
        assert f"{JOB} stopped: run {lease.run_id} no longer holds the lease" in stop.output
        assert holder.wait(timeout=DEADLINE) == 0, (tmp_path / "dagster.log").read_text()[-3000:]
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
    assert current_lease(layout, JOB) is None
    (done,) = actions.read(layout, JOB, "stop")
    assert (done["actor"], done["dagster_run_id"], done["details"]["reason"]) == ("tester", lease.dagster_run_id,
                                                                                  "end of test")
    _table_equals_oracle(layout)
    with DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(AssetKey(JOB))
        metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert event.run_id == lease.dagster_run_id
    assert metadata["stop_reason"] == "stop_request" and metadata["hard_stopped"] is False
