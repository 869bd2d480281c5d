"""Event times as explain-key shows and compares them: UTC, ISO with milliseconds, epoch milliseconds."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    # Naive datetimes come from Spark's collect(), which renders timestamps in this process's local time.
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
    return iso(ms_time(millis)) or "none yet"


def duration(seconds: float) -> str:
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    minutes, secs = divmod(seconds, 60)
    return f"{sign}{int(minutes)}m{secs:04.1f}s" if minutes else f"{sign}{secs:.1f}s"


def plus(moment: datetime, seconds: float) -> datetime:
    return moment + timedelta(seconds=seconds)
