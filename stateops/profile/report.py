"""A job's recorded batches as profiles (`stateops jobs profile`): from the progress table alone, with pyarrow (no
JVM), so a profile reads as well while the job runs, after it stopped, or on another machine than the job's.

A profile is one batch that ran (Spark timed an addBatch: a trigger that found nothing new runs no batch) of the
job's stateful query: its duration, its parts (stateops.profile.parts; null in rows recorded before the parts
were) and per stateful operator the store's numbers as Spark reported them.
"""
from __future__ import annotations

import json
import statistics
from typing import Any

from stateops import progress
from stateops.layout import Layout

COLUMNS = ("query_name", "query_id", "batch_id", "timestamp", "input_rows", "batch_duration_ms", "durations_json",
           "state_operators_json", "parts_json")


def _operator(op: dict[str, Any]) -> dict[str, Any]:
    return {"operator": op.get("operator_name"), "commit_ms": op.get("commit_time_ms", 0),
            "update_ms": op.get("all_updates_time_ms", 0), "removal_ms": op.get("all_removals_time_ms", 0),
            "rows_total": op.get("num_rows_total"), "rows_updated": op.get("num_rows_updated", 0),
            "rows_removed": op.get("num_rows_removed", 0), "memory_bytes": op.get("memory_used_bytes", 0),
            "partitions": op.get("num_state_store_instances", 0), "store": op.get("custom_metrics", {})}


def profiles(layout: Layout, job: str, batches: int = 10) -> list[dict[str, Any]]:
    """The newest `batches` batches of `job`'s stateful query that ran, oldest first."""
    data = progress.read(layout, job)
    rows = data.select([c for c in COLUMNS if c in data.column_names]).to_pylist()
    ran = [row for row in rows if row.get("query_name") == job
           and "addBatch" in json.loads(row.get("durations_json") or "{}")]
    ran.sort(key=lambda r: (r["timestamp"] is None, r["timestamp"], r["batch_id"]))
    return [{"batch_id": row["batch_id"], "query_id": row["query_id"],
             "timestamp": row["timestamp"].isoformat() if row["timestamp"] else None,
             "input_rows": row["input_rows"], "duration_ms": row["batch_duration_ms"],
             "parts": json.loads(row["parts_json"]) if row.get("parts_json") else None,
             "operators": [_operator(op) for op in progress.operators(row)]}
            for row in ran[-batches:]] if batches > 0 else []


def _ms(value: float) -> str:
    return f"{value:,.0f} ms"


def render(job: str, batches: list[dict[str, Any]]) -> str:
    """Per part its median over the batches and its share of the median batch, then one line per batch with
    its three largest parts and its operators' store times."""
    if not batches:
        return f"{job}: no batch recorded (run it: stateops jobs run {job})"
    durations = [b["duration_ms"] or 0 for b in batches]
    lines = [f"{job}: {len(batches)} batches ({batches[0]['batch_id']}..{batches[-1]['batch_id']}), "
             f"median {_ms(statistics.median(durations))}"]
    timed = [b["parts"] for b in batches if b["parts"]]
    if timed:
        names = list(dict.fromkeys(name for parts in timed for name in parts))
        medians = {name: statistics.median(parts.get(name, 0) for parts in timed) for name in names}
        whole = sum(medians.values()) or 1
        lines.append("part                                 median   share")
        for name in sorted(names, key=lambda n: -medians[n]):
            lines.append(f"  {name:32} {_ms(medians[name]):>9} {100 * medians[name] / whole:6.1f}%")
    else:
        lines.append("no batch has its parts (recorded before StateOps timed them)")
    lines.append("batch     duration      rows  largest parts")
    for batch in batches:
        parts = batch["parts"] or {}
        top = ", ".join(f"{n} {parts[n]:,}" for n in sorted(parts, key=lambda n: -parts[n])[:3]) or "-"
        lines.append(f"  {batch['batch_id']:<6} {_ms(batch['duration_ms'] or 0):>10} {batch['input_rows'] or 0:>9,}"
                     f"  {top}")
        for op in batch["operators"]:
            lines.append(f"           {op['operator']}: commit {op['commit_ms']:,} ms, updates {op['update_ms']:,} ms "
                         f"({op['rows_updated']:,} rows), removals {op['removal_ms']:,} ms ({op['rows_removed']:,} "
                         f"rows), task time over {op['partitions']} partitions")
    return "\n".join(lines)
