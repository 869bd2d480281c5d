"""The control plane with its home in a bucket (STATEOPS_HOME=s3://bucket/prefix), on moto's S3 server run as
its own process on loopback (tests/support/servers/moto.py), no S3 call mocked: two processes racing for one job's lease
round after round (exactly one wins each), a crashed holder's lock object taken over after the TTL by the
server's clock while a live one is not, a paused holder whose lock was taken over writing nothing and never
deleting the new holder's lock, records in the local backend's JSON (a corrupt one refused alike), and the
stop request, maintenance lock and overrides round-tripping. Every object lands under the home's prefix."""
from __future__ import annotations

import json
import logging
import os
import statistics
import time

import pytest

from stateops.control import (ControlSettings, LeaseHeldError, MaintenanceLockedError, WatermarkBounds, acquire,
                              current_lease, job_status, maintenance, overrides, request_stop)
from stateops.control import store as control_store
from stateops.storage.holders import HOST
from stateops.control.store import ControlStorageError, ControlStore
from stateops.storage import s3 as s3_backend
from stateops.errors import StateOpsError
from stateops.layout import Layout
from tests.support.lease_race import racers

pytestmark = pytest.mark.e2e

JOB = "user_activity"
PREFIX = "stateops"
ROUNDS = 50
CRASHED = {"host": "crashed-host", "pid": 1, "thread": "MainThread", "token": "dead-holder", "since": "then"}


def _home(s3, monkeypatch) -> Layout:
    """The home in the test's bucket, as STATEOPS_HOME."""
    home = f"s3://{s3.bucket}/{PREFIX}"
    monkeypatch.setenv("STATEOPS_HOME", home)
    return Layout(home)


def _keys(s3) -> list[str]:
    """The objects in the bucket now."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _assert_under_prefix(s3) -> None:
    """Every object ever written to the bucket (every version, removed ones too) lies under the home's prefix."""
    pages = s3.get_paginator("list_object_versions").paginate(Bucket=s3.bucket)
    written = {item["Key"] for page in pages for item in page.get("Versions", []) + page.get("DeleteMarkers", [])}
    assert written and [key for key in written if not key.startswith(PREFIX + "/")] == [], sorted(written)


def _lock_key(store: ControlStore) -> str:
    return store.lock.object.key


def _lock_body(s3, store) -> dict:
    return json.loads(s3.get_object(Bucket=s3.bucket, Key=_lock_key(store))["Body"].read())


@pytest.mark.long  # the default run: create-once under racing processes on S3 (test_storage_contract), the
# lease race between processes on local disk (test_control)
def test_two_processes_racing_for_one_lease_exactly_one_wins_each_round(s3_versioned_bucket, monkeypatch, tmp_path):
    """The acceptance race: two processes, started once, race for the lease of one job 50 times; each round
    both try at the same instant, exactly one wins and the other is refused (LeaseHeldError) while the winner
    still holds it; then the winner releases. (How long a round takes is a benchmark figure:
    bench/bench_lease_race.py.)"""
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    def the_winner_holds_it(outcomes: list[str]) -> None:
        assert sorted(outcomes) == ["refused", "won"], f"round {number}: {outcomes}"
        assert current_lease(layout, JOB).run_id == f"racer-{outcomes.index('won') + 1}-{number}"

    with racers(JOB, tmp_path) as racing:
        for number in range(ROUNDS):
            racing.race(number, between=the_winner_holds_it)
            assert current_lease(layout, JOB) is None, "the winner released"
    spreads = [r.spread_seconds for r in racing.rounds]
    wins = [r.outcomes.index("won") for r in racing.rounds]
    print(f"{ROUNDS} rounds: median {statistics.median(r.seconds for r in racing.rounds):.3f} s; wins "
          f"{wins.count(0)}/{wins.count(1)}; start spread median {statistics.median(spreads) * 1000:.2f} ms")
    assert statistics.median(spreads) < 0.02, "the two processes did not race (their tries were far apart)"
    assert [key for key in _keys(s3) if key.endswith(".lock") or "/.probe-" in key] == [], "no lock left behind"
    _assert_under_prefix(s3)


def test_a_crashed_holders_lock_is_taken_over_after_the_ttl_by_the_servers_clock(s3_versioned_bucket, monkeypatch,
                                                                                 caplog):
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    monkeypatch.setattr(control_store, "LOCK_TTL_SECONDS", 1.0)
    store = ControlStore(layout, JOB)
    s3.put_object(Bucket=s3.bucket, Key=_lock_key(store), Body=json.dumps(CRASHED).encode())
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=s3_backend.__name__):
        with store.critical():
            waited = time.monotonic() - started
            mine = _lock_body(s3, store)
            store.write("maintenance", {"job": JOB, "runbook_id": "rb", "actor": "t", "reason": "r", "since": "now"})
    assert waited >= 1.0, "taken over before the lock was older than the TTL"
    assert (mine["pid"], mine["host"]) == (os.getpid(), HOST) and mine["token"] != CRASHED["token"]
    assert "took over the control lock" in caplog.text and "crashed-host" in caplog.text
    assert store.read("maintenance")["runbook_id"] == "rb"
    assert _lock_key(store) not in _keys(s3), "released after the takeover"
    _assert_under_prefix(s3)


