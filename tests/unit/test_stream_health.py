"""The stream's health as the job's asset shows it between runs (stateops.remediation.observed), and when a tick
reports it again (the sensor's cursor)."""
from __future__ import annotations

import datetime as _dt

from stateops.remediation.guards import Cursor
from stateops.remediation.observed import REPORT_EVERY_SECONDS, due, fingerprint, stream_health

NOW = _dt.datetime(2026, 12, 3, 12, 0, tzinfo=_dt.timezone.utc)
BATCH = {"batch_id": 9, "timestamp": NOW - _dt.timedelta(minutes=10), "input_rows": 40, "batch_duration_ms": 900,
         "watermark": NOW - _dt.timedelta(hours=1), "state_rows_total": 12, "kafka_lag": None}
AUDIT = {"audit_id": "a1", "kind": "deep", "findings": [{"code": "STATE_SKEW", "severity": "error"},
                                                         {"code": "SLOW_COMMIT", "severity": "warn"}]}


def test_the_health_names_the_lease_the_newest_batch_and_the_newest_audits_findings():
    health = stream_health({"state": "stale", "lease": {"run_id": "r1"}}, BATCH, AUDIT, NOW)
    assert health["health/state"] == "stale" and health["health/run"] == "r1"
    assert (health["health/batch"], health["health/batch_age_seconds"], health["health/input_rows"]) == (9, 600.0, 40)
    assert health["health/watermark"] == "2026-12-03T11:00:00+00:00" and "health/kafka_lag" not in health
    assert (health["health/findings_error"], health["health/findings_warn"]) == (1, 1)
    assert health["health/findings"] == "SLOW_COMMIT warn, STATE_SKEW error"
    bare = stream_health({"state": "idle", "lease": None}, None, None, NOW)
    assert set(bare) == {"health/state", "health/observed_at"}


def test_a_job_is_reported_again_when_its_health_changed_or_every_fifteen_minutes():
    health = stream_health({"state": "idle"}, BATCH, AUDIT, NOW)
    assert due(health, None, NOW)
    last = (fingerprint(health), NOW.isoformat())
    later = NOW + _dt.timedelta(seconds=60)
    same = stream_health({"state": "idle"}, BATCH, AUDIT, later)  # only the clock moved: the age, observed_at
    assert fingerprint(same) == last[0] and not due(same, last, later)
    assert due(same, last, NOW + _dt.timedelta(seconds=REPORT_EVERY_SECONDS))
    newer = stream_health({"state": "idle"}, {**BATCH, "batch_id": 10}, AUDIT, later)
    assert due(newer, last, later)
    cursor = Cursor.parse(Cursor(reported={"j": last}).dumps())
    assert cursor.reported == {"j": last} and Cursor.parse('{"reported": {"j": 5}}').reported == {}
