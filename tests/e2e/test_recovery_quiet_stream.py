"""The adjust runbook on a quiet live stream (StateOps issue 20, item 6): a long-running run of `user_activity`
has consumed all its input and nothing lands any more; `stateops recover run --mode adjust` (the CLI, in a
process of its own) stops it, archives, sets the new delay, restarts it long-running and verifies.

The restarted query runs no batch, so it can never complete the K batches verification asks for. It must
end verification because the restarted query is running and read every available input (it reported itself
idle after the restart and the checkpoint read every landed file), with the other checks green, and not
because the verification timeout ran out: the timeout is 240 s here, so a pass by timeout would show as
`timed_out` and in the `batches` detail. Then a file lands: the restarted run reads it, and its idle record
follows that batch.

Oracles: the checkpoint (its source log against the landing folder, its batches), the lease, the idle record.
Wall-clock times of the runbook's steps are recorded (record_property), never asserted."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops import progress
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import current_lease

from tests.support.runbook_env import runbook_env

# Long tier: the default run guards the verdict itself (tests/unit/test_recovery_caught_up.py) and, in the long
# tier too, an acting adjust whose restart has read everything (tests/spark/test_kafka_jobs.py); this is the whole CLI path against a
# long-running run, with a 240 s verification timeout to tell a pass from a timeout.
pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
BIN = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 240   # the verification timeout: a pass that waited for it would take at least this long
DEADLINE = 600  # JVM starts and batches on a loaded 2-core machine


def _env(layout, tmp_path, monkeypatch):
    return runbook_env(layout, tmp_path, monkeypatch, JOB, verify_batches=3, verify_timeout=TIMEOUT,
                       stop_timeout=DEADLINE)


def _landed(layout) -> set[str]:
    folder = layout.landing("events")
    return {os.path.join(folder, n) for n in os.listdir(folder) if not n.startswith((".", "_"))}


def _read(checkpoint: str) -> set[str]:
    return {p.removeprefix("file://") for files in Checkpoint(checkpoint).source_files().values() for p, _ in files}


def _wait(what: str, condition, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _quiet(layout, checkpoint: str, pid: int) -> None:
    """Wait until run `pid` holds the lease, has committed a batch reading every landed file, and has then
    planned nothing for 8 s (four triggers: its trailing no-data batch is done)."""
    def consumed():
        lease = current_lease(layout, JOB)
        if lease is None or lease.pid != pid or not os.path.exists(f"{checkpoint}/commits"):
            return None
        cp = Checkpoint(checkpoint)
        committed = cp.committed_batches()
        if committed and cp.offset_batches()[-1] == committed[-1] and _landed(layout) <= _read(checkpoint):
            return committed[-1]
        return None

    seen, since = None, time.monotonic()
    while True:
        latest = _wait("the running query did not consume its input", consumed)
        if latest != seen:
            seen, since = latest, time.monotonic()
        elif time.monotonic() - since >= 8:
            return
        time.sleep(0.5)


def _seconds(steps: list[dict], step: str) -> float:
    """How long a step took: from its `started` to its `done` entry in the journal."""
    at = {e["phase"]: datetime.fromisoformat(e["at"]) for e in steps if e["step"] == step}
    return round((at["done"] - at["started"]).total_seconds(), 1)


def test_adjust_on_a_quiet_stream_ends_verification_when_the_restart_has_read_everything(layout, tmp_path,
                                                                                         record_property,
                                                                                         monkeypatch):
    env = _env(layout, tmp_path, monkeypatch)
    checkpoint = get_job(JOB).checkpoint_path(layout)
    generate(layout, GeneratorConfig(events=180, files=3, users=25, minutes_per_file=15, seed=5))
    log = open(tmp_path / "first-run.log", "w")
    first = subprocess.Popen([f"{BIN}/stateops", "jobs", "run", JOB, "--mode", "continuous"], env=env, cwd=ROOT,
                             start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    pids = [first.pid]
    try:
        _quiet(layout, checkpoint, first.pid)
        before = Checkpoint(checkpoint).latest_committed_batch()

        started = time.monotonic()
        done = subprocess.run([f"{BIN}/stateops", "recover", "run", JOB, "--mode", "adjust", "--watermark",
                               "20 minutes", "--confirm", JOB, "--reason", "quiet stream", "--json"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=2 * DEADLINE)
        runbook_seconds = round(time.monotonic() - started, 1)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        (restart,) = [e["details"] for e in report["steps"] if e["step"] == "restart" and e["phase"] == "done"]
        pids.append(restart["pid"])
        times = {step: _seconds(report["steps"], step) for step in ("stop", "audit_before", "restart", "verify")}
        record_property("quiet stream runbook seconds", {"total": runbook_seconds, **times})
        print(f"adjust runbook on a quiet stream: {runbook_seconds} s in all, per step {times}")
        assert report["outcome"] == "succeeded", (report["error"], report["verification"])

        verification = report["verification"]
        checks = {c["name"]: c for c in verification["checks"]}
        assert verification["ok"] and all(c["ok"] for c in checks.values()), checks
        assert verification.get("caught_up") is True and verification.get("timed_out") is False, checks["batches"]
        assert checks["batches"]["detail"].startswith(
            "0 batches with input (wanted 3); the restarted query is running and has read every available input "
            "(idle since "), checks["batches"]["detail"]
        assert {"state_rows", "partitions", "watermark", "sink_keys"} <= set(checks)
        assert not [p for p in verification["progress"] if p["input_rows"]], "no input came after the restart"

        # the oracles: the restarted run still holds the lease; its checkpoint read every landed file and ran
        # no batch with input; the idle record the verification relied on is that run's
        lease = current_lease(layout, JOB)
        assert lease is not None and lease.pid == restart["pid"] and lease.run_id == verification["run_id"]
        assert _landed(layout) <= _read(checkpoint)
        assert restart["latest_committed_batch"] == before
        report_idle = progress.idle_report(layout, JOB, lease.run_id, JOB)
        assert report_idle is not None and report_idle["idle_at"] in checks["batches"]["detail"]

        # input lands again: the restarted run reads it, then goes idle after that batch
        generate(layout, GeneratorConfig(events=60, files=1, users=25, minutes_per_file=15, seed=6,
                                         start="2026-01-01T01:00:00+00:00"))
        _quiet(layout, checkpoint, restart["pid"])
        latest = Checkpoint(checkpoint).latest_committed_batch()
        assert latest > before

        def idle_after_latest():
            found = progress.idle_report(layout, JOB, lease.run_id, JOB)
            return found if found and found["after_batch"] == latest else None

        idle = _wait("the restarted query did not report itself idle after its batch", idle_after_latest, 120)
        assert idle["idle_at"] > report_idle["idle_at"]
    finally:
        subprocess.run([f"{BIN}/stateops", "jobs", "stop", JOB, "--wait", "120"], env=env, cwd=ROOT,
                       capture_output=True, timeout=300)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
