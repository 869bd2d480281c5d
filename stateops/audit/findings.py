"""Numbers in, findings out: pure functions with stable codes, a message with the numbers, and a fix.

No JVM, no I/O: deep and fast audits build an AuditReport, then `evaluate` turns it (plus the history of
earlier audits and recent progress rows, both plain dicts) into findings. Severity levels come from
Thresholds; an error threshold of 0 disables the error level.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterable, Mapping, Sequence

from stateops.audit.model import AuditReport, Finding, OperatorAudit, audit_json
from stateops.audit.skew import HotKey, cause_of, effective_threshold, spread
from stateops.audit.thresholds import Thresholds
from stateops import kafka_lag, progress
from stateops.checkpoints.restart_cost import SNAPSHOT_INTERVAL, RestartCost
from stateops.checkpoints.state_store import MEMORY, store_name
from stateops.sizes import human_bytes
from stateops.timefmt import compact_duration, human_duration, iso_seconds

EVICTING_KINDS = ("aggregation", "dedup", "dedup_within_watermark", "session", "join")
# join_grace_source when no job names the join's bound (see OperatorAudit.join_grace_source).
CONFIGURED_GRACE = "join_eviction_grace_seconds from the audit config (the join's time bound is unknown)"


def _level(value: float, warn: float, error: float) -> str | None:
    if error and value >= error:
        return "error"
    if warn and value >= warn:
        return "warn"
    return None


def _worst(*levels: str | None) -> str | None:
    order = {None: 0, "info": 1, "warn": 2, "error": 3}
    return max(levels, key=lambda lvl: order[lvl])


def _iso(moment: _dt.datetime | None) -> str:
    return iso_seconds(moment) or "none"


def _where(op: OperatorAudit) -> str:
    return f"operator {op.operator_id} ({op.operator_name}, store {op.store_name})"


def _finding(code: str, severity: str, op: OperatorAudit | None, message: str, recommendation: str,
             details: Mapping[str, Any] | None = None) -> Finding:
    return Finding(code, severity, op.operator_id if op else None, op.store_name if op else None, message,
                   recommendation, details)


# --- STATE_SKEW --------------------------------------------------------------------------------------

def _hot_key(op: OperatorAudit, basis: str, partition: int) -> HotKey | None:
    """The heaviest key of `partition` in the basis' unit, as far as the audit knows it."""
    if basis == "rows":
        rows = op.rows_per_partition.get(partition) or 0
        if not rows:
            return None
        heaviest = op.heaviest_keys.get(partition)
        if heaviest:  # join value store: rows per join key, from the side's keyToNumValues store
            mean = op.rows_total / op.keys_total if op.rows_total and op.keys_total else None
            return HotKey(heaviest["key"], heaviest["rows"] / rows, heaviest["rows"] / mean if mean else None)
        if op.keys_per_partition.get(partition) == rows:  # every key is one row
            return HotKey(None, 1 / rows, 1.0)
        return None
    encoded = op.encoded_bytes_per_partition.get(partition)
    mine = [k for k in op.top_keys if k.get("partition_id") == partition]
    if not encoded or not mine:
        return None
    top = max(mine, key=lambda k: k["key_bytes"] + k["value_bytes"])
    size = top["key_bytes"] + top["value_bytes"]
    total = sum(op.encoded_bytes_per_partition.values())
    mean = total / op.keys_total if op.keys_total else None
    return HotKey(audit_json(top["key"]), size / encoded, size / mean if mean else None)


def _skew_candidate(op: OperatorAudit, t: Thresholds, basis: str) -> tuple[str, dict[str, Any]] | None:
    """(severity, numbers) for one basis, or None when the store is too small, even, or unmeasured."""
    per_partition, total, minimum = ((op.rows_per_partition, op.rows_total or 0, t.skew_min_rows) if basis == "rows"
                                     else (op.bytes_per_partition, op.bytes_total or 0, t.skew_min_bytes))
    sp = spread(per_partition) if per_partition else None
    if sp is None or sp.partitions < 2 or total < max(minimum, 1):
        return None
    hot_key = _hot_key(op, basis, sp.hot_partition)
    cause, ceiling = cause_of(sp, op.keys_total, op.keys_per_partition.get(sp.hot_partition), hot_key,
                              t.skew_ratio)
    level = _worst(_level(sp.ratio, t.skew_ratio, t.skew_ratio_error),
                   _level(sp.share, t.skew_share, t.skew_share_error))
    if cause == "few_keys":
        level = "info"  # the empty-partitions rule: fewer keys than partitions is not skew
    elif cause == "hashing":
        level = None
    if not level:
        return None
    return level, {
        "basis": basis, "cause": cause, "ratio": sp.ratio, "partitions": sp.partitions,
        "empty_partitions": sp.empty_partitions, "hot_partition": sp.hot_partition, "hot_value": sp.hot_value,
        "total": sp.total, "hot_share": sp.share, "keys": op.keys_total,
        "hot_partition_keys": op.keys_per_partition.get(sp.hot_partition), "hashing_max_keys": ceiling,
        "hot_key": hot_key.key if hot_key else None,
        "hot_key_share": round(hot_key.share, 4) if hot_key else None,
        "warn_ratio": effective_threshold(t.skew_ratio, t.skew_share, sp.partitions),
        "error_ratio": effective_threshold(t.skew_ratio_error, t.skew_share_error, sp.partitions),
    }


