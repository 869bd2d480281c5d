"""The `audits` and `findings` ops tables: what every audit saw, so growth and cleanup show over time.

`audits`: one row per operator/store per audit (deep or fast). `findings`: one row per finding, with its
numbers as JSON in `details_json` (e.g. STATE_SKEW's ratio, cause and hot partition, for policies). Both are
append-only Delta tables (delta-rs), readable by sensors with pyarrow alone. History is matched on the
checkpoint path *and* the query id, because a recreated checkpoint at the same path starts over.
"""
from __future__ import annotations

import json
import posixpath
import uuid
from typing import Any, Iterable

import pyarrow as pa

from stateops.audit.model import AuditReport, audit_json
from stateops.delta import append_rows, read_table
from stateops.layout import Layout
from stateops.storage import is_url

AUDITS = "audits"
FINDINGS = "findings"

_TS = pa.timestamp("us", tz="UTC")
AUDITS_SCHEMA = pa.schema([
    ("audit_id", pa.string()), ("audited_at", _TS), ("kind", pa.string()), ("job", pa.string()),
    ("checkpoint", pa.string()), ("query_id", pa.string()), ("batch_id", pa.int64()), ("watermark", _TS),
    ("operator_id", pa.int64()), ("operator_name", pa.string()), ("store_name", pa.string()),
    ("state_kind", pa.string()), ("num_partitions", pa.int64()), ("min_batch_id", pa.int64()),
    ("max_batch_id", pa.int64()), ("rows_total", pa.int64()), ("rows_per_partition_json", pa.string()),
    ("bytes_total", pa.int64()), ("bytes_per_partition_json", pa.string()), ("skew_ratio", pa.float64()),
    ("skew_basis", pa.string()), ("skew_ratio_bytes", pa.float64()), ("rows_behind_watermark", pa.int64()),
    ("unmatched_rows", pa.int64()), ("avg_key_bytes", pa.float64()), ("avg_value_bytes", pa.float64()),
    ("estimated_bytes", pa.int64()), ("rows_dropped_by_watermark", pa.int64()), ("top_keys_json", pa.string()),
])
FINDINGS_SCHEMA = pa.schema([
    ("audit_id", pa.string()), ("audited_at", _TS), ("kind", pa.string()), ("job", pa.string()),
    ("checkpoint", pa.string()), ("query_id", pa.string()), ("batch_id", pa.int64()), ("code", pa.string()),
    ("severity", pa.string()), ("operator_id", pa.int64()), ("store_name", pa.string()),
    ("message", pa.string()), ("recommendation", pa.string()), ("details_json", pa.string()),
])


def normalize(checkpoint: str) -> str:
    """One spelling per checkpoint (no trailing slash, no `..`), so history lookups match."""
    if is_url(checkpoint):
        scheme, rest = checkpoint.split("://", 1)
        return f"{scheme}://{posixpath.normpath(rest)}"
    return posixpath.normpath(posixpath.abspath(checkpoint))


def _json(mapping: dict) -> str:
    return json.dumps({str(k): v for k, v in sorted(mapping.items())})


def audit_rows(report: AuditReport, audit_id: str) -> list[dict[str, Any]]:
    common = {"audit_id": audit_id, "audited_at": report.audited_at, "kind": report.kind, "job": report.job,
              "checkpoint": normalize(report.checkpoint), "query_id": report.query_id,
              "batch_id": report.batch_id, "watermark": report.watermark}
    return [{**common, "operator_id": op.operator_id, "operator_name": op.operator_name,
             "store_name": op.store_name, "state_kind": op.kind, "num_partitions": op.num_partitions,
             "min_batch_id": op.min_batch_id, "max_batch_id": op.max_batch_id, "rows_total": op.rows_total,
             "rows_per_partition_json": _json(op.rows_per_partition), "bytes_total": op.bytes_total,
             "bytes_per_partition_json": _json(op.bytes_per_partition), "skew_ratio": op.skew_ratio,
             "skew_basis": op.skew_basis, "skew_ratio_bytes": op.skew_ratio_bytes,
             "rows_behind_watermark": op.rows_behind_watermark, "unmatched_rows": op.unmatched_rows,
             "avg_key_bytes": op.avg_key_bytes, "avg_value_bytes": op.avg_value_bytes,
             "estimated_bytes": op.estimated_bytes, "rows_dropped_by_watermark": op.rows_dropped_by_watermark,
             "top_keys_json": json.dumps(audit_json(op.top_keys))}
            for op in report.operators]


def finding_rows(report: AuditReport, audit_id: str) -> list[dict[str, Any]]:
    return [{"audit_id": audit_id, "audited_at": report.audited_at, "kind": report.kind, "job": report.job,
             "checkpoint": normalize(report.checkpoint), "query_id": report.query_id,
             "batch_id": report.batch_id, **f.contract(),
             "details_json": json.dumps(audit_json(f.details)) if f.details is not None else None}
            for f in report.findings]


def record(layout: Layout, report: AuditReport) -> str:
    """Append the report to the `audits` and `findings` tables; returns the audit id."""
    audit_id = uuid.uuid4().hex
    rows = audit_rows(report, audit_id)
    if rows:
        append_rows(layout.ops_table(AUDITS), pa.Table.from_pylist(rows, schema=AUDITS_SCHEMA))
    found = finding_rows(report, audit_id)
    if found:
        append_rows(layout.ops_table(FINDINGS), pa.Table.from_pylist(found, schema=FINDINGS_SCHEMA))
    return audit_id


def _oldest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["audited_at"], r["operator_id"], r["store_name"]))


def load_history(layout: Layout, checkpoint: str, query_id: str | None = None) -> list[dict[str, Any]]:
    """Earlier audit rows of this checkpoint (and query id, when given), oldest first."""
    filters = [("checkpoint", "=", normalize(checkpoint))]
    if query_id:
        filters.append(("query_id", "=", query_id))
    table = read_table(layout.ops_table(AUDITS), filters=filters)
    if table is None:
        return []
    return _oldest_first(table.to_pylist())


def history_by_checkpoint(layout: Layout, checkpoints: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Normalized checkpoint -> its audit rows (every query), oldest first, from one read of `audits` for all
    of `checkpoints` (load_history per checkpoint would scan the table once each)."""
    wanted = sorted({normalize(c) for c in checkpoints})
    table = read_table(layout.ops_table(AUDITS), filters=[("checkpoint", "in", wanted)]) if wanted else None
    out: dict[str, list[dict[str, Any]]] = {}
    for row in [] if table is None else table.to_pylist():
        out.setdefault(row["checkpoint"], []).append(row)
    return {checkpoint: _oldest_first(rows) for checkpoint, rows in out.items()}


def load_findings(layout: Layout, checkpoint: str | None = None) -> list[dict[str, Any]]:
    filters = [("checkpoint", "=", normalize(checkpoint))] if checkpoint else None
    table = read_table(layout.ops_table(FINDINGS), filters=filters)
    return [] if table is None else sorted(table.to_pylist(), key=lambda r: r["audited_at"])
