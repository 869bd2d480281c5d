"""Spark-style interval strings ("10 minutes") parsed strictly, so typos fail at load, not at query start."""
from __future__ import annotations

import re

_UNITS = {
    "second": 1, "seconds": 1, "sec": 1, "secs": 1, "s": 1,
    "minute": 60, "minutes": 60, "min": 60, "mins": 60, "m": 60,
    "hour": 3600, "hours": 3600, "h": 3600,
    "day": 86400, "days": 86400, "d": 86400,
}
_PATTERN = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")


def parse_seconds(text: str) -> int | None:
    """Seconds in `text` such as "10 minutes" or "30s"; None when it is not such an interval."""
    if not isinstance(text, str):
        return None
    match = _PATTERN.match(text.lower())
    if not match or match.group(2) not in _UNITS:
        return None
    return int(match.group(1)) * _UNITS[match.group(2)]


def spark_interval(seconds: int) -> str:
    """The form Spark's withWatermark and triggers accept."""
    return f"{seconds} seconds"
