"""explain-key on the jobs without a join (window, session, custom state) reads their input too.

A user whose only event lands far behind the watermark is dropped as late by each job: explain-key must
say `arrived_too_late` (not `never_arrived`, "not in the input"). The oracle (tests/support/oracle.py) decides,
independently of explain-key, that the row is late and that no output of any job holds the user.
"""
from __future__ import annotations


import pytest

from stateops.explain import explain_key

from stateops.jobs.definition.environment import get_job
from stateops.jobs.definition.targets import explain_target
from tests.support import oracle
from tests.support.explain_homes import LATE_USER, LATE_USER_INPUT, LATE_USER_JOBS

# The long tier: explain-key's reasons on the join's generated cases and a real checkpoint are the default run's
# (test_explain_key, test_explain_cli); a late row's reason on the other three jobs is this module's difference
pytestmark = [pytest.mark.spark, pytest.mark.long]

JOBS = LATE_USER_JOBS
# How long after its event time a row stays on time: a session stays open a gap after its last event.
MARGIN_MS = {"user_activity": 0, "user_sessions": oracle.SESSION_GAP_MS, "user_actions": 0}


@pytest.mark.parametrize("job", JOBS)
def test_a_late_dropped_row_is_arrived_too_late(spark, late_user_homes, job):
    layout, batches = late_user_homes
    spec = get_job(job)
    delay_ms, margin_ms = spec.watermark_seconds * 1000, MARGIN_MS[job]
    # The oracle: the user's only row is in the last batch, behind the watermark it is checked against,
    # and no output of the job holds the user.
    (batch, moment), = [(i, r["t"]) for i, rows in enumerate(batches) for r in rows if r["user_id"] == LATE_USER]
    late_mark = oracle.late_marks(batches, delay_ms)[batch]
    assert batch == LATE_USER_INPUT.files - 1 and moment + margin_ms <= late_mark
    outputs = {"user_activity": oracle.user_activity, "user_sessions": oracle.user_sessions,
               "user_actions": oracle.user_actions}[job](batches, delay_ms)
    assert not [row for row in outputs if LATE_USER in row]

    result = explain_key(spark, explain_target(spec, layout), LATE_USER)
    assert result.reason == "arrived_too_late", result.explanation
    assert [(r["input"], r["batch_id"]) for r in result.inputs] == [("events", batch)]
    assert f"read in batch {batch}" in result.explanation and "dropped as late" in result.explanation
    assert not result.in_state and not result.output_rows


@pytest.mark.parametrize("job", ["user_sessions", "user_actions"])
def test_a_user_active_at_the_end_waits_for_the_watermark(spark, late_user_homes, job):
    """Its session (gap 15m) or timeout (30m) lies ahead of the final watermark (oracle arithmetic)."""
    layout, batches = late_user_homes
    spec = get_job(job)
    last_seen: dict[str, int] = {}
    for rows in batches:
        for r in rows:
            last_seen[r["user_id"]] = max(last_seen.get(r["user_id"], 0), r["t"])
    final = max(last_seen.values()) - spec.watermark_seconds * 1000  # the watermark never gets past this
    ahead_ms = {"user_sessions": oracle.SESSION_GAP_MS, "user_actions": oracle.ACTION_TIMEOUT_MS}[job]
    user = sorted(u for u, t in last_seen.items() if t + ahead_ms > final + 60_000)[0]
    result = explain_key(spark, explain_target(spec, layout), user)
    assert result.reason == "waiting_for_watermark", result.explanation
    assert result.in_state