def _part_of(basis: str, value: int, total: int) -> str:
    return f"{value} of {total} rows" if basis == "rows" else f"{human_bytes(value)} of {human_bytes(total)} on disk"


def _skew_message(op: OperatorAudit, d: Mapping[str, Any]) -> str:
    basis, partitions = d["basis"], d["partitions"]
    fullest = (f"partition {d['hot_partition']} holds {d['hot_share']:.0%} of the {basis} "
               f"({_part_of(basis, d['hot_value'], d['total'])})")
    if d["cause"] == "few_keys":
        return (f"{_where(op)}: only {d['keys']} keys for {partitions} partitions, so {d['empty_partitions']} "
                f"partitions hold no state; {fullest}, no more than hashing {d['keys']} keys puts on one "
                "partition: empty partitions, not skew")
    levels = " and ".join(f"{name} at {d[f'{name}_ratio']:g}x" for name in ("warn", "error")
                          if d[f"{name}_ratio"] is not None)
    text = f"{_where(op)}: {fullest}, {d['ratio']:.3g}x an even split over {partitions} partitions ({levels})"
    if d["cause"] == "hot_key":
        key = "one key" if d["hot_key"] is None else f"one key, {json.dumps(d['hot_key'], default=str)},"
        text += f"; {key} holds {d['hot_key_share']:.0%} of that partition"
    elif d["cause"] == "many_keys":
        text += (f"; it holds {d['hot_partition_keys'] if d['hot_partition_keys'] is not None else 'more'} keys, "
                 f"while hashing {d['keys']} keys puts at most {d['hashing_max_keys']} on one partition")
    return text


_SKEW_FIX = {
    "hot_key": "One key holds most of the busiest partition, and no partition count splits a key. Salt it (add "
               "a random suffix, aggregate, then combine), filter or route a runaway key (a bot, a null or "
               "default id) to its own path, or pre-aggregate it before the stateful operator.",
    "many_keys": "Many keys hash onto the busiest partition, more than chance does: another number of shuffle "
                 "partitions spreads them (shuffle_partitions in the job's config, on a new checkpoint).",
    "unknown": "Run the deep audit (rows and keys per partition) to see whether one key or many keys cause it; "
               "one key needs salting or routing, many keys another number of shuffle partitions.",
    "few_keys": "Nothing to fix in the keys. If the key space stays this small, fewer shuffle partitions "
                "(shuffle_partitions in the job's config, on a new checkpoint) save a task per empty partition "
                "in every batch.",
}


def skew_finding(op: OperatorAudit, t: Thresholds) -> Finding | None:
    """The worse of rows and bytes (rows on ties: exact counts); see stateops.audit.skew for the causes."""
    candidates = [c for c in (_skew_candidate(op, t, "rows"), _skew_candidate(op, t, "bytes")) if c]
    if not candidates:
        return None
    order = {"info": 1, "warn": 2, "error": 3}
    level, details = max(candidates, key=lambda c: order[c[0]])  # max keeps the first (rows) on ties
    fix = _SKEW_FIX[details["cause"]]
    if op.kind == "join" and details["cause"] == "hot_key":
        fix = ("One join key holds most rows of this join side: drop or route that key (often a null/default id "
               "or a bot) before the join, and keep a time bound on the join so its rows are evicted.")
    return _finding("STATE_SKEW", level, op, _skew_message(op, details), fix, details)


# --- EVICTION_STALLED, UNBOUNDED_DEDUP, NO_WATERMARK ---------------------------------------------------

_EVICTION_FIX = {
    "aggregation": "Aggregation state is evicted only in append or update output mode with a watermark on the "
                   "grouped event-time column (window(...)); complete mode keeps every group forever. Use "
                   "update/append, and check that every input's watermark advances.",
    "session": "Session state is evicted once session end passes the watermark in append/update mode; check "
               "the output mode and that every input's watermark advances.",
    "join": "Join state is evicted only when the join condition bounds event time between the two sides (e.g. "
            "p.time BETWEEN o.time AND o.time + INTERVAL 5 MINUTES) and both inputs have watermarks: add the "
            "time-range condition, and check that both watermarks advance.",
    "custom": "Rows whose event-time timeout has passed are still in state: call state.remove() when "
              "state.hasTimedOut, set a timeout on every update, or use TTL (transformWithState).",
    "dedup": "Expired dedup keys are still in state: check that the watermark advances on every input.",
    "dedup_within_watermark": "Expired dedup keys are still in state: check that the watermark advances on "
                              "every input.",
}


