"""The runbook launched the way the UI launches it: a real `dagster-webserver` on a temporary DAGSTER_HOME with
the shipped instance config (orchestration/dagster.yaml: pools of one) plus the DefaultRunCoordinator, so
the webserver launches runs itself and no daemon is needed. (With the default QueuedRunCoordinator the
daemon dequeues runs through a code server of its own; on this shared 2-core machine at load 30 its 60 s
gRPC deadline expired and the run stayed queued: one process less and a direct launch keep it reliable.)

Through DagsterGraphQLClient: `user_activity_job` runs the job long-running (it holds the job's lease, with its
Dagster run id); `state_recovery` adjusts the watermark delay with a stop timeout of 0, so the stop request
is not waited for and the runbook terminates the holder's Dagster run through the instance (its run
launcher and code server; SIGKILL after the grace), the last resort. Then it archives, adjusts, restarts
the job long-running (as it ran) and verifies.

Oracles: the holder's run status in the instance (cancelled), the journal, the archive's manifest
(verifies), the override history, the sink against tests/support/oracle.py with the new delay from the restart's
first batch on."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml
from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import current_lease, maintenance, overrides
from stateops.checkpoints import archive
from stateops.runbooks import read_entries
from tests.support import oracle
from tests.support.delta_rows import table_rows

pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
BIN = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLUMNS = ["window_start", "window_end", "user_id", "events", "value_sum"]
MINUTE = 60_000
DEADLINE = 1800  # generous: at load 50 on 2 cores the whole runbook run took 11 minutes
LOCATIONS = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename } } } } }"""
FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)


def _burst(layout, index: int, files: int) -> None:
    generate(layout, GeneratorConfig(events=60 * files, files=files, users=25, start=f"2026-01-01T0{index}:00:00+00:00",
                                     minutes_per_file=15, late_share=0.08, late_minutes=30, duplicate_share=0.05,
                                     seed=200 + index))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(what: str, condition, deadline: float = DEADLINE, every: float = 0.5):
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(every)


def _consumed(layout, run_id: str | None = None, pid: int | None = None):
    """The live lease (of `run_id`'s Dagster run or of `pid`) once every landed file is committed."""
    checkpoint = get_job(JOB).checkpoint_path(layout)
    landing = {n for n in os.listdir(layout.landing("events")) if not n.startswith((".", "_"))}
    lease = current_lease(layout, JOB)
    if lease is None or (run_id and lease.dagster_run_id != run_id) or (pid and lease.pid != pid) or \
            not os.path.exists(f"{checkpoint}/commits"):
        return None
    cp = Checkpoint(checkpoint)
    read = {os.path.basename(p) for p, _ in cp.source_files().get(0, [])}
    committed = cp.committed_batches()
    return lease if landing <= read and committed and cp.offset_batches()[-1] == committed[-1] else None


