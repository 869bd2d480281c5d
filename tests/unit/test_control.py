"""The control plane without a JVM, on real files, real processes and real Delta tables (delta-rs):
lease taking (atomic across processes), staleness (dead pid, reused pid, silent heartbeat), takeover
journaled, heartbeat and fencing, stop requests, the maintenance lock, overrides with history, refusal of
storages without atomic locks (S3, with conditional writes, accepted: tests/e2e/test_control_s3.py)."""
from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from stateops import actions
from stateops.control import (ControlSettings, LeaseHeldError, LeaseLostError, MaintenanceLockedError,
                              UnsupportedStorageError, WatermarkBounds, acquire, current_lease, job_status,
                              maintenance, overrides, request_stop, start_blocker, wait_released)
from stateops.storage.holders import HOST, start_ticks
from stateops.control.fence.writes import not_create_once
from stateops.control.store import ControlStore
from stateops.errors import ConfigError, StateOpsError
from stateops.retention import lock as retention_lock
from stateops.layout import Layout

pytestmark = pytest.mark.unit

JOB = "user_activity"
FAST = ControlSettings(heartbeat_seconds=0.1, lease_timeout_seconds=5)
BOUNDS = WatermarkBounds("5 minutes", "2 hours")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _write_lease(layout: Layout, **fields) -> None:
    """A lease record as another holder would have left it: one that took the lease (the next epoch, written as a
    taker writes it) unless `epoch` is given."""
    now = datetime.now(timezone.utc).isoformat()
    store = ControlStore(layout, JOB)
    with store.critical():
        taken = "epoch" not in fields
        epoch = fields.pop("epoch", None) or (store.read("epoch") or {"epoch": 0})["epoch"] + 1
        record = {"lease_id": "previous", "job": JOB, "run_id": "old-run", "dagster_run_id": None, "runbook_id": None,
                  "pid": os.getpid(), "pid_started": start_ticks(os.getpid()), "host": HOST, "started": now,
                  "heartbeat": now, "epoch": epoch, **fields}
        if taken:
            store.write("epoch", {"epoch": epoch, "lease_id": record["lease_id"], "at": now})
        store.write("lease", record)


def test_lease_is_exclusive_and_names_its_holder(layout):
    with acquire(layout, JOB, run_id="run-1", dagster_run_id="dagster-1", settings=FAST) as held:
        lease = current_lease(layout, JOB)
        assert (lease.run_id, lease.dagster_run_id, lease.pid, lease.host) == ("run-1", "dagster-1", os.getpid(), HOST)
        assert lease.pid_started == start_ticks(os.getpid()) and lease.lease_id == held.lease.lease_id
        with pytest.raises(LeaseHeldError) as err:
            acquire(layout, JOB, run_id="run-2", settings=FAST)
        message = str(err.value)
        for words in ("user_activity is already running", "run run-1", "Dagster run dagster-1",
                      f"pid {os.getpid()} on {HOST}", f"since {lease.started}", "stateops jobs stop"):
            assert words in message
        assert "\n" not in message
        assert current_lease(layout, JOB).run_id == "run-1", "a live lease is never taken over"
        # The heartbeat moves while held.
        first = current_lease(layout, JOB).heartbeat
        deadline = time.monotonic() + 30
        while current_lease(layout, JOB).heartbeat == first:
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)
    assert current_lease(layout, JOB) is None
    assert actions.read(layout, JOB) == [], "taking a free lease is not a takeover"


