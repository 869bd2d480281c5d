"""Kafka lag from Spark's progress events (stateops/kafka_lag.py), the progress row's columns and the
KAFKA_LAG rule, on events written as Spark writes them (offsets as JSON objects, or as text)."""
from __future__ import annotations

import json

import pytest

from stateops import kafka_lag, progress
from stateops.audit.findings import kafka_lag_finding
from stateops.audit.thresholds import Thresholds

pytestmark = pytest.mark.unit


def _event(batch: int, end: dict, latest: dict, as_text: bool = False) -> dict:
    encode = json.dumps if as_text else (lambda v: v)
    return {"id": "q", "runId": "r", "name": "j", "batchId": batch, "timestamp": "2026-11-25T10:00:00.000Z",
            "sources": [{"description": "KafkaV2[Subscribe[events]]", "startOffset": None, "endOffset": encode(end),
                         "latestOffset": encode(latest), "numInputRows": 10},
                        {"description": "FileStreamSource[file:/landing/x]", "endOffset": {"logOffset": 3}}]}


def test_lag_per_partition_is_latest_minus_the_batch_end():
    event = _event(4, {"events": {"0": 100, "1": 250}}, {"events": {"0": 130, "1": 250, "2": 7}})
    assert kafka_lag.partition_lag(event) == {"events/0": 30, "events/1": 0}  # partition 2 not read yet: unknown
    assert kafka_lag.partition_lag(_event(4, {"events": {"0": 1}}, {"events": {"0": 9}}, as_text=True)) == \
        {"events/0": 8}
    assert kafka_lag.partition_lag({"sources": [{"description": "FileStreamSource[x]"}]}) == {}
    row = progress.progress_row(event, "j", "run-1")
    assert row["kafka_lag"] == 30 and json.loads(row["kafka_lag_json"]) == {"events/0": 30, "events/1": 0}
    plain = progress.progress_row({"batchId": 1, "sources": [{"description": "FileStreamSource[x]"}]}, "j", "r")
    assert plain["kafka_lag"] is None and plain["kafka_lag_json"] is None


def test_totals_latest_and_growing():
    rows = [{"batch_id": b, "kafka_lag": lag, "kafka_lag_json": json.dumps({"events/0": lag})}
            for b, lag in ((3, 30), (1, 10), (2, None), (4, 45))]
    assert kafka_lag.totals(rows) == [10, 30, 45]
    assert kafka_lag.latest(rows) == {"total": 45, "partitions": {"events/0": 45}, "batch_id": 4}
    assert kafka_lag.latest([{"batch_id": 1, "kafka_lag": None}]) is None
    assert kafka_lag.growing([1, 2, 3, 4], batches=3, min_offsets=4)
    assert not kafka_lag.growing([1, 2, 3, 4], batches=3, min_offsets=5)
    assert not kafka_lag.growing([1, 2, 2, 4], batches=3, min_offsets=1)
    assert not kafka_lag.growing([2, 3, 4], batches=3, min_offsets=1)


def test_kafka_lag_finding_warns_then_errors():
    t = Thresholds(kafka_lag_batches=2, kafka_lag_min_offsets=100, kafka_lag_error_offsets=1000)
    assert kafka_lag_finding([10, 50, 90], t) is None
    warn = kafka_lag_finding([10, 50, 120], t)
    assert warn.code == "KAFKA_LAG" and warn.severity == "warn" and warn.details == {"lag": 120, "recent": [10, 50, 120]}
    assert "120 records behind" in warn.message and "10 -> 50 -> 120" in warn.message
    assert kafka_lag_finding([10, 500, 1000], t).severity == "error"