def eviction_finding(op: OperatorAudit, watermark: _dt.datetime | None, t: Thresholds) -> Finding | None:
    if watermark is None or not op.rows_behind_watermark or not op.rows_total:
        return None
    share = op.rows_behind_watermark / op.rows_total
    level = _level(share, t.eviction_share, t.eviction_share_error)
    if not level:
        return None
    rule = f"{op.event_time_column} < watermark"
    fix = _EVICTION_FIX.get(op.kind, "Check the output mode and that the watermark advances.")
    details: dict[str, Any] = {"rows_behind": op.rows_behind_watermark, "rows_total": op.rows_total,
                               "share": round(share, 4), "watermark": _iso(watermark)}
    if op.join_grace_seconds is not None:
        limit = "watermark" if op.join_grace_seconds == 0 else (
            f"watermark {'-' if op.join_grace_seconds > 0 else '+'} {compact_duration(abs(op.join_grace_seconds))}")
        rule = f"{op.event_time_column} < {limit}: {op.join_grace_source}"
        details.update(join_grace_seconds=op.join_grace_seconds, join_grace_source=op.join_grace_source)
        if op.join_grace_source == CONFIGURED_GRACE:
            fix += (" The join's time bound is unknown for this checkpoint path: audit it by job name, or set "
                    "join_eviction_grace_seconds to the bound if it is wider.")
    oldest = f"; the oldest is {_iso(op.oldest_event_time)}" if op.oldest_event_time else ""
    message = (f"{_where(op)}: {op.rows_behind_watermark} of {op.rows_total} rows ({share:.1%}) are behind the "
               f"watermark {_iso(watermark)} ({rule}) and should have been evicted{oldest}")
    return _finding("EVICTION_STALLED", level, op, message, fix, details)


def unbounded_dedup_finding(op: OperatorAudit) -> Finding | None:
    if op.kind != "dedup" or op.event_time_column is not None:
        return None
    keys = ", ".join(op.key_columns) or "its keys"
    rows = f"{op.rows_total} rows" if op.rows_total is not None else human_bytes(op.bytes_total)
    message = (f"{_where(op)}: dropDuplicates on ({keys}) has no event-time column in its keys, so Spark never "
               f"evicts this state ({rows} now) even when the query has a watermark")
    fix = (f"Use dropDuplicatesWithinWatermark([{keys}]) (evicts each key once the watermark passes its event "
           f"time), or add the event-time column to the keys: dropDuplicates([{keys}, <event time>]) after "
           "withWatermark. Either change needs a new checkpoint (the state schema changes).")
    return _finding("UNBOUNDED_DEDUP", "error", op, message, fix)


def no_watermark_finding(op: OperatorAudit, watermark: _dt.datetime | None, batch_id: int,
                         operator_watermarked: bool | None = None) -> Finding | None:
    """`operator_watermarked`: any store of the operator carries the watermark tag (joins tag only the
    value stores), defaulting to this store's own tag."""
    watermarked = op.watermarked if operator_watermarked is None else operator_watermarked
    has_state = (op.rows_total or 0) > 0 or (op.rows_total is None and op.bytes_total > 0)
    if watermark is not None or watermarked or not has_state:
        return None
    if op.kind not in EVICTING_KINDS and batch_id < 1:
        return None  # custom state has no tagged column; batch 0 always runs without a watermark
    rows = f"{op.rows_total} rows" if op.rows_total is not None else human_bytes(op.bytes_total)
    # key columns come from the state schema the audit read; none: it read none (the fast audit does not read
    # transformWithState's or join formats 3/4's schema files), and the message must not claim what is in it
    schema = ("no event-time column in the state schema" if op.key_columns else
              "its state schema was not read (the deep audit reads it through Spark's state reader)")
    message = (f"{_where(op)}: no watermark at batch {batch_id} (batchWatermarkMs is 0) and {schema}: its state "
               f"({rows}) is never evicted by event time")
    fix = ("Add .withWatermark(<event time column>, <delay>) to the input before the stateful operator and "
           "group, deduplicate or join on event time (window(...), session_window(...), "
           "dropDuplicatesWithinWatermark, a time-range join condition). The state schema changes, so this "
           "needs a new checkpoint plus a replay window.")
    severity = "error" if op.kind in EVICTING_KINDS else "warn"
    if severity == "warn":
        fix = ("Custom state without a watermark is bounded only by processing-time timeouts or explicit "
               "state.remove(): check that every key is removed eventually, or add .withWatermark(...) and "
               "event-time timeouts (a new checkpoint).")
    return _finding("NO_WATERMARK", severity, op, message, fix)


