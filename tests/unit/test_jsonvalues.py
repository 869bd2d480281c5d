"""One JSON contract for Spark values (stateops.jsonvalues): what each kind of value becomes, stated here."""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

from stateops.jsonvalues import jsonable

pytestmark = pytest.mark.unit


class Row:
    """What pyspark's Row offers the encoder: asDict."""

    def __init__(self, **values):
        self.values = values

    def asDict(self, recursive=False):  # noqa: N802 (pyspark's name)
        return dict(self.values)


def test_each_kind_of_value():
    utc = dt.timezone.utc
    row = Row(window=Row(start=dt.datetime(2026, 1, 2, 3, 4, 5, 678900, tzinfo=utc)), day=dt.date(2026, 1, 2),
              amount=decimal.Decimal("12345678901234567890.12"), raw=b"\xff\x00a", wait=dt.timedelta(minutes=2),
              tags={1: ["a", None]}, n=3, ok=True)
    assert jsonable(row) == {"window": {"start": "2026-01-02T03:04:05.678Z"}, "day": "2026-01-02",
                             "amount": "12345678901234567890.12", "raw": "/wBh", "wait": 120.0,
                             "tags": {"1": ["a", None]}, "n": 3, "ok": True}


def test_a_naive_time_is_local_time_shown_in_utc():
    naive = dt.datetime(2026, 6, 1, 12, 0, 0)
    expected = naive.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert jsonable(naive) == expected