def _wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_concurrent_processes_never_hold_the_lease_together(layout, tmp_path):
    """Four processes take and release the lease in a tight loop, starting on a lease left by a dead
    process: none gets past the control lock while the test holds it; a holder marks its turn with a file
    only one may create: no two turns overlap; exactly one takeover of the stale lease is journaled."""
    _write_lease(layout, pid=999_999_999, pid_started=1)  # a pid that does not run here
    go, marker = tmp_path / "go", tmp_path / "turn"
    racers = [_python(f"""
        import os, time
        from stateops.control import ControlSettings, LeaseHeldError, acquire
        from stateops.layout import Layout
        settings = ControlSettings(heartbeat_seconds=5, lease_timeout_seconds=60)
        wins = overlaps = 0
        open({str(tmp_path)!r} + "/started-{i}", "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        open({str(tmp_path)!r} + "/trying-{i}", "w").close()  # from here on it only tries to take the lease
        for _ in range(150):
            try:
                held = acquire(Layout({layout.home!r}), {JOB!r}, run_id="racer-{i}", settings=settings)
            except LeaseHeldError:
                continue
            wins += 1
            try:
                os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                overlaps += 1
            else:
                time.sleep(0.002)
                os.unlink({str(marker)!r})
            held.release()
        print(wins, overlaps)
        """) for i in range(4)]
    _wait_for(lambda: all((tmp_path / f"started-{i}").exists() for i in range(4)), "the racers to start")
    with open(ControlStore(layout, JOB).lock.path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # while anyone holds the control lock, nobody takes the lease
        go.touch()
        _wait_for(lambda: all((tmp_path / f"trying-{i}").exists() for i in range(4)), "every racer to try")
        time.sleep(1)  # every racer is now blocked on the lock in acquire (or spinning on a refusal)
        assert current_lease(layout, JOB).run_id == "old-run" and not marker.exists()
        fcntl.flock(lock, fcntl.LOCK_UN)
    outcomes = [tuple(map(int, racer.communicate(timeout=300)[0].split())) for racer in racers]
    assert all(r.returncode == 0 for r in racers), [r.stderr for r in racers]
    assert sum(wins for wins, _ in outcomes) >= 4 and all(overlaps == 0 for _, overlaps in outcomes), outcomes
    (takeover,) = actions.read(layout, JOB, "lease_takeover")
    assert takeover["details"]["previous"]["run_id"] == "old-run"
    assert takeover["details"]["stale_reason"] == f"pid 999999999 on {HOST} is no longer running"
    assert current_lease(layout, JOB) is None


def test_a_holder_that_died_leaves_a_stale_lease(layout):
    died = _python(f"""
        import os
        from stateops.control import ControlSettings, acquire
        from stateops.layout import Layout
        acquire(Layout({layout.home!r}), {JOB!r}, run_id="crashed", dagster_run_id="d-1", settings=ControlSettings())
        os._exit(0)  # no finally, no release: as after kill -9
        """)
    assert died.wait(timeout=120) == 0, died.stderr.read()
    left = current_lease(layout, JOB)
    assert left.run_id == "crashed" and left.pid == died.pid
    assert f"pid {died.pid} on {HOST} is no longer running" == left.stale_reason(FAST)
    assert start_blocker(layout, JOB, settings=FAST) is None
    with acquire(layout, JOB, run_id="next", settings=FAST):
        (takeover,) = actions.read(layout, JOB, "lease_takeover")
        assert takeover["details"]["previous"]["pid"] == died.pid


@pytest.mark.parametrize("fields,stale", [
    ({"pid_started": 1}, True),                      # our pid, but another process's start time: pid reused
    ({}, False),                                     # this very process, fresh heartbeat: live
    ({"host": "elsewhere", "pid": 1}, False),        # another host, fresh heartbeat: live (pid not checkable)
    ({"host": "elsewhere", "pid": 1,
      "heartbeat": (datetime.now(timezone.utc) - timedelta(seconds=60)).isoformat()}, True),  # silent too long
])
def test_staleness(layout, fields, stale):
    _write_lease(layout, **fields)
    if stale:
        with acquire(layout, JOB, run_id="taker", settings=FAST):
            assert current_lease(layout, JOB).run_id == "taker"
        assert len(actions.read(layout, JOB, "lease_takeover")) == 1
    else:
        with pytest.raises(LeaseHeldError, match="run old-run"):
            acquire(layout, JOB, run_id="taker", settings=FAST)
        assert current_lease(layout, JOB).run_id == "old-run"


def test_a_holder_notices_it_lost_the_lease(layout):
    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    held.ensure_held()
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")  # taken over meanwhile
    deadline = time.monotonic() + 30
    while held.lost is None:  # the heartbeat thread notices
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(LeaseLostError, match="run mine lost its lease .*run theirs"):
        held.ensure_held()
    held.release()
    assert current_lease(layout, JOB).run_id == "theirs", "releasing a lost lease leaves the new holder's"


def test_a_run_whose_query_failed_asks_the_journal_whether_its_lease_was_taken_over(layout, caplog):
    """The record can name a lease again after a takeover (a holder frozen between its heartbeat's renewal and its
    write rewrites it when it thaws): a run whose query failed reads the actions journal too. A takeover of its
    lease there means lost, its writes stopped before it says so; a takeover of another lease does not."""
    held = acquire(layout, JOB, run_id="mine",
                   settings=ControlSettings(heartbeat_seconds=60, lease_timeout_seconds=300))
    stopped: list[str] = []
    held.when_lost(lambda: stopped.append("revoke"), at_once=True)
    actions.record(layout, JOB, "lease_takeover", "done", actor="test", run_id="earlier",
                   details={"previous": {**held.lease.to_dict(), "lease_id": "an-earlier-lease"}, "lease_id": "x"})
    held.ensure_not_taken_over()  # another lease's takeover: still held
    actions.record(layout, JOB, "lease_takeover", "done", actor="test", run_id="taker",
                   details={"previous": held.lease.to_dict(), "lease_id": "theirs"})
    held.ensure_held()  # the record still names this lease
    assert held.lost is None and stopped == []
    with caplog.at_level("WARNING"), pytest.raises(LeaseLostError, match="run mine lost its lease .*taken over by "
                                                                         "run taker at .*actions journal"):
        held.ensure_not_taken_over()
    assert stopped == ["revoke"]
    with pytest.raises(LeaseLostError, match="taken over by run taker"):
        held.ensure_held()
    held.release()
    assert any("lost its lease at" in r.getMessage() and "taken over by run taker" in r.getMessage()
               for r in caplog.records)


def test_an_idle_report_that_finds_the_lease_lost_silences_the_recorder_and_returns(layout, caplog):
    """The lease check before an idle report runs on Spark's listener thread under the recorder's lock, and it can be
    what finds the lease lost: the loss's at-once callbacks then silence the recorder on that same thread. It
    returns silenced, having recorded nothing, instead of waiting for its own lock (with a plain lock the run hung
    and never exited: a randomized fence trial on S3 with a skewed clock)."""
    from stateops import progress
    from stateops.jobs.runtime.listener import ProgressRecorder

    held = acquire(layout, JOB, run_id="mine",
                   settings=ControlSettings(heartbeat_seconds=60, lease_timeout_seconds=300))
    recorder = ProgressRecorder(layout, JOB, "mine", {JOB}, progress.FlushSettings(flush_seconds=3600),
                                guard=held.ensure_held)
    held.when_lost(recorder.silence, at_once=True)
    recorder.started("spark-run", JOB)
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")
    listener = threading.Thread(target=recorder.idle, args=("query-id", "spark-run", "2026-11-27T00:00:00.000Z"),
                                daemon=True)
    with caplog.at_level("WARNING"):
        listener.start()
        listener.join(20)
    assert not listener.is_alive(), "the idle report's thread waits for its own lock"
    assert held.lost is not None and recorder._silenced
    assert any("lost its lease at" in r.getMessage() for r in caplog.records)
    assert progress.idle_report(layout, JOB, "mine", JOB) is None, "an idle report recorded after the loss"
    recorder.close(write=False)
    held.release()


def test_a_heartbeat_that_cannot_reach_the_store_keeps_beating(layout, monkeypatch):
    """A store out of reach (the storage layer's failure, not an OSError) fails a beat, not the heartbeat thread: it
    beats on, and finds the takeover once the store answers again (a cut-off holder printed a thread's traceback)."""
    from stateops.errors import OperationFailed

    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    real, failures = held.heartbeat, []

    def cut_off():
        if len(failures) < 5:
            failures.append(1)
            raise OperationFailed("s3://bucket/home/ops/j/control/.lock: put_object failed (Could not connect)")
        return real()

    monkeypatch.setattr(held, "heartbeat", cut_off)
    deadline = time.monotonic() + 30
    while len(failures) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")
    while held.lost is None:  # the same thread, past its failed beats
        assert time.monotonic() < deadline and held._thread.is_alive()
        time.sleep(0.05)
    held.release()


def test_stop_request_targets_the_live_holder_only(layout):
    assert request_stop(layout, JOB, actor="ops", settings=FAST) is None, "nothing runs: nothing to stop"
    held = acquire(layout, JOB, run_id="r1", settings=FAST)
    assert held.stop_request() is None
    request = request_stop(layout, JOB, actor="ops", reason="deploy", grace_seconds=7, settings=FAST)
    assert (request.run_id, request.lease_id, request.grace_seconds) == ("r1", held.lease.lease_id, 7)
    assert held.stop_request() == request
    assert job_status(layout, JOB, "/nowhere", FAST)["stop_request"]["reason"] == "deploy"
    assert not wait_released(layout, JOB, request.lease_id, 0.3, settings=FAST)
    threading.Timer(0.5, held.release).start()
    assert wait_released(layout, JOB, request.lease_id, 60, settings=FAST)
    assert ControlStore(layout, JOB).read("stop") is None, "released with its stop request"
    (row,) = actions.read(layout, JOB, "stop_request")
    assert row["actor"] == "ops" and row["run_id"] == "r1" and row["details"]["reason"] == "deploy"
    # A request left for a holder that died does not stop the next run.
    dying = acquire(layout, JOB, run_id="r2", settings=FAST)
    request_stop(layout, JOB, actor="ops", settings=FAST)
    _write_lease(layout, **{**current_lease(layout, JOB).to_dict(), "pid": 999_999_999})  # as if it had died
    with acquire(layout, JOB, run_id="r3", settings=FAST) as next_run:
        assert next_run.stop_request() is None and ControlStore(layout, JOB).read("stop") is None
        dying.release()
        assert current_lease(layout, JOB).run_id == "r3"


def test_maintenance_lock_blocks_starts_but_its_runbook(layout):
    lock = maintenance.acquire(layout, JOB, runbook_id="rb-1", actor="alice", reason="rebuild state")
    assert maintenance.acquire(layout, JOB, runbook_id="rb-1", actor="alice", reason="again") == lock
    with pytest.raises(MaintenanceLockedError, match="locked by runbook rb-1 .alice, since .*: rebuild state"):
        maintenance.acquire(layout, JOB, runbook_id="rb-2", actor="bob", reason="other")
    with pytest.raises(MaintenanceLockedError) as err:
        acquire(layout, JOB, run_id="scheduled", settings=FAST)
    assert "user_activity is under maintenance" in str(err.value) and "--runbook-id rb-1" in str(err.value)
    assert isinstance(start_blocker(layout, JOB, settings=FAST), MaintenanceLockedError)
    assert start_blocker(layout, JOB, runbook_id="rb-1", settings=FAST) is None
    with acquire(layout, JOB, run_id="restart", runbook_id="rb-1", settings=FAST):
        assert current_lease(layout, JOB).runbook_id == "rb-1"
    with pytest.raises(StateOpsError, match="pass --runbook-id rb-1"):
        maintenance.release(layout, JOB, runbook_id="rb-2", actor="bob")
    assert maintenance.release(layout, JOB, runbook_id="rb-1", actor="alice") == lock
    assert maintenance.release(layout, JOB, runbook_id="rb-1", actor="alice") is None
    assert [(r["phase"], r["runbook_id"]) for r in actions.read(layout, JOB, "maintenance_lock")] == [
        ("acquired", "rb-1"), ("released", "rb-1")]
    with acquire(layout, JOB, run_id="after", settings=FAST):
        pass


@pytest.mark.parametrize("setting,value,words", [
    ("watermark_delay", "3 hours", "'3 hours' is outside user_activity's bounds [5 minutes, 2 hours]"),
    ("watermark_delay", "1 minute", "'1 minute' is outside user_activity's bounds [5 minutes, 2 hours]"),
    ("watermark_delay", "ten minutes", "'ten minutes' is not an interval"),
    ("shuffle_partitions", "0", "'0' is not a positive integer"),
    ("shuffle_partitions", "many", "'many' is not a positive integer"),
    ("trigger_interval", "1 second", "cannot be overridden"),
])
def test_overrides_are_validated_at_write(layout, setting, value, words):
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        overrides.set_override(layout, JOB, setting, value, bounds=BOUNDS, reason="x", actor="a")
    assert "Fix:" in str(err.value)
    assert overrides.history(layout, JOB) == []


def test_override_history_keeps_every_change(layout):
    with pytest.raises(ConfigError, match="reason: is required"):
        overrides.set_override(layout, JOB, "watermark_delay", "20 minutes", bounds=BOUNDS, reason=" ", actor="a")
    overrides.set_override(layout, JOB, "watermark_delay", "20 minutes", bounds=BOUNDS, reason="late data",
                           actor="alice", runbook_id="rb-7")
    overrides.set_override(layout, JOB, "watermark_delay", "45 minutes", bounds=BOUNDS, reason="later", actor="bob")
    overrides.set_override(layout, JOB, "shuffle_partitions", 8, bounds=BOUNDS, reason="rebuild", actor="bob")
    overrides.set_override(layout, "user_sessions", "shuffle_partitions", 2, bounds=BOUNDS, reason="o", actor="c")
    assert overrides.clear_override(layout, JOB, "watermark_delay", reason="back", actor="alice").previous == \
        "45 minutes"
    assert overrides.clear_override(layout, JOB, "watermark_delay", reason="again", actor="alice") is None
    history = overrides.history(layout, JOB)
    assert [(c.setting, c.previous, c.value, c.actor, c.reason, c.runbook_id) for c in history] == [
        ("watermark_delay", None, "20 minutes", "alice", "late data", "rb-7"),
        ("watermark_delay", "20 minutes", "45 minutes", "bob", "later", None),
        ("shuffle_partitions", None, "8", "bob", "rebuild", None),
        ("watermark_delay", "45 minutes", None, "alice", "back", None),
    ]
    assert {s: c.value for s, c in overrides.in_force(layout, JOB).items()} == {"shuffle_partitions": "8"}


def test_settings_from_env_are_validated(monkeypatch):
    monkeypatch.setenv("STATEOPS_LEASE_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ConfigError, match="STATEOPS_LEASE_TIMEOUT_SECONDS: 'soon' is not a number"):
        ControlSettings.from_env()
    monkeypatch.setenv("STATEOPS_LEASE_TIMEOUT_SECONDS", "15")
    with pytest.raises(ConfigError, match="less than 3 heartbeats"):
        ControlSettings.from_env()
    monkeypatch.setenv("STATEOPS_LEASE_HEARTBEAT_SECONDS", "2")
    assert ControlSettings.from_env() == ControlSettings(heartbeat_seconds=2, lease_timeout_seconds=15)


@pytest.mark.parametrize("home", ["gs://b/x", "memory://stateops", "abfs://container/x"])
def test_storages_without_atomic_locks_are_refused(home):
    with pytest.raises(UnsupportedStorageError) as err:
        acquire(Layout(home), JOB, run_id="r", settings=FAST)
    message = str(err.value)
    assert f"STATEOPS_HOME {home}" in message and "local path or POSIX shared storage" in message
    assert "or S3 (s3://, s3a://: conditional writes)" in message and "\n" not in message
    assert "Fix: point STATEOPS_HOME at one of those, or set STATEOPS_CONTROL_HOME to one" in message


@pytest.mark.parametrize("home", ["s3://bucket/stateops", "s3a://bucket/stateops"])
def test_an_s3_control_home_is_accepted(home):
    """S3 has conditional writes: its control records live in the bucket under the home (s3a:// read as s3://);
    tests/e2e/test_control_s3.py runs the control plane there. Building the store touches no server."""
    store = ControlStore(Layout(home), JOB)
    assert store.lock.url == f"s3://bucket/stateops/ops/{JOB}/control/.lock"
    assert store.records.where("lease") == f"{home}/ops/{JOB}/control/lease.json"


@pytest.mark.parametrize("home", ["gs://b/x", "memory://stateops"])
def test_retention_locks_need_a_local_or_s3_control_home(home):
    """Retention holds its per-root lock for a whole run: a flock on local or POSIX storage, a lock object with
    a heartbeat on S3 (tests/e2e/test_retention_lock_s3.py); other object stores are refused in one line."""
    with pytest.raises(UnsupportedStorageError) as err:
        retention_lock.lock_path(Layout(home), f"{home}/checkpoints")
    message = str(err.value)
    assert message.startswith(f"STATEOPS_HOME {home}: retention's lock per root needs a local path or POSIX shared "
                              "storage with working flock") and "\n" not in message
    assert "or S3 (s3://, s3a://: conditional writes)" in message


@pytest.mark.parametrize("home", ["s3://bucket/stateops", "s3a://bucket/stateops"])
def test_retention_locks_on_an_s3_control_home_are_objects_under_it(home):
    """One lock object per root in the control home's bucket (naming it touches no server)."""
    path = retention_lock.lock_path(Layout(home), "s3://bucket/stateops/checkpoints/")
    assert path == retention_lock.lock_path(Layout(home), "s3://bucket/stateops/checkpoints")
    assert path.startswith(f"{home}/ops/_retention/locks/") and path.endswith(".lock")


def test_a_holder_that_lost_its_lease_appends_no_progress_row(layout):
    """The progress buffer checks the lease before each append (a holder thawed after a takeover flushes what it
    buffered before it froze): once the record names another lease, nothing lands in the ops table, and rows
    added later are given up too (counted)."""
    from stateops import progress
    from stateops.delta import read_table

    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    buffer = progress.ProgressBuffer(layout, progress.FlushSettings(flush_seconds=3600, flush_rows=1000),
                                     guard=held.ensure_held)
    row = {"name": JOB, "id": "q", "runId": "r", "batchId": 0, "timestamp": "2026-11-27T00:00:00+00:00",
           "numInputRows": 1, "batchDuration": 1, "durationMs": {}, "stateOperators": [], "sources": []}
    buffer.add(progress.progress_row(row, JOB, "mine"))
    assert buffer.flush() and read_table(layout.ops_table("progress")).num_rows == 1, "held: the row lands"
    buffer.add(progress.progress_row({**row, "batchId": 1}, JOB, "mine"))
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")  # taken over meanwhile
    assert not buffer.flush()
    buffer.add(progress.progress_row({**row, "batchId": 2}, JOB, "mine"))
    buffer.close()
    held.release()
    assert read_table(layout.ops_table("progress")).num_rows == 1, "nothing appended after the takeover"
    assert buffer.failures == 2 and held.lost is not None


def test_a_holder_stops_its_writes_before_it_says_it_lost_the_lease(layout, caplog):
    """`at_once` callbacks (the runner's JVM revocation and progress silence) run on the finding thread before the
    loss is logged, so the logged `writes stopped at` time is after them; the others run afterwards."""
    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    order: list[str] = []
    held.when_lost(lambda: order.append("stop queries"))
    held.when_lost(lambda: (order.append("revoke"), time.sleep(0.3)), at_once=True)
    held.when_lost(lambda: 1 / 0, at_once=True)  # a failing one does not keep the others from running
    held.when_lost(lambda: order.append("silence"), at_once=True)
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")
    with caplog.at_level("WARNING"), pytest.raises(LeaseLostError):
        held.ensure_held()
    held.release()
    line = next(r.getMessage() for r in caplog.records if "lost its lease at" in r.getMessage())
    found, stopped = re.search(r"lost its lease at (\S+) .*writes stopped at (\S+),", line).groups()
    assert (datetime.fromisoformat(stopped) - datetime.fromisoformat(found)).total_seconds() >= 0.3, line
    assert order == ["revoke", "silence", "stop queries"]


def test_a_silenced_buffer_waits_a_bounded_time_for_an_append_under_way(layout):
    """A progress append under way when the lease is found lost ends before the run says it writes nothing more;
    one held past the bound (a store out of reach) is not waited for, and nothing is appended after it."""
    from stateops import progress

    buffer = progress.ProgressBuffer(layout, progress.FlushSettings(flush_seconds=3600, flush_rows=1000))
    buffer.add({"job": JOB, "batch_id": 0})
    holding = threading.Event()

    def append_under_way():
        with buffer._lock:
            holding.set()
            time.sleep(2)

    thread = threading.Thread(target=append_under_way)
    thread.start()
    holding.wait(10)
    started = time.monotonic()
    buffer.silence("lost", wait_seconds=0.2)
    assert time.monotonic() - started < 1.5, "not waited for past the bound"
    thread.join()
    assert not buffer.flush() and buffer.rows == [] and buffer.failures == 1, "the silenced rows are given up"
    buffer.close()


def test_a_batch_write_under_way_is_waited_for_and_a_later_batch_writes_nothing(layout):
    """The foreachBatch target a run's queries write through (stateops.control.fence.writes.Fenced): a run that found
    its lease lost waits for a batch write under way before it says it writes nothing more, up to a bound, and a
    batch after the loss writes nothing (the sink here is a plain function)."""
    from stateops.control.fence.writes import Fenced

    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    writing, release, written = threading.Event(), threading.Event(), []

    def sink(df, batch_id):
        writing.set()
        release.wait(10)
        written.append(batch_id)

    writer = Fenced(sink, held)
    thread = threading.Thread(target=writer, args=(None, 0))
    thread.start()
    writing.wait(10)
    assert not writer.settle(0.2), "a write under way past the bound is not waited for"
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    assert writer.settle(10) and written == [0] and time.monotonic() - started >= 0.25, "waited until it ended"
    thread.join()
    _write_lease(layout, lease_id="theirs", run_id="theirs", host="elsewhere")
    with pytest.raises(LeaseLostError):
        writer(None, 1)
    assert written == [0] and writer.settle(0.1)
    held.release()


def test_a_run_that_decided_to_stop_writes_the_batches_planned_until_then_and_no_later_one(layout):
    """The stop request's race at its cause (Fenced.stop_after): the batch planned when the run decided to stop (a
    stop request, its time limit) still writes; one the trigger started after that writes nothing and says so (its
    query ends; the batch stays planned for the next run), whatever the timing of the query's stop."""
    from stateops.control.fence.writes import Fenced, RunStopping

    held = acquire(layout, JOB, run_id="mine", settings=FAST)
    written = []
    writer = Fenced(lambda df, batch_id: written.append(batch_id), held)
    writer(None, 3)
    writer.stop_after(4)  # batch 4 planned (offsets/4) when the run decided to stop
    writer(None, 4)
    with pytest.raises(RunStopping, match="batch 5 was planned after the run decided to stop"):
        writer(None, 5)
    assert written == [3, 4] and writer.refused == 5
    held.release()


def test_a_run_cut_off_from_its_store_does_not_fail_again_waiting_for_its_last_progress_event(layout, monkeypatch,
                                                                                              caplog):
    """A run stopping because its store is out of reach waits for no progress event whose batch it cannot look up:
    the checkpoint's offsets could not be read (s3fs raises botocore's connection error as it is), and the run's
    exit must be the store's failure, one line, not a traceback on its way out (a randomized fence trial cut off
    from S3, its last trigger idle)."""
    from stateops import progress
    from stateops.jobs.runtime import listener
    from stateops.storage import paths

    class CutOff:
        def exists(self, path):
            raise ConnectionError(f"Could not connect to the endpoint URL: {path}")

    class IdleQuery:
        recentProgress = [{"id": "q", "batchId": 3, "numInputRows": 0}]

    monkeypatch.setattr(paths, "filesystem", lambda path: (CutOff(), path))  # the storage layer's every call
    recorder = listener.ProgressRecorder(layout, JOB, "mine", {JOB}, progress.FlushSettings(flush_seconds=3600))
    started = time.monotonic()
    with caplog.at_level("WARNING"):
        recorder.wait_for(IdleQuery(), "s3://bucket/home/checkpoints/j", timeout=30)
    assert time.monotonic() - started < 5, "waited for an event it could not know was due"
    assert any("could not read s3://bucket/home/checkpoints/j/offsets" in r.getMessage() for r in caplog.records)
    recorder.close(write=False)


def test_commit_points_off_local_disk_and_s3_are_said_not_to_be_create_once():
    """StateOps' create-once writers know local disk and S3 (through S3A); elsewhere Spark's and Delta's writers check,
    then rename, and the run says so in one line instead of falling back silently (issue 51)."""
    assert not_create_once(["/home/x/checkpoints/a", "file:///t/tables/a", "s3://b/p/checkpoints/a", "s3a://b/t"]) \
        is None
    line = not_create_once(["/home/x/checkpoints/a", "abfss://c@acct.dfs.core.windows.net/tables/a"])
    assert line.startswith("the commit points under abfss://c@acct.dfs.core.windows.net/tables/a cannot be created "
                           "once") and "\n" not in line
