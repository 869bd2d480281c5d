"""The storage layer's contract (stateops.storage), the same tests on every backend: local disk and the S3 API
server (moto, its own process; no S3 call mocked). A new backend passes this suite as it is.

- a lock is exclusive under racing processes (every round exactly one holder, none lost);
- a dead holder's lock is freed: at once on its own host on both backends (the kernel drops a flock; an S3 lock whose
  record names a process of this host that is gone is taken over: a contract changed on purpose, so that a killed
  move, runbook or retention run goes on when run again at once); from another host, once `ttl` old by the
  server's clock on S3 (taken over), never before;
- no holder keeps a lock past its ttl without renewing it: a process frozen (SIGSTOP) while holding it is taken
  over once the lock is `ttl` old, and when it thaws its renewal is refused (it writes nothing more); a holder
  whose lock was taken over leaves the new holder's lock in place; a heartbeat keeps a live holder's lock;
- records: create-if-absent under racing processes has exactly one winner; a write replaces the whole record
  and changes its version; a conditional write lands only on the version it read; the entry log refuses an entry
  another writer wrote first;
- a stale lease holder's record write (its heartbeat's, resumed after a takeover) is refused, and one forced past
  the condition is ignored by the live holder (an older epoch), which keeps its lease;
- a copy of a tree is verified by its checksums: a changed byte is found, and a move removes the source only
  once its copy verifies.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from stateops.storage import LockBusy, LockLost, entry_log_at, filesystem, lock_at, records_at
from stateops.storage import copies

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RACERS, ROUNDS = 4, 15


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_lock_is_exclusive_under_racing_processes(storage_root, tmp_path):
    marker, go = tmp_path / "inside", tmp_path / "go"
    racers = [_python(f"""
        import os, sys, time
        from stateops.storage import lock_at
        lock = lock_at(sys.argv[1], ttl=30)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        wins = overlaps = 0
        for _ in range({ROUNDS}):
            with lock.held({{"pid": os.getpid()}}, wait=60):
                wins += 1
                try:
                    os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL)
                except FileExistsError:
                    overlaps += 1
                    continue
                time.sleep(0.002)
                os.unlink({str(marker)!r})
        print(wins, overlaps)
        """, f"{storage_root}/race.lock") for _ in range(RACERS)]
    go.touch()
    outcomes = [tuple(map(int, racer.communicate(timeout=300)[0].split() or (0, -1))) for racer in racers]
    assert [racer.returncode for racer in racers] == [0] * RACERS, [racer.stderr.read() for racer in racers]
    assert outcomes == [(ROUNDS, 0)] * RACERS, "every round: one holder at a time, and every racer got its turns"
    assert not lock_at(f"{storage_root}/race.lock", ttl=30).live(), "released"


def test_a_killed_holder_on_this_host_frees_its_lock_at_once(storage_root, tmp_path):
    """Run again on the same host, a killed move, runbook or retention run goes on at once, not after the lock's
    ttl; a pid reused by another process does not hold it either (the record has the pid's start time)."""
    from stateops.storage.holders import identity

    url = f"{storage_root}/killed.lock"
    held = tmp_path / "held"
    holder = _python(f"""
        import sys, time
        from stateops.storage import lock_at
        from stateops.storage.holders import identity
        lock_at(sys.argv[1], ttl=600).acquire(identity())
        open({str(held)!r}, "w").close()
        time.sleep(600)
        """, url)
    _wait_for(str(held))
    lock = lock_at(url, ttl=600)
    with pytest.raises(LockBusy):
        lock.acquire(identity())
    assert lock.live()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    assert not lock.live(), "its process is gone from this host"
    lock.acquire(identity())
    try:
        assert lock.holder()["pid"] == os.getpid() and lock.live()
    finally:
        lock.release()
    if storage_root.startswith("s3://"):  # on local disk the flock is the kernel's: no record is read
        reused = lock_at(f"{storage_root}/reused.lock", ttl=600)
        reused.acquire({**identity(), "pid_started": -1})  # this pid, but a process that started at another time
        try:
            assert not lock_at(f"{storage_root}/reused.lock", ttl=600).live(), "a reused pid is not the holder"
        finally:
            reused.release()


def test_a_dead_holders_lock_is_freed_once_stale_and_never_before(storage_root, tmp_path):
    ttl = 5.0  # longer than the kill takes on a loaded machine: the dead holder's lock is still fresh after it
    url = f"{storage_root}/dead.lock"
    held = tmp_path / "held"
    holder = _python(f"""
        import os, sys, time
        from stateops.storage import lock_at
        lock_at(sys.argv[1], ttl={ttl}).acquire({{"pid": os.getpid(), "host": "dying"}})
        open({str(held)!r}, "w").close()
        time.sleep(600)
        """, url)
    _wait_for(str(held))
    with pytest.raises(LockBusy) as busy:
        lock_at(url, ttl=ttl).acquire({"pid": os.getpid()})
    assert busy.value.holder["host"] == "dying" and busy.value.holder["pid"] == holder.pid
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    lock = lock_at(url, ttl=ttl)
    if storage_root.startswith("s3://"):  # dead, but its lock is not stale yet: refused, then taken over once stale
        with pytest.raises(LockBusy):
            lock.acquire({"pid": os.getpid(), "host": "too early"})
        lock.acquire({"pid": os.getpid(), "host": "next"}, wait=30)
    else:
        lock.acquire({"pid": os.getpid(), "host": "next"})  # the kernel released the dead holder's flock at once
    try:
        assert lock.holder()["host"] == "next" and lock.live()
    finally:
        lock.release()
    assert not lock.live()


def test_a_holder_whose_lock_was_taken_over_cannot_renew_and_leaves_the_new_lock(storage_root, tmp_path):
    ttl = 1.0
    url = f"{storage_root}/paused.lock"
    mine = lock_at(url, ttl=ttl)
    mine.acquire({"pid": os.getpid(), "host": "paused"})
    time.sleep(ttl + 1.5)  # paused past the ttl (by the server's clock, whole seconds)
    taker = _python("""
        import os, sys
        from stateops.storage import LockBusy, lock_at
        lock = lock_at(sys.argv[1], ttl=float(sys.argv[2]))
        try:
            lock.acquire({"pid": os.getpid(), "host": "taker"})
        except LockBusy:
            print("busy")
        else:
            print("taken")  # and exits without releasing: its lock stays
        """, url, str(ttl))
    out, err = taker.communicate(timeout=120)
    assert taker.returncode == 0, err
    assert out.split() == ["taken"], "a holder that stopped renewing (frozen, cut off) is taken over past the ttl"
    with pytest.raises(LockLost):
        mine.renew()
    mine.release()
    assert lock_at(url, ttl=ttl).holder()["host"] == "taker", "the release left the new holder's lock"


def test_a_frozen_holder_is_taken_over_past_the_ttl_and_refused_when_it_thaws(storage_root, tmp_path):
    ttl = 2.0
    url, held, go = f"{storage_root}/frozen.lock", tmp_path / "held", tmp_path / "go"
    holder = _python(f"""
        import os, sys, time
        from stateops.storage import LockLost, lock_at
        lock = lock_at(sys.argv[1], ttl={ttl})
        lock.acquire({{"pid": os.getpid(), "host": "frozen"}})
        open({str(held)!r}, "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        try:
            lock.renew()  # what a critical section does before its write
        except LockLost:
            print("lost")
        else:
            print("renewed")
        lock.release()
        """, url)
    _wait_for(str(held))
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        taker = lock_at(url, ttl=ttl)
        started = time.monotonic()
        taker.acquire({"pid": os.getpid(), "host": "taker"}, wait=60)
        waited = time.monotonic() - started
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    go.touch()
    out, err = holder.communicate(timeout=60)
    try:
        assert out.split() == ["lost"], err
        assert waited < ttl + 5, f"taken over {waited:.1f} s after the holder froze (ttl {ttl:g} s)"
        assert taker.holder()["host"] == "taker" and taker.live(), "the thawed holder's release left the new lock"
        taker.renew()
    finally:
        taker.release()


def test_a_heartbeat_keeps_a_live_holders_lock_past_the_ttl(storage_root):
    ttl = 1.0
    url = f"{storage_root}/beating.lock"
    mine = lock_at(url, ttl=ttl, heartbeat=True)
    mine.acquire({"pid": os.getpid(), "host": "beating"})
    try:
        time.sleep(3 * ttl)
        with pytest.raises(LockBusy):
            lock_at(url, ttl=ttl).acquire({"pid": os.getpid(), "host": "taker"}, wait=ttl)
        mine.renew()
    finally:
        mine.release()


def test_create_if_absent_has_exactly_one_winner_under_racing_processes(storage_root, tmp_path):
    go = tmp_path / "go"
    racers = [_python(f"""
        import os, sys, time
        from stateops.storage import records_at
        records = records_at(sys.argv[1])
        while not os.path.exists({str(go)!r}):
            time.sleep(0.002)
        print(records.create("winner", {{"pid": os.getpid()}}))
        """, f"{storage_root}/records") for _ in range(6)]
    go.touch()
    said = {racer.pid: racer.communicate(timeout=120)[0].strip() for racer in racers}
    assert sorted(said.values()) == ["False"] * 5 + ["True"], said
    records = records_at(f"{storage_root}/records")
    (winner,) = [pid for pid, answer in said.items() if answer == "True"]
    assert records.read("winner") == {"pid": winner}


def test_records_are_replaced_whole_with_a_new_version_and_entries_are_never_overwritten(storage_root):
    records = records_at(f"{storage_root}/records")
    assert records.read_versioned("r") == (None, None)
    records.write("r", {"a": 1, "b": [1, 2]})
    first, version = records.read_versioned("r")
    records.write("r", {"a": 2})
    assert first == {"a": 1, "b": [1, 2]} and records.read_versioned("r")[0] == {"a": 2}
    assert records.read_versioned("r")[1] != version
    records.remove("r")
    records.remove("r")
    assert records.read("r") is None
    log = entry_log_at(f"{storage_root}/runbook", "journal")
    assert log.append(0, json.dumps({"step": "stop"})) and log.append(1, json.dumps({"step": "archive"}))
    assert not log.append(1, json.dumps({"step": "other writer"})), "entry 1 exists: refused"
    assert [e["step"] for e in log.read()] == ["stop", "archive"]


def test_a_conditional_write_lands_only_on_the_version_it_read(storage_root):
    records = records_at(f"{storage_root}/conditional")
    assert records.write_if("r", {"n": 1}, None), "absent, as read: created"
    assert not records.write_if("r", {"n": 0}, None), "no longer absent: refused"
    _, read = records.read_versioned("r")
    records.write("r", {"n": 2})  # another writer, after this one read
    assert not records.write_if("r", {"n": 3}, read) and records.read("r") == {"n": 2}, "refused, nothing written"
    _, now = records.read_versioned("r")
    assert records.write_if("r", {"n": 3}, now) and records.read("r") == {"n": 3}


def test_a_stale_holders_record_write_is_refused_or_ignored_and_the_live_holder_keeps_its_lease(storage_root):
    """A holder frozen in its heartbeat between reading its record and writing it, thawed after another run took
    the lease over: its conditional write is refused (the version it read is gone), and where a write lands anyway
    (forced here: on local disk the race between the check and the rename), the taker ignores a record of an older
    epoch, writes its own over it and keeps the lease; the stale holder finds it lost."""
    from dataclasses import replace

    from stateops.control import LeaseLostError, acquire
    from stateops.control.fence import lease as leases
    from stateops.control.settings import ControlSettings
    from stateops.control.store import ControlStore
    from stateops.layout import Layout

    layout, job = Layout.of(storage_root), "job"
    settings = ControlSettings(heartbeat_seconds=3600, lease_timeout_seconds=10800)  # beats only when asked to
    store = ControlStore(layout, job)
    stale = acquire(layout, job, run_id="stale", settings=settings)
    record, version = leases.read_versioned(store)  # what its heartbeat read before it froze
    with store.critical():  # frozen long enough: its lease looks stale to the next run
        store.write(leases.RECORD, replace(record, heartbeat="2000-01-01T00:00:00+00:00").to_dict())
    live = acquire(layout, job, run_id="live", settings=settings)
    assert live.lease.epoch == stale.lease.epoch + 1
    assert not store.write_if(leases.RECORD, replace(record, heartbeat=record.heartbeat).to_dict(), version), \
        "the stale holder's write over the version it read is refused"
    store.write(leases.RECORD, record.to_dict())  # a late write that landed anyway
    live.ensure_held()  # an older epoch than its own: still its lease
    assert live.heartbeat() and leases.read(store).lease_id == live.lease.lease_id, "written over"
    with pytest.raises(LeaseLostError, match="lost its lease"):
        stale.ensure_held()
    live.release()
    stale.release()
    assert leases.read(store) is None and leases.newest_epoch(store) == live.lease.epoch, "the epoch stays"


def test_a_copy_is_verified_by_its_checksums_and_a_move_removes_the_source_only_after(storage_root):
    fs, base = filesystem(f"{storage_root}/tree")
    files = {"offsets/0": b"v1\n{}", "state/0/1/1.changelog": os.urandom(3000), ".hidden.crc": b"crc"}
    for name, data in files.items():
        fs.makedirs(os.path.dirname(f"{base}/{name}"), exist_ok=True)
        fs.pipe(f"{base}/{name}", data)
    entries = copies.copy_tree(f"{storage_root}/tree", f"{storage_root}/copy")
    assert {e.path: e.size for e in entries} == {name: len(data) for name, data in files.items()}
    listed = [e.__dict__ for e in entries]
    assert copies.verify_tree(f"{storage_root}/copy", listed) == []
    fs.pipe(f"{base.rsplit('/', 1)[0]}/copy/state/0/1/1.changelog", b"torn")  # a changed byte (and size)
    (problem,) = copies.verify_tree(f"{storage_root}/copy", listed)
    assert problem.startswith("state/0/1/1.changelog: 4 bytes")
    copies.move_tree(f"{storage_root}/tree", f"{storage_root}/moved")
    assert copies.verify_tree(f"{storage_root}/moved", listed) == [] and not fs.exists(base)
