"""How StateOps writes times and durations for people and for JSON, in one place.

    iso_seconds(moment)   2026-11-24T21:16:00+00:00   audit findings, inventories, reports
    iso_utc(moment)       2026-11-24T21:16:00.5+00:00 (the precision it has)   the audit's JSON contract
    iso_millis(moment)    2026-11-24T21:16:00.123Z    event times (explain-key, the generator's events)
    human_duration(s)     `2 d 3 h`, `1 h 5 min`, `4 min 10 s`   an age or a lag: the two largest units
    compact_duration(s)   `5 min`, `1 h 30 min`       a configured span: its nonzero parts
    signed_duration(s)    `-1m05.0s`, `4.2s`          a difference between event times, to the tenth
    spark_instant(text)   a datetime in UTC from Spark's `2026-11-24T21:16:00.123Z` (progress events), None for none

Naive datetimes are taken as this process's local time (what Spark's collect() returns) and shown in UTC.
"""
from __future__ import annotations

import datetime as _dt


def spark_instant(text: str | None) -> _dt.datetime | None:
    if not text:
        return None
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(_dt.timezone.utc)


def iso_seconds(moment: _dt.datetime | None) -> str | None:
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="seconds") if moment else None


def iso_utc(moment: _dt.datetime | None) -> str | None:
    return moment.astimezone(_dt.timezone.utc).isoformat() if moment else None


def iso_millis(moment: _dt.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {seconds % 60} s"


def compact_duration(seconds: float) -> str:
    seconds = int(seconds)
    parts = [(seconds // 3600, "h"), (seconds % 3600 // 60, "min"), (seconds % 60, "s")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 s"


def signed_duration(seconds: float) -> str:
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    minutes, secs = divmod(seconds, 60)
    return f"{sign}{int(minutes)}m{secs:04.1f}s" if minutes else f"{sign}{secs:.1f}s"
