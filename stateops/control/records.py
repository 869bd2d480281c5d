"""Record helpers shared by the control records: UTC instants as ISO text, ages in seconds."""
from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def age_seconds(instant: str, now: datetime | None = None) -> float:
    return ((now or datetime.now(timezone.utc)) - datetime.fromisoformat(instant)).total_seconds()
