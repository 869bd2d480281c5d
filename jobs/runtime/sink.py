"""foreachBatch targets: exactly-once Delta writes (MERGE for update mode, append otherwise).

After a runbook restart the app id carries the sink epoch; right after a rebuild, rows below the write
floor are dropped and append rows that may repeat rows already in the table are inserted only where their
idempotent key is absent (stateops.sinkstate explains both). Normal appends stay plain appends.

The writer is delta-rs from the driver (the default) or Delta's own Spark writer (`STATEOPS_DELTA_WRITER=spark`,
stateops.jobs.runtime.session), with Delta's idempotent-write options; both record and honour the same Delta transaction
(app_id, batch_id), so a table written by one is skipped alike by the other.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.delta import open_table, write_batch
from stateops.faults import fault_point
from stateops.profile.parts import PLAN_RUN, Laps
from stateops.sinkstate import SinkState, query_app_id


TXN_APP_ID, TXN_VERSION = "spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion"
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"  # a MERGE's source column the table lacks is added
# Rows per file Delta's Spark writer is given (the batch is coalesced to ceil(rows / this) partitions, at most
# its own): a 2,000-row micro-batch of 4 partitions was 4 files at every commit, and the next MERGE read them all.
ROWS_PER_FILE = 1_000_000


def write_with_jvm(df: DataFrame, uri: str, app_id: str, batch_id: int, merge_keys: Sequence[str],
                    insert_only: bool = False, table_exists: bool | None = None,
                    stats_columns: Sequence[str] = (), laps: Laps | None = None) -> int:
    """One Delta commit per batch by Delta's own Spark writer (files written by the executors); returns the rows
    written (an append: the batch's rows; a MERGE: the rows it inserted or updated, 0 when Delta skipped it; 0:
    nothing committed). `table_exists`: when the caller knows, Delta is not asked again. `stats_columns`: the
    columns a table this write creates keeps file statistics for (`delta.dataSkippingStatsColumns`; default:
    Delta's first 32): every MERGE reads the statistics of every file of the table, and parsing five columns'
    instead of two cost about 0.25 s of a 20,000-event micro-batch (BENCHMARKS.md, Delta sink). `laps`: the batch
    writer's stopwatch (stateops.profile.parts), lapped once the plan ran.

    The batch is copied first (`localCheckpoint`: the micro-batch's plan runs once, its state stores commit) and
    counted on the copy; an empty batch commits nothing, the write reads the copy, coalesced to one partition per
    ROWS_PER_FILE rows (fewer, larger files: the next MERGE scans them all), and the copy is freed after it.

    An append carries `txnAppId`/`txnVersion`: Delta skips a version it has recorded for that app id. A MERGE
    is made idempotent only through the session's txn settings (MergeIntoCommand reads no options); they are set
    for this MERGE and cleared after it, or a second MERGE of the same session and version (another sink of the
    batch) would be skipped as done. The MERGE reads the copy as it is (`materializeSource=none`): Delta would
    otherwise copy the source once more before reading it twice (BENCHMARKS.md, Delta sink). A cached batch
    instead of the copy is refused by Delta's MERGE (DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION) and, with that
    check off, made the micro-batch 1.3 -> 2.0 s. A column of the batch the table lacks (an output column a changed
    query added) is added to the table, by the append's `mergeSchema` and the MERGE's schema auto-merge: without it
    Delta's MERGE dropped the column's values silently.
    """
    spark = df.sparkSession
    batch = df.localCheckpoint(eager=True)  # the plan runs here, once
    if laps is not None:
        laps.lap(PLAN_RUN)
    try:
        rows = batch.count()                # counted on the copy
        if not rows:
            return 0
        source = batch.coalesce(max(1, -(-rows // ROWS_PER_FILE)))
        if table_exists is None:
            table_exists = _jvm_delta_table(spark).isDeltaTable(spark._jsparkSession, uri)
        if merge_keys and table_exists:
            return _merge(spark, source, uri, app_id, batch_id, merge_keys, insert_only)
        writer = source.write.format("delta").mode("append").option("mergeSchema", "true")
        if stats_columns and not table_exists:
            writer = writer.option("delta.dataSkippingStatsColumns", ",".join(stats_columns))
        writer.option("txnAppId", app_id).option("txnVersion", batch_id).save(uri)
        return rows
    finally:
        _drop_copy(batch)


def _drop_copy(batch: DataFrame) -> None:
    """Free a `localCheckpoint` copy now. Its blocks are otherwise freed when the driver's garbage collector
    drops the Dataset, at worst every `spark.cleaner.periodicGC.interval` (30 minutes): half an hour of
    micro-batches held by the executors. PySpark has no call for it; the copy is the RDD of the copy's plan."""
    plan = batch._jdf.queryExecution().analyzed()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)


def _jvm_delta_table(spark):
    """Delta's own `io.delta.tables.DeltaTable` (Scala), called through Py4J as delta-spark's Python package does:
    that package pins pyspark to the release it was built with (delta-spark 4.4: pyspark<=4.2.0), so depending on
    it would refuse every Spark patch release (docs/design.md, Dependencies)."""
    return spark._jvm.io.delta.tables.DeltaTable


def _merge(spark, source: DataFrame, uri: str, app_id: str, batch_id: int, merge_keys: Sequence[str],
           insert_only: bool) -> int:
    confs = {TXN_APP_ID: app_id, TXN_VERSION: str(batch_id), MATERIALIZE_SOURCE: "none", AUTO_MERGE: "true"}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        condition = " AND ".join(f"t.{k} = s.{k}" for k in merge_keys)
        merge = _jvm_delta_table(spark).forPath(spark._jsparkSession, uri).alias("t").merge(
            source.alias("s")._jdf, condition)
        merge = merge if insert_only else merge.whenMatched().updateAll()
        metrics = DataFrame(merge.whenNotMatched().insertAll().execute(), spark)
    finally:
        for key in confs:
            spark.conf.unset(key)
    done = metrics.first()  # none when Delta skipped a version it had recorded
    return int(done["num_affected_rows"]) if done is not None else 0


def _millis(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        return pc.cast(pc.cast(column, pa.timestamp("ms")), pa.int64())
    return pc.cast(column, pa.int64())


@dataclass
class DeltaSink:
    """Writes each micro-batch once into `table_uri`; counts rows and batches skipped as already written
    (delta-rs path), and remembers the Delta version."""

    job: str
    table_uri: str
    checkpoint: str
    merge_keys: tuple[str, ...] = ()
    use_jvm: bool = False
    sink: SinkState = field(default_factory=SinkState)  # epoch and, after a rebuild, its replay rules
    row_key: tuple[str, ...] = ()          # append sinks: the idempotent key (insert-if-absent on replays)
    time_column: str | None = None         # where a row's event-time span starts (write floor, replay horizon)
    rows_written: int = 0
    batches_skipped: int = 0
    version: int | None = None
    _app_id: str | None = field(default=None, repr=False)
    _written_upto: int | None = field(default=None, repr=False)  # JVM path: the newest batch in the table
    _table_exists: bool = field(default=False, repr=False)
    _query: str | None = field(default=None, repr=False)
    laps: Laps = field(default_factory=Laps, repr=False)  # the batch writer's stopwatch: lapped once the plan ran

    def app_id(self) -> str:
        if self._app_id is None:
            self._app_id = query_app_id(self.job, self.checkpoint, self.sink.epoch)
        return self._app_id

    def _query_id(self) -> str:
        if self._query is None:
            self._query = Checkpoint(self.checkpoint).query_id()
        return self._query

    def _skip(self, df: DataFrame) -> None:
        """A batch the table holds: it still runs, written nowhere. Spark 4.2 fails a batch whose state stores did
        not all commit (STATE_STORE_COMMIT_VALIDATION_FAILED), and only running the plan commits them."""
        df.write.format("noop").mode("overwrite").save()
        self.laps.lap(PLAN_RUN)
        self.batches_skipped += 1

    def stats_columns(self) -> tuple[str, ...]:
        """What a table created by Delta's Spark writer keeps statistics for: the keys a MERGE or a replay
        matches on and the event-time column (retention and readers skip files by it)."""
        return tuple(dict.fromkeys(self.merge_keys + self.row_key + ((self.time_column,) if self.time_column else ())))

    def _replayed(self, data: pa.Table) -> tuple[pa.Table, bool]:
        """After a rebuild: drop rows below the write floor; insert-if-absent when a row may be a repeat."""
        if self.time_column is None or self.time_column not in data.column_names or data.num_rows == 0:
            return data, self.sink.insert_if_absent_until_ms is not None and bool(self.row_key)
        times = _millis(data.column(self.time_column))
        if self.sink.write_floor_ms is not None:
            data = data.filter(pc.greater_equal(times, self.sink.write_floor_ms))
            times = _millis(data.column(self.time_column))
        horizon = self.sink.insert_if_absent_until_ms
        repeats = horizon is not None and bool(self.row_key) and data.num_rows > 0 and pc.min(times).as_py() <= horizon
        return data, repeats

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.sink.adopted_query is not None and self.sink.already_written(self._query_id(), batch_id):
            self._skip(df)  # an adopted job's batch in flight that the old query wrote (stateops.adoption)
            return
        where = {"job": self.job, "table": posixpath.basename(self.table_uri.rstrip("/")), "batch": batch_id}
        if self.use_jvm:
            self._write_jvm(df, batch_id, where)
            return
        batch = df.toArrow()  # the plan runs here
        self.laps.lap(PLAN_RUN)
        data, repeats = self._replayed(batch)
        if data.num_rows == 0:
            return
        fault_point("sink.before_commit", **where)
        result = write_batch(self.table_uri, data, app_id=self.app_id(), batch_id=batch_id,
                             merge_keys=self.row_key if repeats else self.merge_keys, insert_only=repeats)
        self.rows_written += result.rows
        self.batches_skipped += int(result.skipped)
        self.version = result.version
        if not result.skipped:
            # Crash tests stop here: the batch is in Delta, Spark's commit log does not know it yet.
            fault_point("sink.after_commit", **where)

    def _write_jvm(self, df: DataFrame, batch_id: int, where: dict) -> None:
        """Delta's Spark writer. The table is read once per run, at the first batch: only a run's first batch
        can be one the table already holds (a batch re-run after a crash; one run writes a query's batches at a
        time, under the job's lease), and Delta's own txn check still guards every commit."""
        if self._written_upto is None:
            table = open_table(self.table_uri)
            self._table_exists = table is not None
            done = table.transaction_version(self.app_id()) if table is not None else None
            self._written_upto = -1 if done is None else done
        if batch_id <= self._written_upto:
            self._skip(df)
            return
        if self.sink.write_floor_ms is not None and self.time_column:
            df = df.where(F.col(self.time_column) >= F.timestamp_millis(F.lit(self.sink.write_floor_ms)))
        fault_point("sink.before_commit", **where)
        replay = self.sink.insert_if_absent_until_ms is not None and bool(self.row_key)
        rows = write_with_jvm(df, self.table_uri, self.app_id(), batch_id,
                               self.row_key if replay else self.merge_keys, insert_only=replay,
                               table_exists=self._table_exists, stats_columns=self.stats_columns(),
                               laps=self.laps)
        self.rows_written += rows
        self._written_upto = batch_id
        self._table_exists = self._table_exists or rows > 0
        if rows:
            fault_point("sink.after_commit", **where)
