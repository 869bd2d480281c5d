"""What an audit produces, as plain data: per operator/store numbers, findings, and the report.

`AuditReport.to_json()` is the `stateops audit --json` contract (scripts gate on it): keep its names and
shape stable. Everything beyond the contract (averages, estimates, eviction counts) lives on the
dataclasses, in the `audits` ops table and in the text output, so the contract can stay small.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Mapping

from stateops.audit.skew import spread
from stateops.jsonvalues import jsonable
from stateops.timefmt import iso_utc

SEVERITIES = ("info", "warn", "error")

CODES = ("STATE_SKEW", "STATE_GROWTH", "EVICTION_STALLED", "UNBOUNDED_DEDUP", "NO_WATERMARK",
         "WATERMARK_LAG", "LATE_DATA_DROPS", "LARGE_STATE", "CLEANUP_STUCK", "STATE_UNREADABLE", "KAFKA_LAG", "STATE_MEMORY",
         "SLOW_COMMIT", "SLOW_STATE_UPDATES", "SLOW_CLEANUP", "RESTART_COST")


def audit_json(value):
    """A value as the audit's JSON contract writes it (stateops.jsonvalues; times at the precision they have,
    `+00:00`, as since the contract was published)."""
    return jsonable(value, iso_utc)


def skew_ratio(per_partition: Mapping[int, int | None]) -> float | None:
    """max / mean over every partition, empty ones included: the busiest task against an even split
    (1.0 even, at most the partition count). None when there is nothing to measure."""
    measured = spread(per_partition)
    return measured.ratio if measured else None



@dataclass
class OperatorAudit:
    """One operator and store (or transformWithState variable) at the audited batch.

    rows_*: exact counts from Spark's statestore reader (deep), or the progress table's numRowsTotal
    (fast; None when the operator has several stores, e.g. joins, whose split progress does not give).
    bytes_*: state files on disk now (see stateops.checkpoints.operators for what is counted).
    skew_ratio: max/mean of rows per partition (deep) or of bytes per partition (fast: no row counts).
    keys_*: distinct partitioning keys, which is the rows except in join value stores (several rows per
    join key: counted from the side's keyToNumValues store).
    """

    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    min_batch_id: int | None = None
    max_batch_id: int | None = None
    rows_total: int | None = None
    rows_per_partition: dict[int, int] = field(default_factory=dict)
    bytes_total: int = 0
    bytes_per_partition: dict[int, int] = field(default_factory=dict)
    skew_ratio: float | None = None
    top_keys: list[dict[str, Any]] = field(default_factory=list)
    # Beyond the CLI contract.
    kind: str = "unknown"  # aggregation | dedup | dedup_within_watermark | session | join | custom | tws
    key_columns: list[str] = field(default_factory=list)
    watermarked: bool | None = None  # the state schema carries Spark's watermark tag on some column
    skew_basis: str = "rows"  # rows | bytes
    skew_ratio_bytes: float | None = None
    event_time_column: str | None = None  # the state column evicted by the watermark, if any
    rows_behind_watermark: int | None = None  # rows that the watermark should already have evicted
    oldest_event_time: _dt.datetime | None = None
    unmatched_rows: int | None = None  # join value stores: rows still waiting for a match
    avg_key_bytes: float | None = None  # UnsafeRow size (the state store's encoding, uncompressed)
    avg_value_bytes: float | None = None
    estimated_bytes: int | None = None  # rows x (avg key + avg value) x versioning factor
    rows_dropped_by_watermark: int | None = None  # from progress: late rows this operator dropped
    keys_total: int | None = None
    keys_per_partition: dict[int, int] = field(default_factory=dict)  # deep audit only
    heaviest_keys: dict[int, dict[str, Any]] = field(default_factory=dict)  # join value stores: per partition
    # the join key with the most rows, {"key", "rows"}; elsewhere every key is one row
    encoded_bytes_per_partition: dict[int, int] = field(default_factory=dict)  # UnsafeRow key + value bytes
    join_grace_seconds: int | None = None  # join value stores: rows older than watermark - this are overdue
    join_grace_source: str | None = None  # where that grace comes from (the job's join bound, or config)

    def contract(self) -> dict[str, Any]:
        return {
            "operator_id": self.operator_id,
            "operator_name": self.operator_name,
            "store_name": self.store_name,
            "num_partitions": self.num_partitions,
            "min_batch_id": self.min_batch_id,
            "max_batch_id": self.max_batch_id,
            "rows_total": self.rows_total,
            "rows_per_partition": {str(p): n for p, n in sorted(self.rows_per_partition.items())},
            "bytes_total": self.bytes_total,
            "bytes_per_partition": {str(p): n for p, n in sorted(self.bytes_per_partition.items())},
            "skew_ratio": self.skew_ratio,
            "top_keys": audit_json(self.top_keys),
        }


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    operator_id: int | None
    store_name: str | None
    message: str
    recommendation: str
    details: Mapping[str, Any] | None = field(default=None, compare=False)  # the numbers, for policies;
    # recorded in the findings table (details_json), not part of the CLI contract

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unknown finding code {self.code!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def contract(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "operator_id": self.operator_id,
                "store_name": self.store_name, "message": self.message, "recommendation": self.recommendation}


@dataclass
class AuditReport:
    checkpoint: str
    batch_id: int
    watermark: _dt.datetime | None
    operators: list[OperatorAudit] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # Beyond the CLI contract.
    kind: str = "deep"  # deep | fast
    job: str | None = None
    query_id: str | None = None
    audited_at: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))
    batch_timestamp: _dt.datetime | None = None
    provider: str | None = None
    duration_seconds: float | None = None
    pinned_batch: bool = False  # the caller chose the batch (--batch-id) instead of the latest
    kafka_lag: dict[str, Any] | None = None  # Kafka sources: {total, partitions, batch_id} of the newest progress row

    @property
    def measured_at(self) -> _dt.datetime:
        """What the watermark's lag is measured against: the batch's own time (batchTimestampMs) for a batch
        the caller chose, since an old batch's watermark is not late by today's clock; else the wall clock."""
        if self.pinned_batch and self.batch_timestamp is not None:
            return self.batch_timestamp
        return self.audited_at

    @property
    def measured_against(self) -> str:
        """`measured_at` in words, for messages."""
        if self.pinned_batch and self.batch_timestamp is not None:
            return f"batch {self.batch_id}'s own time"
        return "now"

    @property
    def watermark_lag_seconds(self) -> float | None:
        """Event-time lag of the watermark behind `measured_at`."""
        if self.watermark is None:
            return None
        return (self.measured_at - self.watermark).total_seconds()

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def operator(self, operator_id: int, store_name: str | None = None) -> OperatorAudit:
        for op in self.operators:
            if op.operator_id == operator_id and (store_name is None or op.store_name == store_name):
                return op
        raise KeyError((operator_id, store_name))

    def to_json(self) -> dict[str, Any]:
        """The `stateops audit --json` document, exactly."""
        return {
            "checkpoint": self.checkpoint,
            "batch_id": self.batch_id,
            "watermark": audit_json(self.watermark),
            "operators": [op.contract() for op in self.operators],
            "findings": [f.contract() for f in self.findings],
            **({"kafka_lag": self.kafka_lag} if self.kafka_lag is not None else {}),
        }
