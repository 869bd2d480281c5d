"""Deep audit: Spark's State Reader API over every operator and store of a checkpoint at one batch.

`state-metadata` lists operators, stores, partitions and the batch range; then each store is read once
with the `statestore` format and reduced by a single `groupBy(partition_id)` that yields, per partition,
the row count, key and value sizes, rows already behind the watermark, unmatched join rows, the oldest
event time and the top-N rows by value size (`max_by(..., k)`). Stores are read concurrently (one Spark
job each), so the audit costs about what the plain "read + groupBy count" notebook costs.

top_keys is computed only for stores whose values can differ in size (strings, binaries, arrays, maps):
with fixed-width values every row has the same value size, so there is nothing to rank, and skipping
`max_by(..., k)` keeps the plan a hash aggregate (max_by with k plans as a sort aggregate, i.e. a sort
of the whole store).

Sizes are UnsafeRow sizes (the state store's row encoding, before compression): 8-byte null words,
8 bytes per field, variable-length data rounded up to 8 bytes. Arrays and maps are approximated by their
JSON length.
"""
from __future__ import annotations

import datetime as _dt
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from stateops.audit.context import AuditContext, build_context
from stateops.audit.findings import (CONFIGURED_GRACE, evaluate, latest_state_memory, operator_progress, operator_times,
                                     unreadable_finding)
from stateops.checkpoints.operators import files_by_store
from stateops.audit.model import AuditReport, OperatorAudit, audit_json, skew_ratio
from stateops.checkpoints.profile import JOIN_KEY_TIME, NUM_VALUES_STORE, VALUES_STORES, StoreProfile, profile
from stateops.audit.thresholds import Thresholds
from stateops import kafka_lag
from stateops.errors import OperationFailed, first_line
from stateops.checkpoints.sparkstate import (ensure_state_coordinator, join_state_format, listed_stores, readable_units,
                                            reading_format)
from stateops.joins import SIDES, JoinBound
from stateops import progress as progress_table
from stateops.layout import Layout

MAX_PARALLEL_READS = 4


class StateReadError(OperationFailed):
    """Spark could not read a store of the checkpoint at the requested batch."""


@dataclass(frozen=True)
class StoreRef:
    operator_id: int
    operator_name: str
    store_name: str  # the store, or the transformWithState variable
    num_partitions: int
    min_batch_id: int | None
    max_batch_id: int | None
    options: tuple[tuple[str, str], ...]
    files_store: str | None  # the store whose files on disk this entry reports (None: reported elsewhere)


def store_refs(spark, ctx: AuditContext) -> list[StoreRef]:
    if not ctx.checkpoint.operator_ids():
        return []
    listed, undescribed = listed_stores(spark, ctx.checkpoint)
    if undescribed:  # never an audit that leaves out state it holds without saying so
        raise StateReadError(
            f"{ctx.checkpoint.path}: operator(s) {undescribed} hold state under state/ but neither Spark's "
            f"state-metadata nor their schema files describe them (checkpoint format "
            f"{ctx.checkpoint.checkpoint_format(ctx.batch_id)}): the deep audit cannot read them. Fix: `stateops "
            "audit --fast` for their files, or run the query once more so Spark writes their operator metadata")
    # state-metadata keeps the count an operator was created with (also after an offline repartition):
    # count the partitions that wrote the audited version instead.
    counted = ctx.checkpoint.state_partitions(ctx.batch_id)
    join_format = join_state_format(ctx.checkpoint.batch_metadata(ctx.batch_id).get("conf", {}))
    refs: list[StoreRef] = []
    for row in sorted(listed, key=lambda r: (r.operator_id, r.store_name)):
        partitions = counted.get((row.operator_id, row.store_name), row.num_partitions)
        units = readable_units(row.operator_id, row.store_name, row.properties, row.operator_name, join_format)
        # transformWithState's variables share the store's files: the first reports them.
        refs += [StoreRef(row.operator_id, row.operator_name, label, partitions, row.min_batch_id, row.max_batch_id,
                          options, row.store_name if i == 0 else None) for i, (label, options) in enumerate(units)]
    return refs


# --- sizes ----------------------------------------------------------------------------------------------

def _round8(col):
    from pyspark.sql import functions as F

    return (col + F.lit(7)).bitwiseAND(F.lit(-8))