# --- LARGE_STATE, STATE_GROWTH, CLEANUP_STUCK ----------------------------------------------------------

def large_state_finding(op: OperatorAudit, t: Thresholds) -> Finding | None:
    rows_level = _level(op.rows_total or 0, t.large_state_rows, t.large_state_rows_error)
    bytes_level = _level(op.bytes_total, t.large_state_bytes, t.large_state_bytes_error)
    level = _worst(rows_level, bytes_level)
    if not level:
        return None
    estimate = f", estimated {human_bytes(op.estimated_bytes)}" if op.estimated_bytes is not None else ""
    message = (f"{_where(op)}: {op.rows_total if op.rows_total is not None else '?'} rows, "
               f"{human_bytes(op.bytes_total)} on disk{estimate} (thresholds {t.large_state_rows} rows, "
               f"{human_bytes(t.large_state_bytes)})")
    fix = ("Resolve any EVICTION_STALLED / UNBOUNDED_DEDUP / NO_WATERMARK finding first. If the state is "
           "legitimately this large: keep RocksDB with changelog checkpointing, give executors memory for "
           "RocksDB, shorten the watermark delay if the business allows it, or spread the state over more "
           "shuffle partitions (a new checkpoint).")
    return _finding("LARGE_STATE", level, op, message, fix)


def latest_state_memory(progress: Iterable[Mapping[str, Any]]) -> int | None:
    """Spark's estimate of the state's heap at the query's latest batch (the progress's memoryUsedBytes, every
    stateful operator), None without a progress row."""
    rows = sorted((r for r in progress if r.get("batch_id") is not None), key=lambda r: r["batch_id"])
    return rows[-1].get("state_memory_bytes") if rows else None


def state_memory_finding(report: AuditReport, t: Thresholds, spark_estimate: int | None) -> Finding | None:
    """The state's memory before it is at risk. Every store against the monitoring table's levels
    (audit.state_memory_bytes: Spark's estimate at the latest batch, which for RocksDB is its memtables, cache
    share and pinned blocks); the in-memory store also against the heap the settings give it, from Spark's
    estimate of the loaded versions (progress) or else the deep audit's (rows' bytes times the versions kept)."""
    in_heap = store_name(report.provider) == MEMORY
    estimates = [op.estimated_bytes for op in report.operators if op.estimated_bytes is not None] if in_heap else []
    used, source = ((spark_estimate, "Spark's estimate at the latest batch (memoryUsedBytes)") if spark_estimate
                    else (sum(estimates), "the deep audit's estimate (rows' bytes x 2 versions)") if estimates
                    else (None, None))
    if not used:
        return None
    share = used / t.state_memory_heap_bytes if in_heap and t.state_memory_heap_bytes else None
    level = _worst(_level(share, t.state_memory_share, t.state_memory_share_error) if share is not None else None,
                   _level(used, t.state_memory_bytes, t.state_memory_bytes_error))
    if not level:
        return None
    job = report.job or "JOB"
    against = (f"{share:.0%} of the {human_bytes(t.state_memory_heap_bytes)} the settings give it "
               f"(audit.state_memory_heap_bytes; warn at {t.state_memory_share:.0%}, error at "
               f"{t.state_memory_share_error:.0%}); " if share is not None else "")
    message = (f"Spark's {'in-memory store' if in_heap else 'state store'} holds {human_bytes(used)} of state in "
               f"{'executor heap' if in_heap else 'executor memory'} ({source}), {against}levels "
               f"{human_bytes(t.state_memory_bytes)} / {human_bytes(t.state_memory_bytes_error)} "
               "(audit.state_memory_bytes, audit.state_memory_bytes_error)")
    fix = (f"Move the state to RocksDB before the heap runs out: `stateops recover run {job} --mode switch-store --to "
           f"rocksdb --confirm {job}` (the same checkpoint, no input replayed; the growth sensor does it by itself at "
           "the error level), or give the executors more heap and raise audit.state_memory_heap_bytes to match."
           if in_heap else
           "Bound RocksDB's memory (spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage=true with "
           "maxMemoryUsageMB per executor), resolve any EVICTION_STALLED / UNBOUNDED_DEDUP finding first, or spread "
           "the state over more executors; raise audit.state_memory_bytes where the executors have the memory.")
    return Finding("STATE_MEMORY", level, None, None, message, fix,
                   {"bytes": used, "heap_bytes": t.state_memory_heap_bytes if in_heap else None,
                    "share": round(share, 4) if share is not None else None,
                    "store": MEMORY if in_heap else store_name(report.provider),
                    "source": "progress" if spark_estimate else "deep audit"})