def test_a_live_lock_is_not_taken_over(s3_versioned_bucket, monkeypatch):
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    monkeypatch.setattr(control_store, "LOCK_WAIT_SECONDS", 1.0)
    store = ControlStore(layout, JOB)
    planted = s3.put_object(Bucket=s3.bucket, Key=_lock_key(store), Body=json.dumps(CRASHED).encode())["ETag"]
    with pytest.raises(StateOpsError) as err:
        maintenance.acquire(layout, JOB, runbook_id="rb", actor="t", reason="r")
    message = str(err.value)
    assert f"the control lock s3://{s3.bucket}/{PREFIX}/ops/{JOB}/control/.lock is held by pid 1" in message
    assert "crashed-host" in message and "Fix: retry" in message and "\n" not in message
    assert s3.head_object(Bucket=s3.bucket, Key=_lock_key(store))["ETag"] == planted, "the live lock stays"
    assert store.read("maintenance") is None
    _assert_under_prefix(s3)


def test_a_holder_whose_lock_was_taken_over_writes_nothing_and_leaves_the_new_lock(s3_versioned_bucket, monkeypatch):
    """A holder paused past the TTL inside its critical section: meanwhile another took the lock over. Its
    write is refused (the renewal, conditional on its own ETag, fails) and its release, conditional too,
    leaves the new holder's lock in place."""
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    store = ControlStore(layout, JOB)
    with pytest.raises(ControlStorageError, match="taken over while this process held it"):
        with store.critical():
            s3.put_object(Bucket=s3.bucket, Key=_lock_key(store), Body=json.dumps(CRASHED).encode())  # the taker
            store.write("maintenance", {"job": JOB, "runbook_id": "rb", "actor": "t", "reason": "r", "since": "x"})
    assert store.read("maintenance") is None
    assert _lock_body(s3, store) == CRASHED, "the release did not delete the new holder's lock"
    _assert_under_prefix(s3)


def test_records_are_the_local_backends_json_and_a_corrupt_one_is_refused_alike(s3_versioned_bucket, monkeypatch,
                                                                                tmp_path):
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    record = {"job": JOB, "runbook_id": "rb", "actor": "t", "reason": "r", "since": "now"}
    on_disk = ControlStore(Layout(str(tmp_path)), JOB)
    for store in (ControlStore(layout, JOB), on_disk):
        with store.critical():
            store.write("maintenance", record)
    body = s3.get_object(Bucket=s3.bucket, Key=f"{PREFIX}/ops/{JOB}/control/maintenance.json")["Body"].read()
    with open(on_disk.records.where("maintenance"), "rb") as handle:
        assert body == handle.read()
    s3.put_object(Bucket=s3.bucket, Key=f"{PREFIX}/ops/{JOB}/control/lease.json", Body=b'{"lease_id": ')
    with pytest.raises(StateOpsError) as err:
        current_lease(layout, JOB)
    assert str(err.value).startswith(f"s3://{s3.bucket}/{PREFIX}/ops/{JOB}/control/lease.json: not a valid "
                                     "control record (") and "Fix: inspect it" in str(err.value)
    _assert_under_prefix(s3)


def test_stop_request_maintenance_lock_and_overrides_round_trip(s3_versioned_bucket, monkeypatch):
    s3 = s3_versioned_bucket
    layout = _home(s3, monkeypatch)
    settings = ControlSettings.from_env()
    held = acquire(layout, JOB, run_id="run-1", settings=settings)
    try:
        request = request_stop(layout, JOB, actor="operator", reason="deploy", grace_seconds=5, settings=settings)
        assert held.stop_request() == request and request.lease_id == held.lease.lease_id
        status = job_status(layout, JOB, layout.checkpoint(JOB), settings)
        assert (status["state"], status["lease"]["run_id"], status["stop_request"]["reason"]) == \
            ("running", "run-1", "deploy")
    finally:
        held.release()
    assert current_lease(layout, JOB) is None and ControlStore(layout, JOB).read("stop") is None

    lock = maintenance.acquire(layout, JOB, runbook_id="rb-1", actor="operator", reason="rebuild")
    assert maintenance.current(layout, JOB) == lock
    with pytest.raises(MaintenanceLockedError):
        acquire(layout, JOB, run_id="run-2", settings=settings)
    with acquire(layout, JOB, run_id="run-3", runbook_id="rb-1", settings=settings) as by_runbook:
        assert current_lease(layout, JOB).lease_id == by_runbook.lease.lease_id
        with pytest.raises(LeaseHeldError):
            acquire(layout, JOB, run_id="run-4", runbook_id="rb-1", settings=settings)
    assert maintenance.release(layout, JOB, runbook_id="rb-1", actor="operator") == lock
    assert maintenance.current(layout, JOB) is None

    bounds = WatermarkBounds("5 minutes", "2 hours")
    overrides.set_override(layout, JOB, overrides.WATERMARK_DELAY, "20 minutes", bounds=bounds, reason="late data",
                           actor="operator")
    assert overrides.in_force(layout, JOB)[overrides.WATERMARK_DELAY].value == "20 minutes"
    cleared = overrides.clear_override(layout, JOB, overrides.WATERMARK_DELAY, reason="back", actor="operator")
    assert cleared.previous == "20 minutes" and overrides.in_force(layout, JOB) == {}
    keys = _keys(s3)
    assert not [key for key in keys if key.endswith(".lock")], "every control lock was released"
    assert any(key.startswith(f"{PREFIX}/ops/tables/actions/") for key in keys), "journaled in the bucket"
    _assert_under_prefix(s3)
