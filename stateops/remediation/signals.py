"""What a sensor tick reads, without a JVM: the ops tables (delta-rs, only the columns it needs) and file
listings (fsspec).

A table that cannot be read (a corrupt file, a damaged log, columns that drifted from what StateOps writes)
raises OpsTableError: one line naming the table, the problem and the fix, which the sensor turns into a
SkipReason. A table that does not exist yet reads as None, an empty one as no rows.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from stateops import kafka_lag, progress
from stateops.audit.history import AUDITS, AUDITS_SCHEMA, FINDINGS, FINDINGS_SCHEMA, normalize
from stateops.errors import OperationFailed, first_line
from stateops.delta import open_table
from stateops.storage import filesystem
from stateops.layout import Layout

STAMP = pa.timestamp("us", tz="UTC")
SCHEMAS = {AUDITS: AUDITS_SCHEMA, FINDINGS: FINDINGS_SCHEMA, progress.TABLE: progress.SCHEMA}
AUDIT_COLUMNS = ("audit_id", "audited_at", "kind", "checkpoint", "query_id", "batch_id", "watermark",
                 "operator_id", "store_name", "rows_total", "num_partitions")
FINDING_COLUMNS = ("audit_id", "audited_at", "kind", "checkpoint", "query_id", "batch_id", "code", "severity",
                   "operator_id", "store_name", "message", "recommendation", "details_json")
PROGRESS_COLUMNS = ("job", "query_id", "batch_id", "timestamp", "watermark", "state_rows_total")
_FIX = ("Fix: move the table aside (the audits and runs that write it start a new one) or restore it from a "
        "copy; the sensors skip until it reads")


class OpsTableError(OperationFailed):
    """An ops table exists but cannot be read as StateOps writes it."""


def _kind(dtype: pa.DataType) -> str:
    for name, test in (("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
                        or pa.types.is_string_view(t)),
                       ("integer", pa.types.is_integer), ("number", pa.types.is_floating),
                       ("timestamp", pa.types.is_timestamp)):
        if test(dtype):
            return name
    return str(dtype)


def read_ops(layout: Layout, name: str, columns: Sequence[str], rows: pc.Expression | None = None,
             added: Sequence[str] = ()) -> pa.Table | None:
    """`columns` of ops table `name` (the `rows` matching an expression); None when the table does not exist.
    `added`: columns newer than some tables (the first write of a newer StateOps adds them): read as nulls there.

    delta-rs gives the table's files and schema; one pyarrow scan of those files reads them with the
    expression pushed down to their statistics (delta-rs' own scan builds an expression per file, which on
    months of small commits cost seconds a tick). StateOps writes these tables with delta-rs: no deletion
    vectors, no column mapping, so the files are the table."""
    uri = layout.ops_table(name)
    where = f"ops table {name} ({uri})"
    try:
        table = open_table(uri)
        if table is None:
            return None
        actual = pa.schema(table.schema().to_arrow())
    except Exception as err:  # noqa: BLE001 - a damaged log must become a skip reason, never a daemon crash
        raise OpsTableError(f"{where} cannot be opened: {first_line(err)}. {_FIX}") from None
    expected = SCHEMAS[name]
    for column in columns:
        want = _kind(expected.field(column).type)
        if column not in actual.names:
            if column in added:
                continue
            raise OpsTableError(f"{where} has no column {column!r} (schema drift: columns are "
                                f"{', '.join(actual.names)}). {_FIX}")
        got = _kind(actual.field(column).type)
        if got != want:
            raise OpsTableError(f"{where}: column {column!r} holds {got}, StateOps writes {want} (schema drift). {_FIX}")
    try:
        fs, _root = filesystem(uri)
        files = [fs._strip_protocol(f) for f in table.file_uris()]
        return ds.dataset(files, schema=expected, format="parquet", filesystem=getattr(fs, "raw", fs)).to_table(
            columns=list(columns), filter=rows)
    except Exception as err:  # noqa: BLE001 - a corrupt data file, likewise
        raise OpsTableError(f"{where} cannot be read: {first_line(err)}. {_FIX}") from None


@dataclass
class Trail:
    """The deep audits of one query, oldest first: one summary per audit, and its findings."""

    audits: list[dict[str, Any]] = field(default_factory=list)  # audit_id, audited_at, batch_id, watermark,
    # rows_total (all stores), partitions {(operator, store): n}
    findings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def latest(self) -> dict[str, Any] | None:
        return self.audits[-1] if self.audits else None

    def findings_of(self, audit_id: str, codes: Iterable[str] | None = None) -> list[dict[str, Any]]:
        wanted = set(codes) if codes is not None else None
        rows = [f for f in self.findings.get(audit_id, []) if wanted is None or f["code"] in wanted]
        for row in rows:  # parsed when asked for: a trail holds every audit's findings, a decision reads a few
            if "details" not in row:
                row["details"] = json.loads(row["details_json"]) if row["details_json"] else {}
        return rows

    def audit(self, audit_id: str) -> dict[str, Any] | None:
        return next((a for a in self.audits if a["audit_id"] == audit_id), None)


@dataclass(frozen=True)
class Query:
    """A job's current query: its checkpoint (normalized) and the query id in the checkpoint's metadata."""

    job: str
    checkpoint: str
    query_id: str | None


@dataclass(frozen=True)
class Span:
    """How much of a query's audit history a decision reads: its newest `audits` deep audits (a skew streak)
    and every audit within `seconds` of the newest (a growth finding's baseline lies in its window)."""

    audits: int
    seconds: float


def recent_audits(audits: pa.Table, span: Span) -> pa.Table:
    """The rows of the audits `span` keeps, per query (months of hourly audits stay in Arrow, not Python).
    One sort for every query: a filter of the table per query made a tick over n jobs cost n scans."""
    ids = audits.group_by(["query_id", "audit_id"]).aggregate([("audited_at", "max")]).sort_by(
        [("query_id", "ascending"), ("audited_at_max", "descending")])
    queries, audit_ids, times = (ids[c].to_pylist() for c in ("query_id", "audit_id", "audited_at_max"))
    keep: list[str] = []
    start = 0
    while start < len(queries):
        end = start
        while end < len(queries) and queries[end] == queries[start]:
            end += 1
        since = times[start] - _dt.timedelta(seconds=span.seconds)  # the query's newest audit, minus the span
        within = sum(1 for t in times[start:end] if t >= since)
        keep += audit_ids[start:start + max(within, min(span.audits, end - start))]
        start = end
    return audits.filter(pc.field("audit_id").isin(pa.array(keep, type=audits.schema.field("audit_id").type)))


def deep_trails(layout: Layout, queries: Iterable[Query], span: Span) -> dict[str, Trail] | None:
    """Job -> the deep audits of its current query that `span` keeps; None when no audit was ever recorded
    (no table)."""
    queries = list(queries)
    deep_of_queries = (pc.field("kind") == "deep") & pc.field("query_id").isin([q.query_id for q in queries])
    audits = read_ops(layout, AUDITS, AUDIT_COLUMNS, rows=deep_of_queries)
    if audits is None:
        return None
    audits = recent_audits(audits, span)
    findings = read_ops(layout, FINDINGS, FINDING_COLUMNS,
                        rows=deep_of_queries & pc.field("audit_id").isin(pc.unique(audits["audit_id"])))
    wanted = {(normalize(q.checkpoint), q.query_id): q.job for q in queries}
    trails = {q.job: Trail() for q in queries}
    summaries: dict[str, dict[str, Any]] = {}
    for row in audits.to_pylist():
        job = wanted.get((row["checkpoint"], row["query_id"]))
        if job is None:
            continue
        summary = summaries.get(row["audit_id"])
        if summary is None:
            summary = summaries[row["audit_id"]] = {
                "job": job, "audit_id": row["audit_id"], "audited_at": row["audited_at"], "batch_id": row["batch_id"],
                "watermark": row["watermark"], "rows_total": 0, "partitions": {}}
            trails[job].audits.append(summary)
        summary["rows_total"] += row["rows_total"] or 0
        summary["partitions"][(row["operator_id"], row["store_name"])] = row["num_partitions"]
    for trail in trails.values():
        trail.audits.sort(key=lambda a: a["audited_at"])
    for row in ([] if findings is None else findings.to_pylist()):
        summary = summaries.get(row["audit_id"])
        if summary is not None:
            trails[summary["job"]].findings.setdefault(row["audit_id"], []).append(row)
    return trails


def progress_ends(layout: Layout, windows: Mapping[str, _dt.datetime]) -> dict[str, list[dict[str, Any]]] | None:
    """Query id -> the first and the last progress row with state rows in its window (`windows`: query id ->
    the window's start), oldest first: what the growth signal compares. None when no progress was ever
    recorded. The rows between stay in Arrow: a window may hold a day of batches."""
    windows = {q: since for q, since in windows.items() if q}
    since = min(windows.values(), default=None)
    table = read_ops(layout, progress.TABLE, PROGRESS_COLUMNS,
                     rows=None if since is None else (pc.field("timestamp") >= pa.scalar(since, STAMP))
                     & pc.field("query_id").isin(list(windows)) & pc.field("state_rows_total").is_valid())
    if table is None:
        return None
    out: dict[str, list[dict[str, Any]]] = {q: [] for q in windows}
    if not windows or not table.num_rows:
        return out
    starts = pa.table({"query_id": pa.array(list(windows), type=table.schema.field("query_id").type),
                       "window_start": pa.array(list(windows.values()), type=STAMP)})
    # Each row against its own query's window, then one sort: a filter per query scanned the table n times.
    rows = table.join(starts, keys="query_id").filter(pc.field("timestamp") >= pc.field("window_start"))
    rows = rows.drop_columns(["window_start"]).sort_by(
        [("query_id", "ascending"), ("timestamp", "ascending"), ("batch_id", "ascending")])
    queries, ends = rows["query_id"].to_pylist(), []
    for i, query_id in enumerate(queries):
        first = i == 0 or queries[i - 1] != query_id
        last = i == len(queries) - 1 or queries[i + 1] != query_id
        if first or last:  # a query's first and last row (one row: once)
            ends.append(i)
    for row in rows.take(ends).to_pylist():
        out[row["query_id"]].append(row)
    return out


LATEST_COLUMNS = ("job", "query_id", "batch_id", "timestamp")
# what a job's asset shows of its newest batch between runs (stateops.remediation.observed)
HEALTH_COLUMNS = (*LATEST_COLUMNS, "input_rows", "batch_duration_ms", "watermark", "state_rows_total", "kafka_lag")


def latest_batches(layout: Layout, columns: Sequence[str] = LATEST_COLUMNS) -> dict[str, dict[str, Any]] | None:
    """Job -> its newest progress row (`columns`, at least LATEST_COLUMNS); None when there is no progress table."""
    table = read_ops(layout, progress.TABLE, columns, added=("kafka_lag",))
    if table is None:
        return None
    if not table.num_rows:
        return {}
    newest = table.select(["job", "timestamp"]).group_by("job").aggregate([("timestamp", "max")])
    joined = table.join(newest, keys=["job"]).filter(
        pc.equal(pc.field("timestamp"), pc.field("timestamp_max")))
    out: dict[str, dict[str, Any]] = {}
    for row in joined.select([c for c in columns if c in table.column_names]).to_pylist():
        if row["job"] not in out or row["batch_id"] > out[row["job"]]["batch_id"]:
            out[row["job"]] = row
    return out


def latest_audits(layout: Layout, queries: Iterable[Query]) -> dict[str, dict[str, Any]]:
    """Job -> its current query's newest audit, fast or deep (audit_id, kind, audited_at, batch_id) with its
    findings (code, severity), from one read of each table for every job; jobs never audited are absent."""
    queries = [q for q in queries if q.query_id]
    ofs = pc.field("query_id").isin([q.query_id for q in queries])
    audits = read_ops(layout, AUDITS, ("audit_id", "audited_at", "kind", "checkpoint", "query_id", "batch_id"),
                      rows=ofs) if queries else None
    if audits is None or not audits.num_rows:
        return {}
    newest = audits.group_by(["query_id"]).aggregate([("audited_at", "max")])
    latest = audits.join(newest, keys=["query_id"]).filter(pc.equal(pc.field("audited_at"), pc.field("audited_at_max")))
    wanted = {(normalize(q.checkpoint), q.query_id): q.job for q in queries}
    out: dict[str, dict[str, Any]] = {}
    for row in latest.select(["audit_id", "audited_at", "kind", "checkpoint", "query_id", "batch_id"]).to_pylist():
        job = wanted.get((row["checkpoint"], row["query_id"]))
        if job is not None:
            out[job] = {k: row[k] for k in ("audit_id", "audited_at", "kind", "batch_id")} | {"findings": []}
    ids = {a["audit_id"]: job for job, a in out.items()}
    findings = read_ops(layout, FINDINGS, ("audit_id", "code", "severity"),
                        rows=pc.field("audit_id").isin(list(ids))) if ids else None
    for row in ([] if findings is None else findings.to_pylist()):
        out[ids[row["audit_id"]]]["findings"].append({"code": row["code"], "severity": row["severity"]})
    return out


def recent_kafka_lags(layout: Layout, batches: int) -> dict[str, list[int]]:
    """Job -> the total Kafka lag of its stateful query's newest `batches` batches, oldest first (one read of
    the progress table for all jobs; jobs without a Kafka source are absent)."""
    table = read_ops(layout, progress.TABLE, ("job", "query_name", "batch_id", "kafka_lag"), added=("kafka_lag",))
    if table is None or not table.num_rows:
        return {}
    return {job: kafka_lag.totals(rows)[-batches:] for job, rows in kafka_lag.stateful_rows_by_job(table).items()}


def newest_file(folders: Iterable[str]) -> _dt.datetime | None:
    """Modification time of the newest visible file in `folders` (one listing each; missing folders count as
    empty); hidden and `_` files (temporary files, the generator's manifest) are left out."""
    newest = None
    for folder in folders:
        fs, root = filesystem(folder)
        if not fs.exists(root):
            continue
        for info in fs.ls(root, detail=True):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") != "file" or name.startswith((".", "_")):
                continue
            moment = _mtime(info)
            if moment is not None and (newest is None or moment > newest):
                newest = moment
    return newest


def _mtime(info: Mapping[str, Any]) -> _dt.datetime | None:
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if isinstance(value, _dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
    if isinstance(value, (int, float)):
        return _dt.datetime.fromtimestamp(value, tz=_dt.timezone.utc)
    return None