def _same_store(row: Mapping[str, Any], op: OperatorAudit) -> bool:
    return row.get("operator_id") == op.operator_id and row.get("store_name") == op.store_name


def growth_finding(op: OperatorAudit, previous: Sequence[Mapping[str, Any]], t: Thresholds, kind: str,
                   now: _dt.datetime) -> Finding | None:
    """Against the oldest earlier audit of the same kind (deep or fast) and store in the growth window
    before `now`: fast audits every 5 minutes and hourly deep ones then span the same time."""
    since = now - _dt.timedelta(seconds=t.growth_window_seconds)
    rows = [r for r in previous if _same_store(r, op) and r.get("kind") == kind
            and isinstance(r.get("audited_at"), _dt.datetime) and since <= r["audited_at"] < now]
    if not rows:
        return None
    rows.sort(key=lambda r: r["audited_at"])
    window = compact_duration(t.growth_window_seconds)
    parts, level, details = [], None, {"kind": kind, "window_seconds": t.growth_window_seconds}
    for label, current, min_delta, fmt in (("rows", op.rows_total, t.growth_min_rows, str),
                                           ("bytes", op.bytes_total, t.growth_min_bytes, human_bytes)):
        base_row = next((r for r in rows if r.get(f"{label}_total") is not None), None)
        if current is None or base_row is None:
            continue
        base = base_row[f"{label}_total"]
        if current - base < max(min_delta, 1):
            continue
        ratio = current / base if base else float("inf")
        lvl = _level(ratio, t.growth_ratio, t.growth_ratio_error)
        if lvl:
            span = human_duration((now - base_row["audited_at"]).total_seconds())
            parts.append(f"{label} grew {ratio:.2f}x from {fmt(base)} (batch {base_row.get('batch_id')}, "
                         f"{_iso(base_row['audited_at'])}, {span} earlier) to {fmt(current)} (threshold "
                         f"{t.growth_ratio:g}x)")
            details[label] = {"ratio": round(ratio, 3), "from": base, "to": current,
                              "baseline_batch_id": base_row.get("batch_id"),
                              "baseline_audited_at": _iso(base_row["audited_at"])}
            level = _worst(level, lvl)
    if not level:
        return None
    fix = {
        "dedup": "dropDuplicates without event time in its keys grows forever: use "
                 "dropDuplicatesWithinWatermark (see UNBOUNDED_DEDUP).",
        "join": "Join state grows when rows cannot be evicted: bound event time in the join condition and "
                "check both watermarks advance.",
        "custom": "Custom state grows when keys are never removed: remove state on timeout, or use TTL.",
    }.get(op.kind, "Check that the watermark advances (WATERMARK_LAG) and the operator evicts "
                   "(EVICTION_STALLED). If the key space really grows, plan capacity before it pages you.")
    message = (f"{_where(op)}: " + "; ".join(parts)
               + f", against the oldest {kind} audit in the last {window} (growth window)")
    return _finding("STATE_GROWTH", level, op, message, fix, details)


def cleanup_finding(op: OperatorAudit, previous: Mapping[str, Any] | None, t: Thresholds) -> Finding | None:
    """minBatchId did not move since the previous audit while far more batches than retained exist."""
    if op.min_batch_id is None or op.max_batch_id is None or previous is None:
        return None
    retained = op.max_batch_id - op.min_batch_id + 1
    limit = t.min_batches_to_retain + t.cleanup_slack_batches
    prev_min, prev_max = previous.get("min_batch_id"), previous.get("max_batch_id")
    if retained <= limit or prev_min != op.min_batch_id or prev_max is None or prev_max >= op.max_batch_id:
        return None
    level = "error" if retained > 3 * max(t.min_batches_to_retain, 1) else "warn"
    message = (f"{_where(op)}: minBatchId is still {op.min_batch_id} while maxBatchId moved from {prev_max} to "
               f"{op.max_batch_id}: {retained} batches of state retained (expected about "
               f"{t.min_batches_to_retain}, spark.sql.streaming.minBatchesToRetain)")
    fix = ("State cleanup runs in the state store maintenance task of a running query: check that queries run "
           "long enough for maintenance (spark.sql.streaming.stateStore.maintenanceInterval), that the "
           "executor can delete files on the checkpoint storage, and that minBatchesToRetain was not raised. "
           "Spark then trims old versions itself; never delete state files by age by hand (SST files are "
           "shared between versions).")
    return _finding("CLEANUP_STUCK", level, op, message, fix)


# --- WATERMARK_LAG, LATE_DATA_DROPS ---------------------------------------------------------------------