@contextlib.contextmanager
def _dagster_ui(layout, tmp_path):
    """dagster-webserver on a free loopback port: the instance config scripts/ui installs, runs launched directly."""
    home = tmp_path / "dagster"
    home.mkdir()
    with open(os.path.join(ROOT, "orchestration", "dagster.yaml")) as handle:
        instance = yaml.safe_load(handle)
    instance["run_coordinator"] = {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\ntrigger_interval = "2 seconds"\nshuffle_partitions = 4\n')
    env = {**os.environ, "DAGSTER_HOME": str(home), "STATEOPS_HOME": layout.home, "STATEOPS_CONFIG": str(config),
           "STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS": "0", "STATEOPS_RECOVERY_VERIFY_BATCHES": "1",
           "STATEOPS_RECOVERY_VERIFY_TIMEOUT_SECONDS": str(DEADLINE), "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0",
           "STATEOPS_LEASE_HEARTBEAT_SECONDS": "1", "STATEOPS_LEASE_TIMEOUT_SECONDS": "10"}
    port = _free_port()
    log = open(tmp_path / "webserver.log", "w")
    procs = [subprocess.Popen([f"{BIN}/dagster-webserver", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)]
    client = None
    try:
        def ready():
            assert all(p.poll() is None for p in procs), "the webserver exited (see its log)"
            try:
                client = DagsterGraphQLClient("127.0.0.1", port_number=port)
                entries = client._execute(LOCATIONS)["workspaceOrError"]["locationEntries"]
            except Exception:  # noqa: BLE001 (not listening yet)
                return None
            loaded = [e for e in entries if e["loadStatus"] == "LOADED"]
            assert all(e["locationOrLoadError"]["__typename"] == "RepositoryLocation" for e in loaded), entries
            return client if entries and len(loaded) == len(entries) else None

        client = _wait("the webserver", ready, every=1)
        yield {"client": client, "env": env, "home": str(home), "logs": tmp_path}
    finally:
        subprocess.run([f"{BIN}/stateops", "jobs", "stop", JOB, "--wait", "120"], env=env, cwd=ROOT,
                       capture_output=True, timeout=300)
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_state_recovery_through_graphql_terminates_the_holding_run(layout, tmp_path):
    with _dagster_ui(layout, tmp_path) as dagster_ui:
        _recover_through_graphql(layout, dagster_ui)


def _recover_through_graphql(layout, dagster_ui):
    client = dagster_ui["client"]
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    _burst(layout, 0, 4)
    holder = client.submit_job_execution(f"{JOB}_job", run_config={"ops": {spec.sink_table: {"config": {
        "mode": "continuous"}}}})
    lease = _wait("the Dagster run to hold the lease and consume its input", lambda: _consumed(layout, run_id=holder))
    assert lease.dagster_run_id == holder

    runbook = client.submit_job_execution("state_recovery", run_config={"ops": {"recover": {"config": {
        "job": JOB, "mode": "adjust", "watermark_delay": "20 minutes", "reason": "late data", "confirm": JOB,
        "dry_run": False}}}})
    _wait("the holder's run to end", lambda: client.get_run_status(holder) in FINISHED)
    _burst(layout, 1, 3)  # input for the restarted query
    status = _wait("the runbook's run to end", lambda: (lambda s: s if s in FINISHED else None)(
        client.get_run_status(runbook)), every=2)
    assert status == DagsterRunStatus.SUCCESS, open(dagster_ui["logs"] / "webserver.log").read()[-3000:]
    assert client.get_run_status(holder) == DagsterRunStatus.CANCELED, "terminated through the instance"

    (directory,) = [os.path.join(spec.archive_path(layout), d) for d in os.listdir(spec.archive_path(layout))]
    runbook_id = os.path.basename(directory)
    journal = read_entries(directory)
    done = {e["step"]: e["details"] for e in journal if e["phase"] == "done"}
    assert done["stop"]["how"] == "terminated after the stop timeout"
    assert done["stop"]["previous"]["dagster_run_id"] == holder
    assert done["finish"]["outcome"] == "succeeded"
    assert not archive.verify(spec.archive_path(layout), runbook_id), "the archive verifies"
    assert overrides.in_force(layout, JOB)["watermark_delay"].value == "20 minutes"
    assert maintenance.current(layout, JOB) is None

    restart = done["restart"]
    _wait("the restarted query to consume the new input", lambda: _consumed(layout, pid=restart["pid"]))
    switch = restart["latest_committed_batch"] + 1
    batches = oracle.typed_batches(layout.landing("events"), "events", checkpoint)
    assert switch < len(batches), "the restarted query ran new batches"
    expected = oracle.user_activity(batches, oracle.delays_switching(len(batches), 10 * MINUTE, 20 * MINUTE, switch))
    rows = table_rows(layout.table(JOB), COLUMNS)
    assert len(rows) == len({r[:3] for r in rows}) and set(rows) == expected
