"""Cron expressions of the schedules the config file sets (`[audit] deep_audit_cron`, `[retention] cron`),
checked when the file loads: a typo fails naming the field, not when Dagster builds the schedule.

Five fields (minute hour day-of-month month day-of-week), each `*` or numbers within the field's range, with
ranges (`1-5`), steps (`*/5`, `0-30/10`) and lists (`0,30`): the forms Dagster's schedules accept that a
person writes. Names (`MON`, `JAN`) and macros (`@hourly`) are refused, with the numeric form as the fix.
"""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from stateops.config import refuse

RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
_ITEM = re.compile(r"^(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?$")


def _item_ok(item: str, low: int, high: int) -> bool:
    match = _ITEM.match(item)
    if not match:
        return False
    star, first, last, step = match.groups()
    if step is not None and int(step) < 1:
        return False
    if star == "*":
        return True
    start, end = int(first), int(last) if last is not None else int(first)
    return low <= start <= end <= high


def problem(text: str) -> str | None:
    """Why `text` is not a cron expression StateOps accepts, or None."""
    fields = text.split()
    if len(fields) != 5:
        return f"{text!r} has {len(fields)} fields, not 5 (minute hour day-of-month month day-of-week)"
    for name, value, (low, high) in zip(("minute", "hour", "day-of-month", "month", "day-of-week"), fields, RANGES):
        if not all(_item_ok(item, low, high) for item in value.split(",")):
            return f"{text!r}: {name} {value!r} is not *, a number from {low} to {high}, a range, a step or a list"
    return None


def _checked(value: str) -> str:
    found = problem(value)
    if found:
        raise refuse(found, 'write five numeric cron fields, e.g. "0 * * * *" (hourly) or "*/10 * * * *"')
    return value


Cron = Annotated[str, AfterValidator(_checked)]
