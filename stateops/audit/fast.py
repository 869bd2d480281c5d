"""Fast audit: no JVM, seconds, safe to run every few minutes.

From the checkpoint alone: operators and stores (`state/<op>/_metadata`), the state schemas (event-time
tags, so unbounded dedup and missing watermarks show without Spark), bytes per partition and the
range of versions on disk. From the `progress` ops table: the latest state rows per operator and rows
dropped by the watermark. Skew is by bytes (rows per partition need the state reader: deep audit);
rows_total is None for operators with several stores (joins), whose split progress does not give, and when
the state stores do not count rows (RocksDB's trackTotalNumberOfRows off: stateops.progress.rows_untracked).
"""
from __future__ import annotations

import datetime as _dt
import time
from typing import Any, Mapping

from stateops.audit.context import build_context, recent_progress_by_query
from stateops.audit.findings import evaluate, latest_state_memory, operator_progress, operator_times
from stateops.audit.history import history_by_checkpoint, normalize
from stateops.checkpoints.operators import files_by_store, describe, store_schema
from stateops.audit.model import AuditReport, OperatorAudit, skew_ratio
from stateops.checkpoints.sparkstate import join_state_format, join_units
from stateops.checkpoints.profile import profile
from stateops.audit.thresholds import Thresholds
from stateops import kafka_lag
from stateops import progress as progress_table
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import StateOpsError
from stateops.layout import Layout


def fast_audit(checkpoint_path: str, *, thresholds: Thresholds | None = None, layout: Layout | None = None,
               job: str | None = None, history: list[dict[str, Any]] | None = None,
               progress: list[dict[str, Any]] | None = None, now: _dt.datetime | None = None,
               starts: list[dict[str, Any]] | None = None) -> AuditReport:
    """Audit the latest committed batch of `checkpoint_path` from files and progress rows only. `starts`: the
    job's progress rows of its earlier starts (stateops.progress.start_rows), read here when not given."""
    t = thresholds or Thresholds()
    started = time.monotonic()
    ctx = build_context(checkpoint_path, None, t, layout=layout, history=history, progress=progress)
    listed = ctx.checkpoint.state_files()  # one listing for both: a tick audits every job's checkpoint
    files = files_by_store(ctx.checkpoint, listed)
    counted = ctx.checkpoint.state_partitions(ctx.batch_id, listed)  # not the operator metadata's creation-time count
    operators: list[OperatorAudit] = []
    join_format = join_state_format(ctx.checkpoint.batch_metadata(ctx.batch_id).get("conf", {}))
    for op_id in ctx.checkpoint.operator_ids():
        meta = describe(ctx.checkpoint, op_id)
        name = meta.operator_name if meta else "unknown"
        stores = list(meta.stores) if meta and meta.stores else [
            (store, max(files[(o, store)].bytes_per_partition, default=-1) + 1)
            for (o, store) in sorted(files) if o == op_id]
        # a join's column families (formats 3, 4) reported as the deep audit reads them: the first one its files
        stores = [(unit, n, store if i == 0 else None) for store, n in stores
                  for i, unit in enumerate(join_units(name, store, join_format) or (store,))]
        for store, num_partitions, files_of in stores:
            num_partitions = counted.get((op_id, files_of or store), num_partitions)
            on_disk = files.get((op_id, files_of)) if files_of else None
            key_schema, value_schema = store_schema(ctx.checkpoint, op_id, store)
            prof = profile(name, store, key_schema, value_schema)
            per_partition = {p: 0 for p in range(num_partitions)}
            if on_disk:
                per_partition.update(on_disk.bytes_per_partition)
            ratio = skew_ratio(per_partition)
            operators.append(OperatorAudit(
                operator_id=op_id, operator_name=name, store_name=store, num_partitions=num_partitions,
                min_batch_id=on_disk.min_version - 1 if on_disk and on_disk.min_version is not None else None,
                max_batch_id=on_disk.max_version - 1 if on_disk and on_disk.max_version is not None else None,
                bytes_total=sum(per_partition.values()), bytes_per_partition=per_partition, skew_ratio=ratio,
                skew_basis="bytes", skew_ratio_bytes=ratio, kind=prof.kind, watermarked=prof.watermarked,
                key_columns=[f["name"] for f in (key_schema or {}).get("fields", [])],
                event_time_column=prof.event_time.column if prof.event_time else None))
    input_rows, per_op = operator_progress(ctx.progress, [(o.operator_id, o.operator_name) for o in operators],
                                           t.late_drop_window_batches)
    stores_per_op = {o.operator_id: sum(1 for x in operators if x.operator_id == o.operator_id) for o in operators}
    for op in operators:
        if op.operator_id in per_op:
            op.rows_dropped_by_watermark = per_op[op.operator_id]["dropped"]
            if stores_per_op[op.operator_id] == 1:
                op.rows_total = op.keys_total = per_op[op.operator_id]["rows_total"]
    report = AuditReport(checkpoint=checkpoint_path, batch_id=ctx.batch_id, watermark=ctx.watermark,
                         operators=operators, kind="fast", job=job, query_id=ctx.query_id,
                         audited_at=now or _dt.datetime.now(_dt.timezone.utc), batch_timestamp=ctx.batch_timestamp,
                         provider=ctx.provider)
    report.kafka_lag = kafka_lag.latest(ctx.progress)
    cost = progress_table.next_start(checkpoint_path, layout, job, ctx.progress, starts)
    report.findings = evaluate(report, t, ctx.history, input_rows, kafka_lag.totals(ctx.progress),
                               latest_state_memory(ctx.progress),
                               times=operator_times(ctx.progress, [(o.operator_id, o.operator_name) for o in operators],
                                                    t.slow_window_batches), restart=cost)
    report.duration_seconds = round(time.monotonic() - started, 3)
    return report


def fast_audits(layout: Layout, targets: Mapping[str, tuple[str, Thresholds | None]],
                now: _dt.datetime | None = None) -> dict[str, AuditReport | StateOpsError]:
    """The fast audit of many jobs (`targets`: job -> (checkpoint, thresholds)), each as `fast_audit` with
    `layout` computes it, reading the `audits` and `progress` ops tables once for all of them instead of
    once per job (per job, each read scans the whole table: n jobs cost n^2). A job that cannot be audited
    (no checkpoint, no committed batch) gets its error instead of a report."""
    query_ids: dict[str, str | None] = {}
    for job, (checkpoint, _t) in targets.items():
        try:
            query_ids[job] = Checkpoint.open(checkpoint).query_id()
        except (StateOpsError, OSError, ValueError, KeyError):
            query_ids[job] = None
    wanted = {q for q in query_ids.values() if q}
    history = history_by_checkpoint(layout, [c for c, _t in targets.values()])
    progress = recent_progress_by_query(layout, wanted, max((t or Thresholds()).progress_batches
                                                             for _c, t in targets.values()) if targets else 1)
    starts = progress_table.start_rows(layout, targets)
    out: dict[str, AuditReport | StateOpsError] = {}
    for job, (checkpoint, t) in targets.items():
        t, query_id = t or Thresholds(), query_ids[job]
        rows = history.get(normalize(checkpoint), [])
        mine = [r for r in rows if r["query_id"] == query_id] if query_id else rows
        recent = progress.get(query_id, [])[-t.progress_batches:] if query_id else []
        try:
            out[job] = fast_audit(checkpoint, thresholds=t, layout=layout, job=job, history=mine, progress=recent,
                                  now=now, starts=starts.get(job, []))
        except StateOpsError as err:
            out[job] = err
    return out
