"""The lease clock, below the control plane and the runbook engine that both stamp their records with it: UTC
instants as ISO text and ages in seconds by this host's clock (skewed on purpose only by the fence tests:
stateops.faults, `clock.skew`)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from stateops.faults import clock_skew_seconds


def lease_now() -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=clock_skew_seconds())


def now_iso() -> str:
    return lease_now().isoformat(timespec="milliseconds")


def age_seconds(instant: str, now: datetime | None = None) -> float:
    return ((now or lease_now()) - datetime.fromisoformat(instant)).total_seconds()