def watermark_lag_finding(watermark: _dt.datetime | None, now: _dt.datetime, t: Thresholds,
                          reference: str = "now") -> Finding | None:
    """`now`: the wall clock, or the audited batch's own time (`reference` names which, for the message)."""
    if watermark is None:
        return None
    lag = (now - watermark).total_seconds()
    level = _level(lag, t.watermark_lag_seconds, t.watermark_lag_error_seconds)
    if not level:
        return None
    message = (f"the watermark {_iso(watermark)} is {human_duration(lag)} behind {reference} {_iso(now)} "
               f"(threshold {human_duration(t.watermark_lag_seconds)})")
    fix = ("Expected while replaying history. Otherwise the query is stopped or falling behind: check that it "
           "runs (progress table), that every input advances (with several inputs the slowest one sets the "
           "watermark) and that no input partition is idle; a stalled watermark stops all eviction.")
    return _finding("WATERMARK_LAG", level, None, message, fix, {"lag_seconds": lag, "reference": reference})


def _recent(progress: Iterable[Mapping[str, Any]], window: int) -> list[Mapping[str, Any]]:
    rows = sorted((r for r in progress if r.get("batch_id") is not None), key=lambda r: r["batch_id"])
    return rows[-max(window, 1):]


def _by_operator(row: Mapping[str, Any], operators: Sequence[tuple[int, str]]):
    """(operator id, its metrics) of one progress row. Progress lists state operators in plan order, which is the
    order Spark numbers operator ids in; the names are checked, and matched by name when the order does not line
    up."""
    ids = sorted({op_id for op_id, _ in operators})
    names = {op_id: name for op_id, name in operators}
    for index, metric in enumerate(progress.operators(row)):
        op_id = ids[index] if index < len(ids) and names[ids[index]] == metric.get("operator_name") else next(
            (i for i in ids if names[i] == metric.get("operator_name")), None)
        if op_id is not None:
            yield op_id, metric


def operator_progress(progress: Iterable[Mapping[str, Any]], operators: Sequence[tuple[int, str]],
                      window: int) -> tuple[int, dict[int, dict[str, int]]]:
    """Input rows over the last `window` progress rows, and per operator id: latest numRowsTotal (None when the
    state stores do not count rows) and rows dropped by the watermark in the window."""
    input_rows, out = 0, {}
    for row in _recent(progress, window):
        input_rows += row.get("input_rows") or 0
        for op_id, metric in _by_operator(row, operators):
            entry = out.setdefault(op_id, {"rows_total": 0, "dropped": 0})
            entry["rows_total"] = metric.get("num_rows_total")  # None: not counted (stateops.progress)
            entry["dropped"] += metric.get("num_rows_dropped_by_watermark") or 0
    return input_rows, out


TIMES = ("commit_time_ms", "all_updates_time_ms", "all_removals_time_ms", "num_rows_updated")


def operator_times(progress: Iterable[Mapping[str, Any]], operators: Sequence[tuple[int, str]],
                   window: int) -> dict[int, dict[str, float]]:
    """Per operator id, the median over the last `window` batches of Spark's commit, update and removal times (ms)
    and rows updated, and the batches they come from; operators without times in their progress are left out."""
    found: dict[int, dict[str, list[float]]] = {}
    for row in _recent(progress, window):
        for op_id, metric in _by_operator(row, operators):
            if metric.get("commit_time_ms") is None:
                continue  # a row written before StateOps kept Spark's times
            entry = found.setdefault(op_id, {name: [] for name in TIMES})
            for name in TIMES:
                entry[name].append(float(metric.get(name) or 0))
    return {op_id: {**{name: _median(values[name]) for name in TIMES}, "batches": len(values[TIMES[0]])}
            for op_id, values in found.items()}


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


_SLOW_FIXES = {
    "SLOW_COMMIT": (
        "Each batch waits for the state's checkpoint: on RocksDB keep changelog checkpointing on (it uploads the "
        "changes, not a snapshot; `stateops jobs describe` shows it), move a state on the in-memory store to RocksDB "
        "(`stateops recover run {job} --mode switch-store --to rocksdb --confirm {job}`), and check the checkpoint "
        "store's latency (object storage: the S3 settings, its region)."),
    "SLOW_STATE_UPDATES": (
        "Reads and writes of the store are slow: give RocksDB memory (its block cache and write buffers), spread the "
        "state over more shuffle partitions (`stateops recover plan {job} --mode repartition`), or shrink the state "
        "(a shorter watermark delay evicts sooner)."),
    "SLOW_CLEANUP": (
        "Eviction scans the state behind the watermark each batch: a state that keeps many keys past their time (see "
        "EVICTION_STALLED, UNBOUNDED_DEDUP) scans them again; on RocksDB Spark's range scans need the event time first "
        "in the key (Spark's session windows and timers do), and a shorter watermark delay keeps less to scan."),
}


