"""The throughput benchmark's sustained rate counts both of a job's queries (no JVM)."""
from __future__ import annotations

import pytest

from bench.bench_throughput import sustained

pytestmark = pytest.mark.unit


def _batch(start: str, ms: int, rows: int) -> dict:
    return {"timestamp": f"2026-11-24T08:00:{start}Z", "batchDuration": ms, "numInputRows": rows}


def test_sustained_rate_spans_both_queries_and_leaves_out_the_warm_up_batch():
    stateful = [_batch("00.000", 5000, 999), _batch("05.000", 2000, 100), _batch("07.000", 2000, 100)]
    deadletter = [_batch("00.000", 1000, 999), _batch("04.000", 1000, 100), _batch("08.500", 1500, 100)]
    # steady window: 04.000 (the dead-letter query's batch 1) to 10.000 (its last end); 200 events
    assert sustained(stateful, deadletter) == pytest.approx(200 / 6.0)
    assert sustained(stateful, []) == pytest.approx(200 / 4.0)
