"""The throughput benchmark's sustained rate counts both of a job's queries (no JVM)."""
from __future__ import annotations

import pytest

from bench.bench_throughput import sustained

pytestmark = pytest.mark.unit


def _batch(start: str, ms: int, rows: int) -> dict:
    return {"timestamp": f"2026-11-24T08:00:{start}Z", "batchDuration": ms, "numInputRows": rows}


def test_sustained_rate_counts_the_gaps_and_leaves_out_the_warm_up_batch():
    batches = [_batch("00.000", 5000, 999), _batch("05.000", 2000, 100), _batch("08.000", 2000, 100)]
    # steady window: 05.000 (batch 1's start) to 10.000 (the last end), the second's gap counted; 200 events
    assert sustained(batches) == pytest.approx(200 / 5.0)