def slow_findings(times: Mapping[int, Mapping[str, float]], names: Mapping[int, str], t: Thresholds,
                  job: str | None = None) -> list[Finding]:
    """SLOW_COMMIT, SLOW_STATE_UPDATES, SLOW_CLEANUP from Spark's own times per operator (operator_times)."""
    found = []
    for op_id, m in sorted(times.items()):
        per_row = m["all_updates_time_ms"] / m["num_rows_updated"] if m["num_rows_updated"] else 0.0
        checks = (
            ("SLOW_COMMIT", _level(m["commit_time_ms"], t.slow_commit_ms, t.slow_commit_ms_error),
             f"the state's commit (its checkpoint) takes {m['commit_time_ms'] / 1000:.1f} s",
             f"audit.slow_commit_ms {t.slow_commit_ms}, error at {t.slow_commit_ms_error}"),
            ("SLOW_STATE_UPDATES", _worst(_level(per_row, t.slow_updates_row_ms, t.slow_updates_row_ms_error),
                                          _level(m["all_updates_time_ms"], t.slow_updates_ms, t.slow_updates_ms_error)),
             f"the state's updates take {m['all_updates_time_ms']:.0f} ms a batch, {per_row:.2f} ms per updated row",
             f"audit.slow_updates_row_ms {t.slow_updates_row_ms:g} per row, slow_updates_ms {t.slow_updates_ms} a "
             "batch"),
            ("SLOW_CLEANUP", _level(m["all_removals_time_ms"], t.slow_cleanup_ms, t.slow_cleanup_ms_error),
             f"the state's cleanup (its eviction scan) takes {m['all_removals_time_ms'] / 1000:.1f} s",
             f"audit.slow_cleanup_ms {t.slow_cleanup_ms}, error at {t.slow_cleanup_ms_error}"),
        )
        details = {**{k: round(v, 3) for k, v in m.items()}, "ms_per_updated_row": round(per_row, 4)}
        found += [Finding(code, level, op_id, None, f"operator {op_id} ({names.get(op_id, 'stateful operator')}): "
                          f"{what}, the median of its last {m['batches']} batches ({levels})",
                          _SLOW_FIXES[code].format(job=job or "JOB"), details)
                  for code, level, what, levels in checks if level]
    return found


def late_drop_findings(report: AuditReport, input_rows: int, t: Thresholds) -> list[Finding]:
    found, seen = [], set()
    for op in report.operators:
        if not op.rows_dropped_by_watermark or op.operator_id in seen:
            continue
        seen.add(op.operator_id)  # one finding per operator, not per store
        share = op.rows_dropped_by_watermark / max(input_rows, 1)
        level = _level(share, t.late_drop_share, t.late_drop_share_error)
        if level:
            message = (f"operator {op.operator_id} ({op.operator_name}) dropped {op.rows_dropped_by_watermark} late "
                       f"rows behind the watermark, {share:.1%} of {input_rows} input rows over the last "
                       f"{t.late_drop_window_batches} batches (threshold {t.late_drop_share:.1%})")
            fix = ("Rows arrive later than the watermark delay allows and are silently left out of the results: "
                   "raise the watermark delay (within the job's watermark_min/max; safe on the same "
                   "checkpoint) if the business needs them, or route late rows to a correction path.")
            found.append(Finding("LATE_DATA_DROPS", level, op.operator_id, None, message, fix))
    return found


# --- everything ------------------------------------------------------------------------------------------

def kafka_lag_finding(lags: Sequence[int], t: Thresholds) -> Finding | None:
    """KAFKA_LAG: the query fell further behind its Kafka topics over kafka_lag_batches batches in a row."""
    if not kafka_lag.growing(lags, t.kafka_lag_batches, t.kafka_lag_min_offsets):
        return None
    level = "error" if lags[-1] >= t.kafka_lag_error_offsets else "warn"
    recent = lags[-(t.kafka_lag_batches + 1):]
    message = (f"the query is {lags[-1]:,} records behind the latest Kafka offsets, more after each of the last "
               f"{t.kafka_lag_batches} batches ({' -> '.join(f'{n:,}' for n in recent)}; threshold "
               f"{t.kafka_lag_min_offsets:,})")
    fix = ("Records arrive faster than the query reads them: raise maxOffsetsPerTrigger (kafka_options) if batches "
           "are small, give the job more cores or shuffle partitions (the repartition runbook) if they are slow, "
           "and check `stateops jobs status` for a stalled query (the health sensor restarts one).")
    return _finding("KAFKA_LAG", level, None, message, fix, {"lag": lags[-1], "recent": list(recent)})


