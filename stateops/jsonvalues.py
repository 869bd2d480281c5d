"""Spark and Arrow values as JSON, one encoder for every `--json` output and ops-table JSON column (the
audit's top keys and details, explain-key's state rows and inputs):

    timestamp   ISO 8601 in UTC, written by `time`: explain-key's contract is to the millisecond with `Z`
                (as Spark writes times in its own progress JSON, the default), the audit's keeps the precision
                the value has with `+00:00` (stateops.timefmt.iso_utc); a naive time is this process's local
                time, which is what Spark's collect() returns
    date        ISO 8601
    decimal     a string (exact; a JSON number would round it)
    bytes       base64 (as Spark's to_json writes binary)
    interval    seconds
    row, map, array   objects and lists of the above
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
from typing import Any, Callable, Mapping

from stateops.timefmt import iso_millis


def jsonable(value: Any, time: Callable[[_dt.datetime], str | None] = iso_millis) -> Any:
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=False)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, time) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, time) for v in value]
    if isinstance(value, _dt.datetime):
        return time(value)
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return value
