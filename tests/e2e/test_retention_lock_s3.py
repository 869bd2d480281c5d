"""Retention's lock per root with the control home in a bucket (STATEOPS_HOME=s3://bucket/prefix), on moto's S3
server run as its own process on loopback (tests/support/servers/moto.py, which makes conditional writes atomic as S3 does),
no S3 call mocked: a second hold of a root refused in one line naming the holder, other roots held alongside,
eight concurrent takers of one root of which exactly one wins, a killed run's lock taken over once stale by the
server's clock, a release that never deletes a lock another run took over, and the inventory seeing a runbook
alive on S3."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from stateops.layout import Layout
from stateops.recovery.journal import recovery_journal
from stateops.retention import inventory, lock
from stateops.runbooks import RunbookStopped

pytestmark = pytest.mark.e2e

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCKS = "stateops/ops/_retention/locks/"


def _locks(s3) -> dict[str, dict]:
    """Every lock object in the bucket and the holder it records (read with boto3, not the code under test)."""
    listed = s3.list_objects_v2(Bucket=s3.bucket, Prefix=LOCKS).get("Contents", [])
    return {item["Key"]: json.loads(s3.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read())
            for item in listed}


def _key(layout: Layout, root: str) -> str:
    return lock.lock_path(layout, root).split("/", 3)[3]


def test_a_second_hold_of_a_root_is_refused_naming_the_holder_and_other_roots_are_held(s3_bucket):
    s3 = s3_bucket
    layout = Layout(f"s3://{s3.bucket}/stateops")
    home, other = layout.home, f"s3://{s3.bucket}/elsewhere"
    with lock.hold(layout, (home,), run_id="run-first", actor="alice"):
        assert [(h["root"], h["run_id"], h["actor"]) for h in _locks(s3).values()] == [(home, "run-first", "alice")]
        with pytest.raises(lock.RetentionLockedError) as caught:
            with lock.hold(layout, (other, home), run_id="run-second", actor="bob"):
                pass
        message = str(caught.value)
        assert message.startswith(f"another retention run holds {home}: run run-first (pid {os.getpid()} on ")
        assert "by alice, since " in message and "\n" not in message
        assert message.endswith(f"a run that died or stopped releases its lock by itself once "
                                f"{lock.LOCK_TTL_SECONDS:g} s without renewal")
        assert list(_locks(s3)) == [_key(layout, home)], "the refused run released the root it had taken"
        with lock.hold(layout, (other,), run_id="run-third", actor="carol"):
            assert sorted(h["run_id"] for h in _locks(s3).values()) == ["run-first", "run-third"]
    assert _locks(s3) == {}
    with lock.hold(layout, (home, other), run_id="run-fourth", actor="dave"):
        assert len(_locks(s3)) == 2
    assert _locks(s3) == {}


def test_of_eight_concurrent_takers_of_a_root_exactly_one_wins(s3_bucket):
    s3 = s3_bucket
    layout = Layout(f"s3://{s3.bucket}/stateops")
    for attempt in range(5):
        start, release = threading.Barrier(8), threading.Event()
        won: list[str] = []
        refused: list[str] = []

        def take(run: str) -> None:
            start.wait()
            try:
                with lock.hold(layout, (layout.home,), run_id=run, actor="racer"):
                    won.append(run)
                    release.wait(30)
            except lock.RetentionLockedError:
                refused.append(run)

        threads = [threading.Thread(target=take, args=(f"run-{attempt}-{n}",)) for n in range(8)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(won) + len(refused) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()
        for thread in threads:
            thread.join(30)
        assert len(won) == 1 and len(refused) == 7, (won, refused)
        assert _locks(s3) == {}


_HOLDER = """
import os, signal, sys
from stateops.layout import Layout
from stateops.retention import lock
from stateops.storage import holders
holders.HOST = sys.argv[2]  # where the killed run ran
with lock.hold(Layout(sys.argv[1]), (sys.argv[1],), run_id="run-killed", actor="killed"):
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_run(layout: Layout, host: str) -> None:
    done = subprocess.run([sys.executable, "-c", _HOLDER, layout.home, host], cwd=ROOT_DIR, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -9, done.stderr


def test_a_killed_run_on_this_host_frees_its_lock_at_once(s3_bucket):
    """Retention applied again at once after a kill on the same host goes on (its record names a process of this
    host that is gone), as a flock would on local disk."""
    from stateops.storage.holders import HOST

    s3 = s3_bucket
    layout = Layout(f"s3://{s3.bucket}/stateops")
    _killed_run(layout, HOST)
    assert [h["run_id"] for h in _locks(s3).values()] == ["run-killed"], "a dead run leaves its lock object"
    with lock.hold(layout, (layout.home,), run_id="run-again", actor="me"):
        assert [h["run_id"] for h in _locks(s3).values()] == ["run-again"]
    assert _locks(s3) == {}


def test_a_killed_runs_lock_from_another_host_is_refused_while_fresh_and_taken_over_once_stale(s3_bucket,
                                                                                               monkeypatch):
    s3 = s3_bucket
    layout = Layout(f"s3://{s3.bucket}/stateops")
    _killed_run(layout, "another-host")
    assert [h["run_id"] for h in _locks(s3).values()] == ["run-killed"], "a dead run leaves its lock object"
    with pytest.raises(lock.RetentionLockedError, match="holds .*: run run-killed .* by killed"):
        with lock.hold(layout, (layout.home,), run_id="run-early", actor="me"):
            pass
    monkeypatch.setattr(lock, "LOCK_TTL_SECONDS", 2.0)
    deadline = time.monotonic() + 15
    while True:
        try:
            with lock.hold(layout, (layout.home,), run_id="run-after", actor="me"):
                assert [h["run_id"] for h in _locks(s3).values()] == ["run-after"]
                time.sleep(1.5)  # the heartbeat renews it (every 0.5 s here): still this run's, still live
                assert [h["run_id"] for h in _locks(s3).values()] == ["run-after"]
                with pytest.raises(lock.RetentionLockedError, match="run run-after"):
                    with lock.hold(layout, (layout.home,), run_id="run-other", actor="them"):
                        pass
            break
        except lock.RetentionLockedError as err:
            assert "run-killed" in str(err) and time.monotonic() < deadline, "the killed run's lock never went stale"
            time.sleep(0.5)
    assert _locks(s3) == {}


def test_a_release_never_deletes_a_lock_another_run_took_over(s3_bucket, monkeypatch):
    """The run is silent past the TTL (here: its lock replaced under it, as a taker of a stale lock does):
    its heartbeat learns it lost the lock, it stops before its next item in one line (the runbook engine's rule,
    told to its journal once), and its release leaves the new holder's object."""
    s3 = s3_bucket
    layout = Layout(f"s3://{s3.bucket}/stateops")
    monkeypatch.setattr(lock, "LOCK_TTL_SECONDS", 2.0)
    key = _key(layout, layout.home)
    taker = {"root": layout.home, "run_id": "run-taker", "pid": 1, "host": "elsewhere", "actor": "them",
             "since": "now", "token": "taker"}
    told = []
    with lock.hold(layout, (layout.home,), run_id="run-paused", actor="me",
                   on_lost=lambda item, line: told.append((item, line))) as held:
        held.ensure_held("r0001")  # held: nothing to say
        s3.put_object(Bucket=s3.bucket, Key=key, Body=json.dumps(taker).encode())
        time.sleep(1.2)  # two heartbeats (every 0.5 s): the first finds its ETag gone
        for _ in range(2):  # every write after the loss is refused, the journal told once
            with pytest.raises(RunbookStopped) as caught:
                held.ensure_held("r0002")
    assert str(caught.value).startswith("retention run run-paused stopped before its next write (r0002): its lock "
                                        f"s3://{s3.bucket}/stateops/ops/_retention/locks/")
    assert "\n" not in str(caught.value) and [item for item, _line in told] == ["r0002"]
    with lock.hold(layout, (f"s3://{s3.bucket}/elsewhere",), run_id="run-quick", actor="me"):
        s3.put_object(Bucket=s3.bucket, Key=_key(layout, f"s3://{s3.bucket}/elsewhere"),
                      Body=json.dumps({**taker, "run_id": "run-taker-2"}).encode())
        # released at once, before any heartbeat: the conditional delete alone leaves the taker's lock
    assert {h["run_id"] for h in _locks(s3).values()} == {"run-taker", "run-taker-2"}


def test_the_inventory_sees_a_runbook_alive_on_s3(s3_bucket, tmp_path):
    directory = f"s3://{s3_bucket.bucket}/stateops/ops/job/archives/rb"
    assert not inventory.runbook_running(directory)
    journal = recovery_journal(Layout(str(tmp_path / "local")), "job", "rb", directory, "me")
    with journal.held():
        assert inventory.runbook_running(directory)
        assert inventory.runbook_running(directory.replace("s3://", "s3a://", 1))
    assert not inventory.runbook_running(directory)
    assert not inventory.runbook_running("gs://bucket/stateops/ops/job/archives/rb")