def unreadable_finding(operator_id: int, store_name: str, batch_id: int, job: str | None, cause: str) -> Finding:
    """A store Spark cannot load at the audited batch (a truncated or bit-flipped state file, a lost
    version): the query fails on it too, so this is an error, and the fix is an archived copy."""
    name = job or "JOB"
    message = (f"operator {operator_id} store {store_name}: the state of batch {batch_id} cannot be read, "
               f"so the query cannot restart on it: {cause}")
    fix = (f"restore the newest verified archive: `stateops archives list {name}`, then "
           f"`stateops recover run {name} --mode restore --archive ID --confirm {name}`; without an archive, "
           f"`stateops recover run {name} --mode rebuild --confirm {name}` replays the retained input")
    return Finding("STATE_UNREADABLE", "error", operator_id, store_name, message, fix,
                   {"batch_id": batch_id, "cause": cause})


def restart_cost_finding(cost: RestartCost | None, t: Thresholds, job: str | None) -> Finding | None:
    """The next start's estimated load past the budget, with the snapshot interval that brings it back."""
    if cost is None:
        return None
    level = _level(cost.seconds, t.restart_budget_seconds, t.restart_budget_seconds_error)
    if not level:
        return None
    interval = cost.snapshot_interval(t.restart_budget_seconds)
    message = (f"{cost.summary()}; budget {t.restart_budget_seconds} s (audit.restart_budget_seconds, error from "
               f"restart_budget_seconds_error {t.restart_budget_seconds_error} s)")
    fix = (f"Snapshot the state more often: spark.sql.streaming.stateStore.minDeltasForSnapshot = {interval} (a store "
           f"then replays at most {interval} changelog(s), about {t.restart_budget_seconds} s at these rates), with "
           "spark.sql.streaming.stateStore.maintenanceInterval shorter than the job's runs, since the maintenance "
           "thread uploads the snapshots; the next snapshot ends this replay. Without changelog checkpointing every "
           "version is a snapshot: no replay, a slower commit.")
    return Finding("RESTART_COST", level, None, None, message, fix,
                   {**cost.to_dict(), "budget_seconds": t.restart_budget_seconds, "snapshot_interval": interval,
                    "snapshot_interval_setting": SNAPSHOT_INTERVAL})


def evaluate(report: AuditReport, t: Thresholds, history: Sequence[Mapping[str, Any]] = (),
             input_rows: int = 0, kafka_lags: Sequence[int] = (), state_memory: int | None = None,
             times: Mapping[int, Mapping[str, float]] | None = None,
             restart: RestartCost | None = None) -> list[Finding]:
    """All findings for a report. `history`: earlier audits of the same checkpoint (oldest first);
    `kafka_lags`: the total Kafka lag of the query's recent batches, oldest first (stateops.kafka_lag);
    `state_memory`: Spark's estimate of the state's heap at the latest batch (latest_state_memory); `times`:
    Spark's commit, update and removal times per operator (operator_times); `restart`: what the next start
    loads (stateops.checkpoints.restart_cost)."""
    earlier = [r for r in history if r.get("audited_at") is None or r["audited_at"] < report.audited_at]
    findings: list[Finding] = slow_findings(times or {}, {o.operator_id: o.operator_name for o in report.operators},
                                            t, report.job)
    for finding in (state_memory_finding(report, t, state_memory), restart_cost_finding(restart, t, report.job)):
        if finding:
            findings.append(finding)
    behind = kafka_lag_finding(kafka_lags, t)
    if behind:
        findings.append(behind)
    lag = watermark_lag_finding(report.watermark, report.measured_at, t, report.measured_against)
    if lag:
        findings.append(lag)
    findings += late_drop_findings(report, input_rows, t)
    by_operator: dict[int, list[OperatorAudit]] = {}
    for op in report.operators:
        by_operator.setdefault(op.operator_id, []).append(op)
    for stores in by_operator.values():  # one NO_WATERMARK per operator, not per store
        finding = no_watermark_finding(max(stores, key=lambda o: (o.rows_total or 0, o.bytes_total)),
                                       report.watermark, report.batch_id, any(o.watermarked for o in stores))
        if finding and len(stores) > 1:
            finding = Finding(finding.code, finding.severity, finding.operator_id, None, finding.message,
                              finding.recommendation, finding.details)
        if finding:
            findings.append(finding)
    for op in report.operators:
        same_kind = [r for r in earlier if _same_store(r, op) and r.get("kind", report.kind) == report.kind]
        for finding in (
            unbounded_dedup_finding(op),
            eviction_finding(op, report.watermark, t),
            skew_finding(op, t),
            growth_finding(op, earlier, t, report.kind, report.audited_at),
            cleanup_finding(op, same_kind[-1] if same_kind else None, t),
            large_state_finding(op, t),
        ):
            if finding:
                findings.append(finding)
    order = {"error": 0, "warn": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.operator_id if f.operator_id is not None else -1))
