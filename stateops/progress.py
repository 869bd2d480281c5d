"""The `progress` ops table: one row per micro-batch progress event of any StateOps query.

Rows come from Spark's StreamingQueryProgress JSON; turning it into a row is pure logic so that
sensors and fast audits read it later with pyarrow only (no JVM). They are written in small groups
(ProgressBuffer), not one Delta commit per batch, and retention compacts the table and rolls up old rows.

An idle query runs no batch and reports no progress: Spark posts a QueryIdleEvent instead. The run keeps
its queries' latest idle reports in one small control record per job (`ops/<job>/control/idle.json`,
written at once, not buffered): a runbook reads it to know the query it restarted is alive and has
looked at its source since (stateops.recovery.verify.caught_up).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from stateops import kafka_lag
from stateops.control.fence.lease import LeaseLostError
from stateops.control.store import ControlStore
from stateops.delta import append_rows, open_table, read_table, scan
from stateops.environment import numbers
from stateops.layout import Layout
from stateops.checkpoints.restart_cost import LOADED, RestartCost, restart_cost
from stateops.profile.parts import CORES, PARTS
from stateops.timefmt import spark_instant

TABLE = "progress"
ROLLUP_TABLE = "progress_rollup"  # hourly rollups of rows past the retention horizon (stateops.retention)
log = logging.getLogger(__name__)
# How long a run that lost its lease waits for a progress append already under way before it says it writes nothing
# more: an append is a few requests; a store that slow or out of reach is named in the warning instead.
SILENCE_WAIT_SECONDS = 30.0

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
    ("kafka_lag", pa.int64()),        # records behind the latest offset over every Kafka partition (stateops.kafka_lag)
    ("kafka_lag_json", pa.string()),  # the same per topic/partition; both null for other sources
    ("parts_json", pa.string()),      # the batch's time in parts (stateops.profile.parts); null in older rows
    ("cores", pa.int64()),            # the cores the run's tasks shared (Spark's defaultParallelism); null in older rows
    # stores Spark loaded from the checkpoint in the batch (RocksDB's, every operator): a start's first batch, whose
    # load rates estimate the next start's (stateops.checkpoints.restart_cost); null in older rows and other stores
    ("state_loads", pa.int64()),
])


def rows_untracked(progress: dict[str, Any]) -> None:
    """Marks the event's state row counts unknown (None), in place: with RocksDB's trackTotalNumberOfRows off,
    Spark reports numRowsTotal 0 for every operator, which would read as an empty state to the fast audit, the
    growth signal and the asset metadata. They then take the state's size from its files, and its rows from
    the deep audit (Spark's state reader), as they do for a join's stores."""
    for op in progress.get("stateOperators", []):
        op["numRowsTotal"] = None


def state_rows(ops: list[dict[str, Any]]) -> int | None:
    """The rows of every operator's state, None when a count is unknown (rows_untracked)."""
    counts = [op["num_rows_total"] for op in ops]
    return None if None in counts else sum(counts)


def operator_metrics(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """Per stateful operator: the numbers an operator is paged about (num_rows_total None: not counted)."""
    return [
        {
            "operator_name": op.get("operatorName"),
            "num_rows_total": op.get("numRowsTotal", 0),
            "num_rows_updated": op.get("numRowsUpdated", 0),
            "memory_used_bytes": op.get("memoryUsedBytes", 0),
            "num_rows_dropped_by_watermark": op.get("numRowsDroppedByWatermark", 0),
            "num_rows_removed": op.get("numRowsRemoved", 0),
            "commit_time_ms": op.get("commitTimeMs", 0),         # the state's checkpoint: its stores' commit
            "all_updates_time_ms": op.get("allUpdatesTimeMs", 0),  # the operator's updates of its stores
            "all_removals_time_ms": op.get("allRemovalsTimeMs", 0),  # its eviction (cleanup) scan
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
    lag = kafka_lag.partition_lag(progress)
    return {
        "job": job,
        "query_name": progress.get("name"),
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "stateops_run_id": stateops_run_id,
        "batch_id": progress.get("batchId"),
        "timestamp": spark_instant(progress.get("timestamp")),
        "input_rows": progress.get("numInputRows", 0),
        "batch_duration_ms": progress.get("batchDuration", durations.get("triggerExecution", 0)),
        "durations_json": json.dumps(durations, sort_keys=True),
        "watermark": spark_instant(progress.get("eventTime", {}).get("watermark")),
        "event_time_max": spark_instant(progress.get("eventTime", {}).get("max")),
        "state_rows_total": state_rows(ops),
        "state_rows_updated": sum(op["num_rows_updated"] for op in ops),
        "state_memory_bytes": sum(op["memory_used_bytes"] for op in ops),
        "rows_dropped_by_watermark": sum(op["num_rows_dropped_by_watermark"] for op in ops),
        "state_operators_json": json.dumps(ops, sort_keys=True),
        "sources_json": json.dumps(source_offsets(progress), sort_keys=True),
        "kafka_lag": sum(lag.values()) if lag else None,
        "kafka_lag_json": json.dumps(lag, sort_keys=True) if lag else None,
        "parts_json": json.dumps(progress[PARTS]) if progress.get(PARTS) is not None else None,
        "cores": progress.get(CORES),
        "state_loads": _state_loads(ops),
    }


def _state_loads(ops: list[dict[str, Any]]) -> int | None:
    counts = [op["custom_metrics"][LOADED] for op in ops if LOADED in op["custom_metrics"]]
    return sum(counts) if counts else None


def operators(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A progress row's stateful operators, as operator_metrics wrote them."""
    return json.loads(row.get("state_operators_json") or "[]")


def start_rows(layout: Layout, jobs: Iterable[str], limit: int = 20) -> dict[str, list[dict[str, Any]]]:
    """Job -> its latest `limit` batches in which Spark loaded stores from the checkpoint (a start's first batch),
    oldest first, from one read filtered on state_loads: a continuous job's starts are rare among its batches."""
    wanted = sorted(set(jobs))
    table = open_table(layout.ops_table(TABLE)) if wanted else None
    if table is None or "state_loads" not in table.schema().to_arrow().names:
        return {}
    rows = scan(table, ["job", "batch_id", "timestamp", "cores", "state_loads", "state_operators_json"],
                [("job", "in", wanted), ("state_loads", ">", 0)]).to_pylist()
    rows.sort(key=lambda r: (r["timestamp"] is None, r["timestamp"], r["batch_id"]))
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["job"], []).append(row)
    return {job: found[-limit:] for job, found in out.items()}


def next_start(checkpoint: str, layout: Layout | None, job: str | None, recent: Iterable[dict[str, Any]] = (),
               starts: list[dict[str, Any]] | None = None) -> RestartCost | None:
    """What the next start of the checkpoint's query loads and its estimate, at the rates of the job's earlier
    starts (`starts`: start_rows of the job, read here when not given; `recent`: its newest rows, for the cores)."""
    if starts is None:
        starts = start_rows(layout, [job]).get(job, []) if layout is not None and job else []
    return restart_cost(checkpoint, (operators(r) for r in starts), latest_cores([*starts, *recent]))


def latest_cores(rows: Iterable[dict[str, Any]]) -> int | None:
    """The cores the newest of `rows` that recorded them ran on."""
    found = [r for r in rows if r.get("cores")]
    return max(found, key=lambda r: (r["timestamp"] is not None, r["timestamp"], r["batch_id"]))["cores"] if found else None


def append(layout: Layout, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if rows:
        append_rows(layout.ops_table(TABLE), pa.Table.from_pylist(rows, schema=SCHEMA))


def read(layout: Layout, job: str | None = None) -> pa.Table:
    filters = [("job", "=", job)] if job else None
    table = read_table(layout.ops_table(TABLE), filters=filters)
    return table if table is not None else SCHEMA.empty_table()


def kafka_lags(layout: Layout) -> dict[str, dict[str, Any]]:
    """Job -> the Kafka lag of its stateful query's newest batch that has one (stateops.kafka_lag.latest), from
    one read of the progress table for every job; jobs without a Kafka source are absent."""
    table = open_table(layout.ops_table(TABLE))
    if table is None or "kafka_lag" not in table.schema().to_arrow().names:
        return {}
    data = scan(table, ["job", "query_name", "batch_id", "kafka_lag", "kafka_lag_json"])
    return {job: kafka_lag.latest(rows) for job, rows in kafka_lag.stateful_rows_by_job(data).items()}


def query_batches(uri: str, query_id: str) -> list[dict[str, Any]]:
    """Every recorded batch of one query (batch_id, run_id, timestamp, watermark, sources), oldest first.

    Tables written before sources were recorded have no sources column: those batches get sources None.
    """
    table = open_table(uri)
    if table is None:
        return []
    names = set(table.schema().to_arrow().names)
    columns = [c for c in ("batch_id", "run_id", "timestamp", "watermark", "sources_json") if c in names]
    rows = scan(table, columns, [("query_id", "=", query_id)]).to_pylist()
    for row in rows:
        text = row.pop("sources_json", None)
        row["sources"] = json.loads(text) if text else None
    rows.sort(key=lambda r: (r["timestamp"] is None, r["timestamp"], r["batch_id"]))
    return rows


FLUSH_ENV = {"flush_seconds": "STATEOPS_PROGRESS_FLUSH_SECONDS", "flush_rows": "STATEOPS_PROGRESS_FLUSH_ROWS"}


@dataclass(frozen=True)
class FlushSettings:
    """How long a progress row may wait in the buffer, and how many rows make a group. Environment:
    STATEOPS_PROGRESS_FLUSH_SECONDS (30) and STATEOPS_PROGRESS_FLUSH_ROWS (100)."""

    flush_seconds: float = 30.0
    flush_rows: int = 100
    max_rows: int = 10_000  # a buffer that cannot be written (storage down) drops its oldest rows beyond this

    @classmethod
    def from_env(cls) -> "FlushSettings":
        return cls(**numbers(FLUSH_ENV, integers=("flush_rows",), above=tuple(FLUSH_ENV)))


class ProgressBuffer:
    """Progress rows appended in small groups instead of one Delta commit per micro-batch.

    A group is committed when it holds `flush_rows` rows or its oldest row has waited `flush_seconds`
    (a background thread sees to the latter), and on `close()`: nothing is lost on a clean stop, and a
    crash loses at most the buffer (the next run notes the gap: `unrecorded_batches`). A failed append
    keeps its rows for the next attempt; rows that are finally given up (at close, or beyond `max_rows`)
    are counted in `failures` and each logged as a warning. Thread-safe.
    """

    def __init__(self, layout: Layout, settings: FlushSettings, *, name: str = "progress",
                 guard: Callable[[], None] | None = None):
        self.layout, self.settings = layout, settings
        self.guard = guard  # called before each append; raises LeaseLostError when the run's lease is gone
        self.rows: list[dict[str, Any]] = []
        self.failures = 0
        self.commits = 0
        self._error: Exception | None = None
        self._silenced: str | None = None  # why nothing more is written (`silence`)
        self._since: float | None = None
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._tick, name=f"stateops-{name}-flush", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        period = min(1.0, self.settings.flush_seconds / 4)
        while not self._done.wait(period):
            with self._lock:
                due = self._since is not None and time.monotonic() - self._since >= self.settings.flush_seconds
            if due:
                self.flush()

    def add(self, row: dict[str, Any]) -> None:
        with self._lock:
            if self._silenced is not None:
                self._give_up([row], self._silenced)
                return
            self.rows.append(row)
            if self._since is None:
                self._since = time.monotonic()
            overflow = len(self.rows) - self.settings.max_rows
            if overflow > 0:
                self._give_up(self.rows[:overflow], "the buffer is full")
                del self.rows[:overflow]
            full = len(self.rows) >= self.settings.flush_rows
        if full:
            self.flush()

    def flush(self) -> bool:
        """Append the buffered rows in one commit; False (rows kept) when the append failed."""
        with self._lock:
            if not self.rows:
                return True
            if self._silenced is not None:
                self._give_up(self.rows, self._silenced)
                self.rows, self._since = [], None
                return False
            try:
                if self.guard is not None:
                    self.guard()
                append(self.layout, self.rows)
            except LeaseLostError:
                self.silence("the run lost its lease and writes nothing more")
                return False
            except Exception as err:  # noqa: BLE001 - the query must not stop for its progress rows
                self._error = err
                log.warning("%d progress row(s) not appended to %s yet (will retry): %s", len(self.rows),
                            self.layout.ops_table(TABLE), err)
                return False
            self.commits += 1
            self.rows, self._since = [], None
            return True

    def _give_up(self, rows: list[dict[str, Any]], why: str) -> None:
        self.failures += len(rows)
        for row in rows:
            log.warning("%s: progress of query %s batch %s not recorded in %s (%s): %s", row.get("job"),
                        row.get("query_name"), row.get("batch_id"), self.layout.ops_table(TABLE), why, self._error)

    def silence(self, why: str, wait_seconds: float = SILENCE_WAIT_SECONDS) -> None:
        """Write nothing more, from now on (a run that lost its lease: whatever it appended after that would come
        from a holder another run has replaced): the buffered rows, and any added later, are given up. An append
        already under way ends first (it holds the lock), waited for up to `wait_seconds`: one held longer by a
        store out of reach may still land, and the warning says so."""
        self._silenced = why  # before the lock: no flush starts an append from now on
        if not self._lock.acquire(timeout=wait_seconds):
            log.warning("%d progress row(s) being appended to %s for more than %g s may still land (%s)",
                        len(self.rows), self.layout.ops_table(TABLE), wait_seconds, why)
            return
        try:
            self._give_up(self.rows, why)
            self.rows, self._since = [], None
        finally:
            self._lock.release()

    def close(self, write: bool = True) -> None:
        """Stop the timer and write what is left (unless not `write`: a run that lost its lease); rows that
        still cannot be written are counted as failures."""
        self._done.set()
        self._thread.join(timeout=10)
        if not write:
            self.silence("the run lost its lease and writes nothing more")
            return
        with self._lock:
            if not self.flush():
                self._give_up(self.rows, "at the end of the run")
                self.rows, self._since = [], None


def last_recorded_batch(layout: Layout, query_id: str) -> int | None:
    """The newest batch of `query_id` in `progress` or its hourly rollups (None: no row at all)."""
    newest = None
    for name, column in ((TABLE, "batch_id"), (ROLLUP_TABLE, "last_batch_id")):
        table = read_table(layout.ops_table(name), columns=[column], filters=[("query_id", "=", query_id)])
        if table is not None and table.num_rows:
            value = pc.max(table[column]).as_py()
            newest = value if newest is None or (value is not None and value > newest) else newest
    return newest


def unrecorded_batches(layout: Layout, query_id: str, latest_committed: int) -> range:
    """Batches the checkpoint committed after the newest recorded progress row of its query: rows a crashed
    run still held in its buffer (or failed to write). Empty when the query has no row at all."""
    newest = last_recorded_batch(layout, query_id)
    if newest is None or newest >= latest_committed:
        return range(0)
    return range(newest + 1, latest_committed + 1)


IDLE_RECORD = "idle"


def record_idle(layout: Layout, job: str, run_id: str, queries: dict[str, dict[str, Any]]) -> None:
    """Replace the job's idle record with run `run_id`'s latest idle report per query name: {query_id,
    spark_run_id, idle_at (the idle trigger's time, Spark's), after_batch (the last batch the query
    completed in this run before it, None: none)}. One writer: the run holding the lease."""
    store = ControlStore(layout, job)
    with store.critical():
        store.write(IDLE_RECORD, {"job": job, "run_id": run_id, "queries": queries})


def idle_report(layout: Layout, job: str, run_id: str, query_name: str) -> dict[str, Any] | None:
    """Query `query_name`'s latest idle report in run `run_id` (see record_idle); None when it has made none."""
    record = ControlStore(layout, job).read(IDLE_RECORD)
    if record is None or record.get("run_id") != run_id:
        return None
    return record.get("queries", {}).get(query_name)
