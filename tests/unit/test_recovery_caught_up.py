"""When verification of a long-running restart may end before K batches: the pure verdict `caught_up` over
what the executor saw (the lease, the checkpoint's batches, the run's idle report, the unread input), the
`batches` check it feeds, and the idle record the run writes and the runbook reads (real files)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from stateops import progress
from stateops.recovery import verify

pytestmark = pytest.mark.unit

# A quiet stream: the restart began at batch 7, ran nothing, reported itself idle, every landed file is read.
QUIET = verify.Reading(running=True, start_batch=7, committed=7, planned=7, idle_at="2026-01-01T00:00:10.000Z",
                       idle_after=None, unread=())
IDLE = "2026-01-01T00:00:10.000Z"


@pytest.mark.parametrize("changes,why", [
    ({}, None),
    ({"committed": 9, "planned": 9, "idle_after": 9}, None),                      # a backlog read, then quiet
    ({"start_batch": None, "committed": None, "planned": None}, None),            # fresh checkpoint, no input
    ({"running": False}, "the restarted run does not hold the job's lease"),
    ({"idle_at": None}, "has not reported itself idle since the restart"),        # the previous run's checkpoint
    ({"committed": 8, "planned": 8}, "completed batch 8 after it last reported itself idle"),   # input flowing
    ({"committed": 9, "planned": 9, "idle_after": 8}, "completed batch 9 after it last reported"),
    ({"planned": 8}, "batch 8 is planned and not committed yet"),
    ({"unread": ("/h/landing/events/new.json",)}, "1 available inputs are not read yet, e.g. /h/landing/events/new"),
    ({"unread": None}, "the job's source cannot tell which input is available"),  # Kafka, for now
])
def test_caught_up_needs_a_live_run_idle_after_its_latest_batch_and_nothing_unread(changes, why):
    ok, detail = verify.caught_up(replace(QUIET, **changes))
    assert ok is (why is None), detail
    if why is None:
        assert detail.startswith("the restarted query is running and has read every available input (idle since "
                                 f"{IDLE}, "), detail
    else:
        assert why in detail


def _verification(progress, caught_up: bool, reading: str | None, timed_out: bool = False) -> dict:
    audit = {"operators": [{"operator_id": 0, "store_name": "default", "rows_total": 10, "num_partitions": 4}]}
    return verify.evaluate(error=None, progress=progress, batches_wanted=3, caught_up=caught_up,
                           start_watermark_ms=1_000, end_watermark_ms=1_000, delay_ms=1_000, single_watermark=True,
                           first_batch=None, audit_start=audit, audit_after=audit, expected_partitions=4,
                           duplicates=(0, []), timed_out=timed_out, reading=reading)


def _batches(result: dict) -> dict:
    (check,) = [c for c in result["checks"] if c["name"] == "batches"]
    return check


def test_a_quiet_restart_passes_on_its_reading_and_a_flowing_one_waits_for_k_batches():
    quiet = _verification([], *verify.caught_up(QUIET))
    assert quiet["ok"] and _batches(quiet)["detail"] == (
        "0 batches with input (wanted 3); the restarted query is running and has read every available input "
        f"(idle since {IDLE}, with no batch since the restart)")

    flowing = [{"batch_id": 8, "input_rows": 40, "event_time_max_ms": 900}]  # one batch in, more landing
    reading = replace(QUIET, committed=8, planned=9, unread=("/h/landing/events/f3.json",))
    waiting = _verification(flowing, *verify.caught_up(reading))
    assert not _batches(waiting)["ok"] and _batches(waiting)["detail"] == "1 batches with input (wanted 3)"

    three = flowing + [{"batch_id": b, "input_rows": 40, "event_time_max_ms": 900} for b in (9, 10)]
    assert _batches(_verification(three, *verify.caught_up(replace(reading, committed=10, planned=11))))["ok"]

    timed_out = _verification(flowing, *verify.caught_up(replace(reading, planned=8, unread=None)), timed_out=True)
    assert _batches(timed_out)["ok"] and _batches(timed_out)["detail"] == (
        "1 batches with input (wanted 3); no more input arrived within the verification timeout while the query "
        "kept running (the restarted query completed batch 8 after it last reported itself idle)")


def test_the_idle_record_belongs_to_one_run(layout):
    report = {"query_id": "q", "spark_run_id": "r", "idle_at": IDLE, "after_batch": 4}
    assert progress.idle_report(layout, "j", "run-1", "j") is None
    progress.record_idle(layout, "j", "run-1", {"j": report, "j__deadletter": {**report, "after_batch": None}})
    assert progress.idle_report(layout, "j", "run-1", "j") == report
    assert progress.idle_report(layout, "j", "run-1", "j__deadletter")["after_batch"] is None
    assert progress.idle_report(layout, "j", "run-2", "j") is None, "another run's report says nothing of run-2"
    assert progress.idle_report(layout, "other", "run-1", "j") is None
