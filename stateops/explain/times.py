"""Event times as explain-key compares them: UTC, epoch milliseconds and microseconds (shown as
stateops.timefmt.iso_millis)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from stateops.timefmt import iso_millis

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, str):
        try:
            return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def ms_time(millis: int | None) -> datetime | None:
    """A watermark in epoch milliseconds as a time; 0 (no watermark yet) and unknown as None."""
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc) if millis else None


def to_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def to_us(moment: datetime) -> int:
    """Exact epoch microseconds (Spark compares event times with watermark_ms * 1000)."""
    return (utc(moment) - _EPOCH) // timedelta(microseconds=1)


def ms_text(millis: int | None) -> str:
    if millis is None:
        return "unknown"
    return iso_millis(ms_time(millis)) or "none yet"


def plus(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)