def _var_size(col, dtype):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(dtype, (T.StringType, T.BinaryType)):
        return _round8(F.coalesce(F.octet_length(col), F.lit(0)))
    if isinstance(dtype, T.StructType):
        return F.when(col.isNull(), F.lit(0)).otherwise(row_size(col, dtype))
    if isinstance(dtype, (T.ArrayType, T.MapType)):
        return _round8(F.coalesce(F.octet_length(F.to_json(col)), F.lit(0)))
    if isinstance(dtype, T.DecimalType) and dtype.precision > 18:
        return F.lit(16)
    if isinstance(dtype, T.CalendarIntervalType):
        return F.lit(16)
    return None  # fixed width: lives in the 8-byte slot


def constant_size(dtype) -> bool:
    """True when every value of this type has the same UnsafeRow size (no strings, binaries, arrays, maps)."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return all(constant_size(f.dataType) for f in dtype.fields)
    return not isinstance(dtype, (T.StringType, T.BinaryType, T.ArrayType, T.MapType))


def row_size(col, dtype):
    """UnsafeRow size of a struct column, as a Spark expression."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if not isinstance(dtype, T.StructType):
        size = _var_size(col, dtype)
        return F.lit(8) if size is None else size + F.lit(8)
    n = len(dtype.fields)
    total = F.lit(8 * ((n + 63) // 64) + 8 * n)
    for f in dtype.fields:
        size = _var_size(col.getField(f.name), f.dataType)
        if size is not None:
            total = total + size
    return total


# --- one pass over a store ------------------------------------------------------------------------------

def _join_grace(ref: StoreRef, join_bound: JoinBound | None, t: Thresholds, job: str | None) -> tuple[int, str]:
    """(seconds, source) a join value store's rows may lie behind the watermark and still match."""
    side = ref.store_name.split("-", 1)[0]
    if join_bound is not None and side in SIDES:
        return join_bound.wait_seconds(side), f"the {side} side's wait under the join's time bound" + (
            f" (job {job})" if job else "")
    return t.join_eviction_grace_seconds, CONFIGURED_GRACE


def _event_time_exprs(prof: StoreProfile, ctx: AuditContext, grace_seconds: int):
    """(event time as timestamp, "behind the watermark" predicate) for this store, or (None, None)."""
    from pyspark.sql import functions as F

    et = prof.event_time
    if et is None:
        return None, None
    col = F.col(et.side)
    for name in et.path:
        col = col.getField(name)
    if et.shape == "window":
        ts = col.getField("end")
    elif et.shape == "micros":
        ts = F.timestamp_micros(col)
    elif et.shape == "millis":
        ts = F.when(col > 0, F.timestamp_millis(col))
    else:
        ts = col
    if not ctx.watermark_ms:
        return ts, None
    limit = ctx.watermark_ms - (grace_seconds * 1000 if et.join_grace else 0)
    return ts, ts < F.timestamp_millis(F.lit(limit))


def _store_frame(spark, ctx: AuditContext, ref: StoreRef):
    reader = (spark.read.format("statestore").option("path", ctx.checkpoint.path)
              .option("batchId", str(ctx.batch_id)))
    for key, value in ref.options:
        reader = reader.option(key, value)
    return reader.load()


def _schema_json(df, name: str) -> dict | None:
    return df.schema[name].dataType.jsonValue() if name in df.columns else None


def _reduce(df, ctx: AuditContext, ref: StoreRef, t: Thresholds, prof: StoreProfile, grace_seconds: int):
    """The one pass: a groupBy(partition_id) with every per-partition number the audit needs."""
    from pyspark.sql import functions as F

    value_cols = [c for c in df.columns if c not in ("key", "partition_id")]
    key_size = row_size(F.col("key"), df.schema["key"].dataType) if "key" in df.columns else F.lit(0)
    value_size = F.lit(0)
    for c in value_cols:
        value_size = value_size + row_size(F.col(c), df.schema[c].dataType)
    event_time, behind = _event_time_exprs(prof, ctx, grace_seconds)
    projected = [F.col("partition_id"), key_size.alias("_kb"), value_size.alias("_vb")]
    aggs = [F.count(F.lit(1)).alias("rows"), F.sum("_kb").alias("key_bytes"), F.sum("_vb").alias("value_bytes")]
    variable_values = not all(constant_size(df.schema[c].dataType) for c in value_cols)
    if "key" in df.columns and t.top_keys > 0 and variable_values:
        projected.append(F.col("key").alias("_key"))
        aggs.append(F.max_by(F.struct(F.col("_key").alias("key"), F.col("_kb").alias("key_bytes"),
                                      F.col("_vb").alias("value_bytes")), F.col("_vb"), int(t.top_keys))
                    .alias("top"))
    if event_time is not None:
        projected.append(event_time.alias("_et"))
        aggs.append(F.min(F.unix_micros("_et")).alias("oldest"))  # epoch: no Python-side time zone
    if behind is not None:
        projected.append(behind.alias("_behind"))
        aggs.append(F.count_if(F.col("_behind")).alias("behind"))
    if prof.has_matched:
        projected.append((F.col("value.matched") == F.lit(False)).alias("_unmatched"))
        aggs.append(F.count_if(F.col("_unmatched")).alias("unmatched"))
    if prof.counts_join_values:  # keyToNumValues: the join key with the most rows in the value store
        projected += [F.col("key").alias("_jk"), F.col("value.value").alias("_n")]
        aggs += [F.max_by("_jk", "_n").alias("heaviest_key"), F.max("_n").alias("heaviest_rows")]
    return df.select(*projected).groupBy("partition_id").agg(*aggs).collect(), behind is not None


# transformWithState's list and map state as Spark's state reader flattens them: a row per list element, per map entry
COLLECTION_COLUMNS = ("list_element", "user_map_key")


def _key_fields(df, prof) -> list[str] | None:
    """The key fields that name one key where a store holds several rows per key: format 4's join values store
    (keyed by join key and event time) and transformWithState's list and map state; None where each row is a key."""
    fields = [f.name for f in df.schema["key"].dataType.fields]
    if prof.keys_carry_time:
        return [f for f in fields if f != JOIN_KEY_TIME]
    if any(column in df.columns for column in COLLECTION_COLUMNS):
        return fields
    return None


def _keys(df, fields: list[str]) -> dict[int, Any]:
    """Per partition: its distinct keys (`fields` of the key) and the one with the most rows (formats 1-3 count a
    join's keys in a store of their own, keyToNumValues: _link_join_sides)."""
    from pyspark.sql import functions as F

    per_key = (df.select("partition_id", F.struct(*[F.col(f"key.{f}").alias(f) for f in fields]).alias("_jk"))
               .groupBy("partition_id", "_jk").agg(F.count(F.lit(1)).alias("_n")))
    return {r.partition_id: r for r in per_key.groupBy("partition_id").agg(
        F.count(F.lit(1)).alias("keys"), F.max_by("_jk", "_n").alias("heaviest_key"),
        F.max("_n").alias("heaviest_rows")).collect()}


def _audit_store(spark, ctx: AuditContext, ref: StoreRef, t: Thresholds, join_bound: JoinBound | None,
                 job: str | None) -> tuple[OperatorAudit, dict[int, dict[str, Any]]]:
    """The store's numbers, and for a join's keyToNumValues store the heaviest join key per partition
    (which describes the side's value store: see _link_join_sides)."""
    grace, grace_source = _join_grace(ref, join_bound, t, job)
    try:
        df = _store_frame(spark, ctx, ref)
        key_schema, value_schema = _schema_json(df, "key"), _schema_json(df, "value")
        prof = profile(ref.operator_name, ref.store_name, key_schema, value_schema)
        per_partition, has_behind = _reduce(df, ctx, ref, t, prof, grace)
        fields = _key_fields(df, prof)
        key_counts = _keys(df, fields) if fields is not None else None
    except Exception as err:  # Py4J/analysis errors: name the store and batch, keep the cause chained
        raise StateReadError(f"{ctx.checkpoint.path}: cannot read operator {ref.operator_id} store "
                             f"{ref.store_name} at batch {ctx.batch_id}: {first_line(err)}") from err
    op = OperatorAudit(
        operator_id=ref.operator_id, operator_name=ref.operator_name, store_name=ref.store_name,
        num_partitions=ref.num_partitions, min_batch_id=ref.min_batch_id, max_batch_id=ref.max_batch_id,
        kind=prof.kind, watermarked=prof.watermarked,
        key_columns=[f["name"] for f in (key_schema or {}).get("fields", [])],
        event_time_column=prof.event_time.column if prof.event_time else None)
    if prof.event_time is not None and prof.event_time.join_grace:
        op.join_grace_seconds, op.join_grace_source = grace, grace_source
    rows = {p: 0 for p in range(ref.num_partitions)}
    encoded = {p: 0 for p in range(ref.num_partitions)}
    behind_total = unmatched_total = 0
    oldest, top, heaviest = None, [], {}
    for r in per_partition:
        rows[r.partition_id] = r.rows
        encoded[r.partition_id] = (r.key_bytes or 0) + (r.value_bytes or 0)
        d = r.asDict()
        behind_total += d.get("behind") or 0
        unmatched_total += d.get("unmatched") or 0
        if d.get("oldest") is not None and (oldest is None or d["oldest"] < oldest):
            oldest = d["oldest"]
        for item in d.get("top") or []:
            top.append({"key": item.key, "partition_id": r.partition_id, "key_bytes": item.key_bytes,
                        "value_bytes": item.value_bytes})
        if d.get("heaviest_rows"):
            heaviest[r.partition_id] = {"key": audit_json(d["heaviest_key"]), "rows": d["heaviest_rows"]}
    op.rows_per_partition = rows
    op.rows_total = sum(rows.values())
    op.keys_per_partition, op.keys_total = dict(rows), op.rows_total  # each row a key, unless below
    if key_counts is not None:  # several rows per key: the keys counted in the store itself
        op.keys_per_partition = {p: key_counts[p].keys if p in key_counts else 0 for p in rows}
        op.keys_total = sum(op.keys_per_partition.values())
        op.heaviest_keys = {p: {"key": audit_json(r.heaviest_key), "rows": r.heaviest_rows}
                            for p, r in key_counts.items()}
    op.encoded_bytes_per_partition = encoded
    op.skew_ratio = skew_ratio(rows)
    if op.rows_total:
        op.avg_key_bytes = round(sum(r.key_bytes or 0 for r in per_partition) / op.rows_total, 1)
        op.avg_value_bytes = round(sum(r.value_bytes or 0 for r in per_partition) / op.rows_total, 1)
    op.rows_behind_watermark = behind_total if has_behind else None
    op.unmatched_rows = unmatched_total if prof.has_matched else None
    if oldest is not None:
        oldest = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc) + _dt.timedelta(microseconds=oldest)
    op.oldest_event_time = oldest
    op.top_keys = sorted(top, key=lambda k: -k["value_bytes"])[: t.top_keys]
    op.estimated_bytes = int(round(sum(encoded.values()) * ctx.versioning_factor(t)))
    return op, heaviest


def _cause(err: StateReadError) -> str:
    """The deepest line of the chained error that says what broke (Spark's first line is generic)."""
    cause = err.__cause__
    lines = [line.strip() for line in str(cause or "").splitlines() if line.strip()]
    specific = [line for line in lines if "Caused by:" in line or "Exception:" in line]
    return (specific[-1] if specific else lines[0] if lines else str(err))[:300]


def _link_join_sides(audited: list[tuple[OperatorAudit, dict[int, dict[str, Any]]]]) -> None:
    """A join side's value store holds several rows per join key: its keys are the rows of the side's
    keyToNumValues store, whose values count the rows per key."""
    counts = {(op.operator_id, op.store_name.split("-", 1)[0]): (op, heaviest) for op, heaviest in audited
              if op.kind == "join" and op.store_name.endswith(NUM_VALUES_STORE)}
    for op, _ in audited:
        if op.kind != "join" or not op.store_name.endswith(VALUES_STORES):
            continue
        found = counts.get((op.operator_id, op.store_name.split("-", 1)[0]))
        if found:
            numbers, heaviest = found
            op.keys_per_partition = dict(numbers.rows_per_partition)
            op.keys_total, op.heaviest_keys = numbers.rows_total, heaviest


def deep_audit(spark, checkpoint_path: str, *, batch_id: int | None = None, thresholds: Thresholds | None = None,
               layout: Layout | None = None, job: str | None = None, join_bound: JoinBound | None = None,
               history: list[dict[str, Any]] | None = None, progress: list[dict[str, Any]] | None = None,
               now: _dt.datetime | None = None) -> AuditReport:
    """Audit every operator/store of `checkpoint_path` at `batch_id` (default: latest committed).

    With `layout`, earlier audits and the query's progress rows come from the ops tables (growth, cleanup,
    late drops); pass `history`/`progress` to supply them directly. `join_bound`: the time bound of the
    query's stream-stream join, when known (a job's: stateops.jobs.examples.transforms.join_bound); without it join rows
    get the configured join_eviction_grace_seconds. Does not record: see history.record.
    """
    t = thresholds or Thresholds()
    started = time.monotonic()
    ctx = build_context(checkpoint_path, batch_id, t, layout=layout, history=history, progress=progress)
    ensure_state_coordinator(spark)
    with reading_format(spark, ctx.checkpoint.checkpoint_format(ctx.batch_id)):
        return _audit(spark, ctx, checkpoint_path, batch_id, t, job, join_bound, started, now, layout)


def _audit(spark, ctx: AuditContext, checkpoint_path: str, batch_id: int | None, t: Thresholds, job: str | None,
           join_bound: JoinBound | None, started: float, now: _dt.datetime | None,
           layout: Layout | None) -> AuditReport:
    refs = store_refs(spark, ctx)
    for ref in refs:
        if ref.min_batch_id is not None and ctx.batch_id < ref.min_batch_id:
            raise StateReadError(f"{checkpoint_path}: batch {ctx.batch_id} is older than the oldest retained "
                                 f"state of operator {ref.operator_id} (minBatchId {ref.min_batch_id})")
    files = files_by_store(ctx.checkpoint)

    def audit_store(ref: StoreRef):
        try:
            return _audit_store(spark, ctx, ref, t, join_bound, job)
        except StateReadError as err:  # a corrupt or missing state file: a finding, the other stores audited
            return err

    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL_READS, len(refs)))) as pool:
        outcomes = list(pool.map(audit_store, refs))
    unreadable = [(ref, err) for ref, err in zip(refs, outcomes) if isinstance(err, StateReadError)]
    read = [(ref, result) for ref, result in zip(refs, outcomes) if not isinstance(result, StateReadError)]
    results = [result for _, result in read]
    _link_join_sides(results)
    audited = [op for op, _ in results]
    for (ref, _), op in zip(read, audited):
        on_disk = files.get((ref.operator_id, ref.files_store)) if ref.files_store else None
        op.bytes_per_partition = {p: 0 for p in range(ref.num_partitions)}
        if on_disk:
            op.bytes_per_partition.update(on_disk.bytes_per_partition)
        op.bytes_total = sum(op.bytes_per_partition.values())
        op.skew_ratio_bytes = skew_ratio(op.bytes_per_partition)
    report = AuditReport(checkpoint=checkpoint_path, batch_id=ctx.batch_id, watermark=ctx.watermark,
                         operators=audited, kind="deep", job=job, query_id=ctx.query_id,
                         audited_at=now or _dt.datetime.now(_dt.timezone.utc), batch_timestamp=ctx.batch_timestamp,
                         provider=ctx.provider, pinned_batch=batch_id is not None)
    input_rows, per_op = operator_progress(ctx.progress, [(o.operator_id, o.operator_name) for o in audited],
                                           t.late_drop_window_batches)
    for op in audited:
        if op.operator_id in per_op:
            op.rows_dropped_by_watermark = per_op[op.operator_id]["dropped"]
    cost = progress_table.next_start(checkpoint_path, layout, job, ctx.progress)
    report.findings = [unreadable_finding(ref.operator_id, ref.store_name, ctx.batch_id, job, _cause(err))
                       for ref, err in unreadable] + evaluate(report, t, ctx.history, input_rows,
                                                              kafka_lag.totals(ctx.progress),
                                                              latest_state_memory(ctx.progress),
                               times=operator_times(ctx.progress, [(o.operator_id, o.operator_name) for o in audited],
                                                    t.slow_window_batches), restart=cost)
    report.kafka_lag = kafka_lag.latest(ctx.progress)
    report.duration_seconds = round(time.monotonic() - started, 3)
    return report
