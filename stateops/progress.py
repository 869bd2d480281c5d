"""The `progress` ops table: one row per micro-batch progress event of any StateOps query.

Rows come from Spark's StreamingQueryProgress JSON; turning it into a row is pure logic so that
sensors and fast audits read it later with pyarrow only (no JVM).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable

import pyarrow as pa

from stateops.delta import append_rows, open_table, read_table
from stateops.layout import Layout

TABLE = "progress"

SCHEMA = pa.schema([
    ("job", pa.string()),
    ("query_name", pa.string()),
    ("query_id", pa.string()),
    ("run_id", pa.string()),
    ("stateops_run_id", pa.string()),
    ("batch_id", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("input_rows", pa.int64()),
    ("batch_duration_ms", pa.int64()),
    ("durations_json", pa.string()),
    ("watermark", pa.timestamp("us", tz="UTC")),
    ("event_time_max", pa.timestamp("us", tz="UTC")),  # newest event time the batch read (all inputs)
    ("state_rows_total", pa.int64()),
    ("state_rows_updated", pa.int64()),
    ("state_memory_bytes", pa.int64()),
    ("rows_dropped_by_watermark", pa.int64()),
    ("state_operators_json", pa.string()),
    ("sources_json", pa.string()),
])


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def operator_metrics(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stateful operator: the numbers an operator is paged about."""
    return [
        {
            "operator_name": op.get("operatorName"),
            "num_rows_total": op.get("numRowsTotal", 0),
            "num_rows_updated": op.get("numRowsUpdated", 0),
            "memory_used_bytes": op.get("memoryUsedBytes", 0),
            "num_rows_dropped_by_watermark": op.get("numRowsDroppedByWatermark", 0),
            "num_state_store_instances": op.get("numShufflePartitions", 0),
            "custom_metrics": op.get("customMetrics", {}),
        }
        for op in progress.get("stateOperators", [])
    ]


def source_offsets(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Per source, in the checkpoint's source order: what it read in this batch (start, end]. Spark purges
    offsets/ after 100 batches; these rows keep which batch read which input for good (explain-key)."""
    return [
        {
            "description": source.get("description"),
            "start_offset": source.get("startOffset"),
            "end_offset": source.get("endOffset"),
            "input_rows": source.get("numInputRows", 0),
        }
        for source in progress.get("sources", [])
    ]


def progress_row(progress: dict[str, Any], job: str, stateops_run_id: str) -> dict[str, Any]:
    ops = operator_metrics(progress)
    durations = progress.get("durationMs", {})
    return {
        "job": job,
        "query_name": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "stateops_run_id": stateops_run_id,
        "batch_id": progress.get("batchId"),
        "timestamp": _instant(progress.get("timestamp")),
        "input_rows": progress.get("numInputRows", 0),
        "batch_duration_ms": progress.get("batchDuration", durations.get("triggerExecution", 0)),
        "durations_json": json.dumps(durations, sort_keys=True),
        "watermark": _instant(progress.get("eventTime", {}).get("watermark")),
        "event_time_max": _instant(progress.get("eventTime", {}).get("max")),
        "state_rows_total": sum(op["num_rows_total"] for op in ops),
        "state_rows_updated": sum(op["num_rows_updated"] for op in ops),
        "state_memory_bytes": sum(op["memory_used_bytes"] for op in ops),
        "rows_dropped_by_watermark": sum(op["num_rows_dropped_by_watermark"] for op in ops),
        "state_operators_json": json.dumps(ops, sort_keys=True),
        "sources_json": json.dumps(source_offsets(progress), sort_keys=True),
    }


def append(layout: Layout, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if rows:
        append_rows(layout.ops_table(TABLE), pa.Table.from_pylist(rows, schema=SCHEMA))


def read(layout: Layout, job: str | None = None) -> pa.Table:
    filters = [("job", "=", job)] if job else None
    table = read_table(layout.ops_table(TABLE), filters=filters)
    return table if table is not None else SCHEMA.empty_table()


def query_batches(uri: str, query_id: str) -> list[dict[str, Any]]:
    """Every recorded batch of one query (batch_id, run_id, timestamp, watermark, sources), oldest first.

    Tables written before sources were recorded have no sources column: those batches get sources None.
    """
    table = open_table(uri)
    if table is None:
        return []
    names = set(table.schema().to_arrow().names)
    columns = [c for c in ("batch_id", "run_id", "timestamp", "watermark", "sources_json") if c in names]
    rows = table.to_pyarrow_table(columns=columns, filters=[("query_id", "=", query_id)]).to_pylist()
    for row in rows:
        text = row.pop("sources_json", None)
        row["sources"] = json.loads(text) if text else None
    rows.sort(key=lambda r: (r["timestamp"] is None, r["timestamp"], r["batch_id"]))
    return rows
