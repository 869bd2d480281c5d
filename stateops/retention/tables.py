"""Delta table maintenance with delta-rs: what it would free (for the plan) and doing it (for the executor).

Per table, in this order when applied: vacuum (files no version within `vacuum_after` uses), log cleanup
(a checkpoint at the current version, then log entries older than `log_retention` before it), row
retention (progress rows past the horizon rolled up or dropped, dead letters past their keep), compaction
(small files rewritten, then a checkpoint, so readers open one checkpoint and few files). Vacuum runs
before the rewrites so that the files a rewrite replaces stay for readers until a later run, past
`vacuum_after`; that is also why the plan's bytes for vacuum and log cleanup are exact.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from stateops.delta import open_table, scan
from stateops.durations import parse_seconds
from stateops.storage import storage_options
from stateops.progress import ROLLUP_TABLE, TABLE as PROGRESS

ROLLUP = ROLLUP_TABLE
LOG_RETENTION = "delta.logRetentionDuration"
_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet|crc)$")
ROLLUP_KEYS = ("query_id", "query_name", "hour")
ROLLUP_SCHEMA = pa.schema([
    ("job", pa.string()), ("query_name", pa.string()), ("query_id", pa.string()),
    ("hour", pa.timestamp("us", tz="UTC")), ("batches", pa.int64()), ("first_batch_id", pa.int64()),
    ("last_batch_id", pa.int64()), ("input_rows", pa.int64()), ("batch_duration_ms_total", pa.int64()),
    ("batch_duration_ms_max", pa.int64()), ("rows_dropped_by_watermark", pa.int64()),
    ("state_rows_total_max", pa.int64()), ("state_memory_bytes_max", pa.int64()),
    ("watermark_max", pa.timestamp("us", tz="UTC")),
])


def vacuum_hours(interval: str) -> int:
    return parse_seconds(interval) // 3600


def retention_property(interval: str) -> str:
    return f"interval {parse_seconds(interval)} seconds"


def vacuum_candidates(uri: str, interval: str) -> list[str]:
    """Files (relative to the table) a vacuum with `interval` would delete now."""
    table = open_table(uri)
    if table is None:
        return []
    return sorted(table.vacuum(retention_hours=vacuum_hours(interval), dry_run=True, enforce_retention_duration=False))


def log_candidates(uri: str, log_files: dict[str, float], interval: str, now: datetime) -> list[str]:
    """Log files (relative to `_delta_log`) a checkpoint now plus cleanup_metadata would delete: versions
    before the checkpoint's (the current one, or the next when the retention property is set first) whose
    files are older than `interval`."""
    table = open_table(uri)
    if table is None:
        return []
    until = table.version() + (0 if table.metadata().configuration.get(LOG_RETENTION) == retention_property(interval)
                               else 1)
    cutoff = (now - timedelta(seconds=parse_seconds(interval))).timestamp()
    out = []
    for name, mtime in log_files.items():
        match = _LOG_FILE.match(name)
        if match and int(match.group(1)) < until and mtime < cutoff:
            out.append(name)
    return sorted(out)


def rows_before(uri: str, column: str, cutoff: datetime) -> int:
    """Rows whose `column` lies before `cutoff` (0 when the table or the column does not exist)."""
    table = open_table(uri)
    if table is None or column not in table.schema().to_arrow().names:
        return 0
    data = scan(table, [column], [(column, "<", cutoff)])
    return data.num_rows


def _cut(cutoff: datetime) -> str:
    return cutoff.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def vacuum(uri: str, interval: str) -> list[str]:
    table = open_table(uri)
    return [] if table is None else table.vacuum(retention_hours=vacuum_hours(interval), dry_run=False,
                                                 enforce_retention_duration=False)


def cleanup_log(uri: str, interval: str) -> None:
    """Set the table's log retention to `interval` (if it differs), checkpoint, delete expired log files."""
    table = open_table(uri)
    if table is None:
        return
    if table.metadata().configuration.get(LOG_RETENTION) != retention_property(interval):
        table.alter.set_table_properties({LOG_RETENTION: retention_property(interval)})
        table = open_table(uri)
    table.create_checkpoint()
    table.cleanup_metadata()


def compact(uri: str) -> dict[str, Any]:
    table = open_table(uri)
    if table is None:
        return {}
    metrics = table.optimize.compact()
    open_table(uri).create_checkpoint()
    return metrics


def drop_rows(uri: str, column: str, cutoff: datetime) -> int:
    table = open_table(uri)
    if table is None or column not in table.schema().to_arrow().names:
        return 0
    return int(table.delete(f'"{column}" < \'{_cut(cutoff)}\'').get("num_deleted_rows", 0))


def rollup_rows(progress: pa.Table) -> pa.Table:
    """Progress rows summed per query and hour (maxima where sums mean nothing)."""
    hours = pc.floor_temporal(progress["timestamp"], unit="hour")
    data = progress.append_column("hour", hours)
    grouped = data.group_by(["job", "query_name", "query_id", "hour"]).aggregate([
        ("batch_id", "count"), ("batch_id", "min"), ("batch_id", "max"), ("input_rows", "sum"),
        ("batch_duration_ms", "sum"), ("batch_duration_ms", "max"), ("rows_dropped_by_watermark", "sum"),
        ("state_rows_total", "max"), ("state_memory_bytes", "max"), ("watermark", "max")])
    names = {"batch_id_count": "batches", "batch_id_min": "first_batch_id", "batch_id_max": "last_batch_id",
             "input_rows_sum": "input_rows", "batch_duration_ms_sum": "batch_duration_ms_total",
             "batch_duration_ms_max": "batch_duration_ms_max",
             "rows_dropped_by_watermark_sum": "rows_dropped_by_watermark",
             "state_rows_total_max": "state_rows_total_max", "state_memory_bytes_max": "state_memory_bytes_max",
             "watermark_max": "watermark_max"}
    grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
    return grouped.select(ROLLUP_SCHEMA.names).cast(ROLLUP_SCHEMA)


def rollup_progress(progress_uri: str, rollup_uri: str, cutoff: datetime) -> dict[str, int]:
    """Roll the progress rows before `cutoff` up per query and hour into `progress_rollup` (merged on the
    query and hour, so a run interrupted before the delete does the same again), then delete them."""
    table = open_table(progress_uri)
    if table is None:
        return {"rows": 0, "rollup_rows": 0}
    old = scan(table, filters=[("timestamp", "<", cutoff)])
    if not old.num_rows:
        return {"rows": 0, "rollup_rows": 0}
    rolled = rollup_rows(old)
    target = open_table(rollup_uri)
    if target is None:
        write_deltalake(rollup_uri, rolled, mode="append", storage_options=storage_options(rollup_uri))
    else:
        predicate = " AND ".join(f"t.{k} = s.{k}" for k in ROLLUP_KEYS)
        (target.merge(rolled, predicate=predicate, source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    deleted = drop_rows(progress_uri, "timestamp", cutoff)
    return {"rows": deleted, "rollup_rows": rolled.num_rows}


def progress_cutoff(horizon: str, now: datetime) -> datetime:
    """Whole hours only, so every rolled-up hour is complete."""
    cut = now - timedelta(seconds=parse_seconds(horizon))
    return cut.replace(minute=0, second=0, microsecond=0)


def is_progress(name: str) -> bool:
    return name == PROGRESS
