"""What a job's asset shows of its stream between runs: the health sensor's observation, as data (no Dagster).

A run reports one observation per micro-batch while it runs; between bounded runs, or while a continuous run is
down, nothing would say how the stream stands. Dagster's pattern for streams is observations reported from
outside runs: each tick of query_health_sensor reports, per job, its lease's state, its newest batch (how old,
its watermark, input and time), its Kafka lag and its newest audit's findings under `health/` keys (numbers
plot on the asset page). A tick reports a job again when any of that changed, and at least every
`REPORT_EVERY_SECONDS` so that the age's plot goes on; an unchanged stream adds no event in between.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Any, Mapping

REPORT_EVERY_SECONDS = 900


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, _dt.datetime) else value


def stream_health(status: Mapping[str, Any], batch: Mapping[str, Any] | None, audit: Mapping[str, Any] | None,
                  now: _dt.datetime) -> dict[str, Any]:
    """One job's `health/` metadata from its control status (stateops.control.job_status), its newest progress row
    (signals.latest_batches with HEALTH_COLUMNS) and its newest audit (signals.latest_audits); None values left
    out."""
    lease = status.get("lease") or {}
    found = list((audit or {}).get("findings") or [])
    out: dict[str, Any] = {
        "health/state": status["state"],
        "health/run": lease.get("run_id"),
        "health/observed_at": now.isoformat(timespec="seconds"),
    }
    if batch:
        at = batch.get("timestamp")
        out.update({
            "health/batch": batch["batch_id"],
            "health/batch_time": _iso(at),
            "health/batch_age_seconds": round((now - at).total_seconds(), 1) if isinstance(at, _dt.datetime) else None,
            "health/watermark": _iso(batch.get("watermark")),
            "health/input_rows": batch.get("input_rows"),
            "health/batch_ms": batch.get("batch_duration_ms"),
            "health/state_rows": batch.get("state_rows_total"),
            "health/kafka_lag": batch.get("kafka_lag"),
        })
    if audit:
        out.update({
            "health/audit_id": audit["audit_id"],
            "health/audit_kind": audit["kind"],
            "health/findings_error": sum(1 for f in found if f["severity"] == "error"),
            "health/findings_warn": sum(1 for f in found if f["severity"] == "warn"),
            "health/findings": ", ".join(sorted(f"{f['code']} {f['severity']}" for f in found)) or "none",
        })
    return {k: v for k, v in out.items() if v is not None}


def fingerprint(health: Mapping[str, Any]) -> str:
    """What makes a report new: everything but the clock's own keys."""
    kept = {k: v for k, v in health.items() if k not in ("health/observed_at", "health/batch_age_seconds")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def due(health: Mapping[str, Any], last: tuple[str, str] | None, now: _dt.datetime) -> bool:
    """Report this tick? `last`: (fingerprint, when) of the job's previous report (the sensor's cursor)."""
    if last is None or last[0] != fingerprint(health):
        return True
    try:
        return (now - _dt.datetime.fromisoformat(last[1])).total_seconds() >= REPORT_EVERY_SECONDS
    except (TypeError, ValueError):
        return True
