"""What an audit produces, as plain data: per operator/store numbers, findings, and the report.

`AuditReport.to_json()` is the `stateops audit --json` contract (scripts gate on it): keep its names and
shape stable. Everything beyond the contract (averages, estimates, eviction counts) lives on the
dataclasses, in the `audits` ops table and in the text output, so the contract can stay small.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

SEVERITIES = ("info", "warn", "error")

CODES = ("STATE_SKEW", "STATE_GROWTH", "EVICTION_STALLED", "UNBOUNDED_DEDUP", "NO_WATERMARK",
         "WATERMARK_LAG", "LATE_DATA_DROPS", "LARGE_STATE", "CLEANUP_STUCK")


def skew_ratio(per_partition: Mapping[int, int | None]) -> float | None:
    """max / median over every partition (empty ones count as 0); the median is floored at 1.

    None when there is nothing to measure (no partitions, or all of them empty).
    """
    values = [v or 0 for v in per_partition.values()]
    if not values or max(values) == 0:
        return None
    return round(max(values) / max(statistics.median(values), 1), 3)


def jsonable(value: Any) -> Any:
    """Spark row values (timestamps, decimals, bytes, nested rows) as JSON-safe values."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return value


@dataclass
class OperatorAudit:
    """One operator and store (or transformWithState variable) at the audited batch.

    rows_*: exact counts from Spark's statestore reader (deep), or the progress table's numRowsTotal
    (fast; None when the operator has several stores, e.g. joins, whose split progress does not give).
    bytes_*: state files on disk now (see stateops.audit.inventory for what is counted).
    skew_ratio: max/median of rows per partition (deep) or of bytes per partition (fast: no row counts).
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
            "top_keys": jsonable(self.top_keys),
        }


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    operator_id: int | None
    store_name: str | None
    message: str
    recommendation: str

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

    @property
    def watermark_lag_seconds(self) -> float | None:
        """Event-time lag of the watermark behind the audit's wall clock."""
        if self.watermark is None:
            return None
        return (self.audited_at - self.watermark).total_seconds()

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
            "watermark": jsonable(self.watermark),
            "operators": [op.contract() for op in self.operators],
            "findings": [f.contract() for f in self.findings],
        }
