"""Every runbook mode against a long-running query in another process, with new input landing: each runbook
stops the query, archives, adjusts, restarts it long-running in a process of its own (as it ran), and
verifies; afterwards the sink table equals the batch oracle.

One job lineage, seven runbooks in turn: adjust (10 -> 20 minutes; the oracle switches delay at the first
batch after the restart; the running query does not stop in time and is terminated, the last resort),
repartition (4 -> 6 state partitions: the state reader sees 6), rewind (from the CLI in a process of its
own; the first batch after the restart is N+1), rebuild (fresh checkpoint on 3 partitions: the state reader
sees 3; the table is the old rows MERGEd with the replay's), restore (the rebuild's archive: the old
checkpoint, settings and table version come back, and the query continues), switch-store to the in-memory store and
back to RocksDB (the same state rows each time, the query continues).

Oracles: tests/support/oracle.py over the batches as the checkpoint's logs say the query composed them, the state
reader (partition ids), the progress table (first batch), the archives' manifests."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from stateops.jobs.definition.environment import Environment, get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.recovery import recover
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import current_lease
from stateops.delta import read_table
from stateops.recovery import RecoveryRequest, RecoverySettings
from stateops.checkpoints import archive
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER
from tests.support import oracle
from tests.support.delta_rows import table_rows

from tests.support.runbook_env import runbook_env

pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
BIN = os.path.dirname(sys.executable)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
SLICE = timedelta(minutes=15)
BURST = 3  # files landed per burst; late rows (30 minutes behind) start from a burst's third file
COLUMNS = ["window_start", "window_end", "user_id", "events", "value_sum"]
MINUTE = 60_000
DEADLINE = 600  # a JVM start plus batches on a loaded 2-core machine took over 300 s


class Lander:
    """New input: bursts of files, each slice 15 minutes of event time after the previous one."""

    def __init__(self, layout):
        self.layout, self.slices = layout, 0

    def burst(self, files: int = BURST) -> None:
        generate(self.layout, GeneratorConfig(
            events=60 * files, files=files, users=25, start=(START + self.slices * SLICE).isoformat(),
            minutes_per_file=15, late_share=0.08, late_minutes=30, duplicate_share=0.05, seed=100 + self.slices))
        self.slices += files

    def after_stop(self, event) -> None:
        """on_event: land a burst once the runbook has stopped the query (the restart must process it)."""
        if event.step == "stop" and event.phase == "done":
            self.burst()


def _env(layout, tmp_path, monkeypatch):
    # on RocksDB: the chain repartitions, which Spark does on RocksDB state only (and switches to memory and back)
    return runbook_env(layout, tmp_path, monkeypatch, JOB, verify_batches=2, verify_timeout=DEADLINE,
                       stop_timeout=DEADLINE, state_store="rocksdb")


def _consumed(layout, pid: int | None = None):
    """Wait until a live run (`pid`, if given) holds the lease and has committed every landed file."""
    checkpoint = get_job(JOB).checkpoint_path(layout)
    landing = {n for n in os.listdir(layout.landing("events")) if not n.startswith((".", "_"))}
    deadline = time.monotonic() + DEADLINE
    while True:
        assert time.monotonic() < deadline, "the running query did not consume its input"
        lease = current_lease(layout, JOB)
        if lease is not None and (pid is None or lease.pid == pid) and os.path.exists(f"{checkpoint}/commits"):
            cp = Checkpoint(checkpoint)
            read = {os.path.basename(p) for p, _ in cp.source_files().get(0, [])}
            committed = cp.committed_batches()
            if landing <= read and committed and cp.offset_batches()[-1] == committed[-1]:
                return lease
        time.sleep(0.3)


def _expected(checkpoint: str, layout, delays) -> set[tuple]:
    batches = oracle.typed_batches(layout.landing("events"), "events", checkpoint)
    return oracle.user_activity(batches, delays(len(batches)))


def _table(layout) -> list[tuple]:
    rows = table_rows(layout.table(JOB), COLUMNS)
    assert len(rows) == len({r[:3] for r in rows}), "a window is in the table twice"
    return rows


def _restart(report) -> dict:
    (done,) = [e for e in report.steps if e["step"] == "restart" and e["phase"] == "done"]
    return done["details"]


def _first_batch(layout, run_pid: int) -> int:
    lease = _consumed(layout, run_pid)
    rows = read_table(layout.ops_table("progress"), filters=[("stateops_run_id", "=", lease.run_id)]).to_pylist()
    return min(r["batch_id"] for r in rows if r["query_name"] == JOB)


def _state_partitions(spark, checkpoint: str) -> set[int]:
    return {r.partition_id for op in (0, 1) for r in spark.read.format("statestore").option("path", checkpoint)
            .option("operatorId", op).load().select("partition_id").distinct().collect()}


def _run(layout, spark, lander, recovery=None, terminate=None, **request) -> object:
    environment = Environment.from_env(layout=layout)
    if recovery is not None:  # the runbook's settings for this run only
        environment = replace(environment, settings=replace(environment.settings, recovery=recovery))
    report = recover(environment, RecoveryRequest(job=JOB, confirm=JOB, dry_run=False, reason="e2e", **request),
                     spark=spark, on_event=lander.after_stop, terminate=terminate)
    assert report.outcome == "succeeded", (report.error, report.verification)
    assert not archive.verify(get_job(JOB).archive_path(layout), report.runbook_id), "the archive verifies"
    return report


def test_every_mode_against_a_long_running_query(spark, layout, tmp_path, monkeypatch):
    env = _env(layout, tmp_path, monkeypatch)
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    lander = Lander(layout)
    lander.burst(4)
    log = open(tmp_path / "first-run.log", "w")
    first = subprocess.Popen([f"{BIN}/stateops", "jobs", "run", JOB, "--mode", "continuous"], env=env, cwd=ROOT,
                             start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    pids = [first.pid]
    try:
        _consumed(layout, first.pid)

        # adjust: 10 -> 20 minutes; the restarted process runs the new delay from its first batch on. The stop
        # times out at once here, so the runbook terminates the holder (SIGKILL, mid-batch or not), the last
        # resort an orchestrator takes: checkpoint and sink must stay consistent (the oracle below).
        terminated = []

        def terminate(lease) -> bool:
            terminated.append(lease.pid)
            os.killpg(lease.pid, signal.SIGKILL)
            return True

        report = _run(layout, spark, lander, mode="adjust", watermark_delay="20 minutes", terminate=terminate,
                      recovery=replace(RecoverySettings.from_env(), stop_timeout_seconds=0))
        assert terminated == [first.pid] and first.wait(timeout=DEADLINE) == -signal.SIGKILL
        (stopped,) = [e["details"] for e in report.steps if e["step"] == "stop" and e["phase"] == "done"]
        assert stopped["how"] == "terminated after the stop timeout"
        restart = _restart(report)
        pids.append(restart["pid"])
        switch = restart["latest_committed_batch"] + 1

        def delays(count: int) -> list[int]:
            return oracle.delays_switching(count, 10 * MINUTE, 20 * MINUTE, switch)

        _consumed(layout, restart["pid"])
        got = set(_table(layout))
        assert got == _expected(checkpoint, layout, delays)
        assert got != _expected(checkpoint, layout, lambda n: [10 * MINUTE] * n), "the new delay made a difference"

        # repartition: 4 -> 6 state partitions, offline; the state reader sees 6, state-metadata still 4
        report = _run(layout, spark, lander, mode="repartition", shuffle_partitions=6)
        pids.append(_restart(report)["pid"])
        _consumed(layout, _restart(report)["pid"])
        assert _state_partitions(spark, checkpoint) == set(range(6))
        (kept,) = [e["details"]["audit"] for e in report.steps if e["step"] == "repartition" and e["phase"] == "done"]
        before = report.audit_before
        assert [op["rows_total"] for op in kept["operators"]] == [op["rows_total"] for op in before["operators"]]
        assert set(_table(layout)) == _expected(checkpoint, layout, delays)

        # rewind, from the CLI in a process of its own: batch N+1 is the first to run again
        lander.burst()
        _consumed(layout, _restart(report)["pid"])
        to_batch = Checkpoint(checkpoint).latest_committed_batch() - 3
        done = subprocess.run([f"{BIN}/stateops", "recover", "run", JOB, "--mode", "rewind", "--to-batch",
                               str(to_batch), "--confirm", JOB, "--reason", "replay", "--json"],
                              env={**os.environ, "STATEOPS_HOME": layout.home}, cwd=ROOT, capture_output=True,
                              text=True, timeout=2 * DEADLINE)
        assert done.returncode == 0, done.stderr[-3000:]
        cli_report = json.loads(done.stdout)
        assert cli_report["outcome"] == "succeeded"
        (restart,) = [e["details"] for e in cli_report["steps"] if e["step"] == "restart" and e["phase"] == "done"]
        pids.append(restart["pid"])
        assert _first_batch(layout, restart["pid"]) == to_batch + 1
        assert set(_table(layout)) == _expected(checkpoint, layout, delays)

        # rebuild on 3 partitions: a fresh checkpoint replays every retained file at 20 minutes; the table
        # keeps the old rows the replay does not emit and MERGEs the replayed ones
        report = _run(layout, spark, lander, mode="rebuild", shuffle_partitions=3)
        rebuilt = report.runbook_id
        pids.append(_restart(report)["pid"])
        _consumed(layout, _restart(report)["pid"])
        old = {r[:3]: r for r in _expected(os.path.join(report.archive_path, archive.CHECKPOINT), layout, delays)}
        new = {r[:3]: r for r in _expected(checkpoint, layout, lambda n: [20 * MINUTE] * n)}
        assert set(_table(layout)) == set({**old, **new}.values())
        assert _state_partitions(spark, checkpoint) == set(range(3))
        assert Checkpoint(checkpoint).committed_batches()[0] == 0, "a fresh checkpoint"

        # restore the rebuild's archive: the old checkpoint, its settings and its table version come back
        report = _run(layout, spark, lander, mode="restore", archive_id=rebuilt)
        pids.append(_restart(report)["pid"])
        _consumed(layout, _restart(report)["pid"])
        assert set(_table(layout)) == _expected(checkpoint, layout, delays)
        assert _state_partitions(spark, checkpoint) == set(range(6))

        # switch-store to the in-memory store and back, the long-running query stopped and started again each time:
        # the switched batch's state the same rows per operator, store and partition, the table as expected
        for to, provider in (("memory", HDFS_PROVIDER), ("rocksdb", ROCKSDB_PROVIDER)):
            report = _run(layout, spark, lander, mode="switch-store", to_store=to)
            pids.append(_restart(report)["pid"])
            _consumed(layout, _restart(report)["pid"])
            (switched,) = [e["details"] for e in report.steps if e["step"] == "switch_store" and e["phase"] == "done"]
            assert [op["rows_per_partition"] for op in switched["audit"]["operators"]] == [
                op["rows_per_partition"] for op in report.audit_before["operators"]]
            cp = Checkpoint(checkpoint)
            assert cp.state_provider(switched["switch"]["batch"]) == provider
            assert cp.state_provider(cp.offset_batches()[-1]) == provider
            assert set(_table(layout)) == _expected(checkpoint, layout, delays)
        assert _state_partitions(spark, checkpoint) == set(range(6))
    finally:
        subprocess.run([f"{BIN}/stateops", "jobs", "stop", JOB, "--wait", "120"], env=env, cwd=ROOT,
                       capture_output=True, timeout=300)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
