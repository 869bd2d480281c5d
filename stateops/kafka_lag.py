"""Kafka consumer lag of a StateOps query, from Spark's own progress events (no Kafka client needed).

Spark never commits a streaming query's offsets to Kafka, so consumer-group tools see nothing. Each progress
event of a Kafka source carries `endOffset` (per topic partition, the next offset the batch's read stops at)
and `latestOffset` (the newest offsets the source saw when it planned the batch): their difference is how
many records each partition is behind. It is recorded with every progress row (`kafka_lag`, the total, and
`kafka_lag_json`, per `topic/partition`) and read by `jobs status`, the audits and the health sensor.

A lag that grew over `kafka_lag_batches` consecutive batches and reached `kafka_lag_min_offsets` is a
KAFKA_LAG finding: the query reads slower than records arrive.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    """{topic: {partition: offset}} from a progress event's offset (an object, or its JSON text)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {topic: {str(p): int(o) for p, o in parts.items() if isinstance(o, int)}
            for topic, parts in value.items() if isinstance(parts, dict)}


def partition_lag(progress: Mapping[str, Any]) -> dict[str, int]:
    """`topic/partition` -> records behind the latest offset, for every Kafka source of one progress event
    ({} when the query reads no Kafka source)."""
    out: dict[str, int] = {}
    for source in progress.get("sources", []):
        if not str(source.get("description", "")).startswith("Kafka"):
            continue
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for topic, parts in latest.items():
            for partition, newest in parts.items():
                read = end.get(topic, {}).get(partition)
                if read is not None:
                    out[f"{topic}/{partition}"] = max(0, newest - read)
    return out


def stateful_rows_by_job(table) -> dict[str, list[dict[str, Any]]]:
    """Job -> its stateful query's progress rows that carry a lag, from an Arrow table with `job`,
    `query_name` and `kafka_lag` (a home's retired dead-letter query read the same topics: its lag was not the job's)."""
    import pyarrow.compute as pc

    table = table.filter(pc.and_(pc.is_valid(table["kafka_lag"]), pc.equal(table["job"], table["query_name"])))
    out: dict[str, list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        out.setdefault(row["job"], []).append(row)
    return out


def totals(rows: Iterable[Mapping[str, Any]]) -> list[int]:
    """The recorded total lag of progress rows with one, oldest batch first."""
    ordered = sorted((r for r in rows if r.get("kafka_lag") is not None and r.get("batch_id") is not None),
                     key=lambda r: r["batch_id"])
    return [int(r["kafka_lag"]) for r in ordered]


def latest(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """{total, partitions, batch_id} of the newest progress row with a lag; None without (no Kafka source)."""
    ordered = sorted((r for r in rows if r.get("kafka_lag") is not None and r.get("batch_id") is not None),
                     key=lambda r: r["batch_id"])
    if not ordered:
        return None
    row = ordered[-1]
    return {"total": int(row["kafka_lag"]), "partitions": json.loads(row.get("kafka_lag_json") or "{}"),
            "batch_id": row["batch_id"]}


def growing(lags: Sequence[int], batches: int, min_offsets: int) -> bool:
    """The last `batches` batches each ended further behind than the one before, and the newest is at least
    `min_offsets` behind."""
    if batches < 1 or len(lags) < batches + 1:
        return False
    recent = lags[-(batches + 1):]
    return all(b > a for a, b in zip(recent, recent[1:])) and recent[-1] >= min_offsets
