"""Numbers in, findings out: pure functions with stable codes, a message with the numbers, and a fix.

No JVM, no I/O: deep and fast audits build an AuditReport, then `evaluate` turns it (plus the history of
earlier audits and recent progress rows, both plain dicts) into findings. Severity levels come from
Thresholds; an error threshold of 0 disables the error level.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Iterable, Mapping, Sequence

from stateops.audit.model import AuditReport, Finding, OperatorAudit, skew_ratio
from stateops.audit.thresholds import Thresholds

EVICTING_KINDS = ("aggregation", "dedup", "dedup_within_watermark", "session", "join")


def _level(value: float, warn: float, error: float) -> str | None:
    if error and value >= error:
        return "error"
    if warn and value >= warn:
        return "warn"
    return None


def _worst(*levels: str | None) -> str | None:
    order = {None: 0, "info": 1, "warn": 2, "error": 3}
    return max(levels, key=lambda lvl: order[lvl])


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {seconds % 60} s"


def _iso(moment: _dt.datetime | None) -> str:
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="seconds") if moment else "none"


def _where(op: OperatorAudit) -> str:
    return f"operator {op.operator_id} ({op.operator_name}, store {op.store_name})"


def _finding(code: str, severity: str, op: OperatorAudit | None, message: str, recommendation: str) -> Finding:
    return Finding(code, severity, op.operator_id if op else None, op.store_name if op else None, message,
                   recommendation)


# --- STATE_SKEW --------------------------------------------------------------------------------------

def skew_finding(op: OperatorAudit, t: Thresholds) -> Finding | None:
    measures = (  # (per partition, total, minimum to judge, how a partition's share reads)
        (op.rows_per_partition, op.rows_total or 0, t.skew_min_rows,
         lambda v: f"{v} of {op.rows_total} rows", "rows"),
        (op.bytes_per_partition, op.bytes_total or 0, t.skew_min_bytes,
         lambda v: f"{human_bytes(v)} of {human_bytes(op.bytes_total)} on disk", "bytes"),
    )
    parts, level = [], None
    for per_partition, total, minimum, share, unit in measures:
        ratio = skew_ratio(per_partition) if per_partition else None
        lvl = _level(ratio, t.skew_ratio, t.skew_ratio_error) if ratio is not None and total >= minimum else None
        if lvl:
            hot, value = max(per_partition.items(), key=lambda kv: kv[1])
            parts.append(f"partition {hot} holds {share(value)}; max/median {unit} per partition "
                         f"= {ratio:g} (threshold {t.skew_ratio:g})")
            level = _worst(level, lvl)
    if not level:
        return None
    fix = ("One key or a few keys dominate one partition; more shuffle partitions do not split a key. "
           "Look at top_keys: salt a hot grouping key (add a random suffix, aggregate, then combine), "
           "filter or route a runaway key (a bot, a null or default id) to its own path, "
           "or pre-aggregate it before the stateful operator.")
    if op.kind == "join":
        fix = ("One join key holds most rows of this join side: look at top_keys, drop or route that key "
               "(often a null/default id or a bot) before the join, and keep a time bound on the join so the "
               "rows are evicted.")
    return _finding("STATE_SKEW", level, op, f"{_where(op)}: " + "; ".join(parts), fix)


# --- EVICTION_STALLED, UNBOUNDED_DEDUP, NO_WATERMARK ---------------------------------------------------

_EVICTION_FIX = {
    "aggregation": "Aggregation state is evicted only in append or update output mode with a watermark on the "
                   "grouped event-time column (window(...)); complete mode keeps every group forever. Use "
                   "update/append, and check that every input's watermark advances.",
    "session": "Session state is evicted once session end passes the watermark in append/update mode; check "
               "the output mode and that every input's watermark advances.",
    "join": "Join state is evicted only when the join condition bounds event time between the two sides (e.g. "
            "p.time BETWEEN o.time AND o.time + INTERVAL 5 MINUTES) and both inputs have watermarks: add the "
            "time-range condition, or raise join_eviction_grace_seconds if the bound is wider.",
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
    if op.kind == "join":
        rule = f"{op.event_time_column} < watermark - {t.join_eviction_grace_seconds} s grace"
    oldest = f"; the oldest is {_iso(op.oldest_event_time)}" if op.oldest_event_time else ""
    message = (f"{_where(op)}: {op.rows_behind_watermark} of {op.rows_total} rows ({share:.1%}) are behind the "
               f"watermark {_iso(watermark)} ({rule}) and should have been evicted{oldest}")
    return _finding("EVICTION_STALLED", level, op, message,
                    _EVICTION_FIX.get(op.kind, "Check the output mode and that the watermark advances."))


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
    message = (f"{_where(op)}: no watermark at batch {batch_id} (batchWatermarkMs is 0) and no event-time "
               f"column in the state schema: its state ({rows}) is never evicted by event time")
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


def _same_store(row: Mapping[str, Any], op: OperatorAudit) -> bool:
    return row.get("operator_id") == op.operator_id and row.get("store_name") == op.store_name


def growth_finding(op: OperatorAudit, previous: Sequence[Mapping[str, Any]], t: Thresholds) -> Finding | None:
    """Against the oldest of the last `growth_lookback` earlier audits of this store (oldest first in)."""
    rows = [r for r in previous if _same_store(r, op)][-max(t.growth_lookback, 1):]
    if not rows:
        return None
    parts, level = [], None
    for label, now, min_delta, fmt in (("rows", op.rows_total, t.growth_min_rows, str),
                                       ("bytes", op.bytes_total, t.growth_min_bytes, human_bytes)):
        base_row = next((r for r in rows if r.get(f"{label}_total") is not None), None)
        if now is None or base_row is None:
            continue
        base = base_row[f"{label}_total"]
        if now - base < max(min_delta, 1):
            continue
        ratio = now / base if base else float("inf")
        lvl = _level(ratio, t.growth_ratio, t.growth_ratio_error)
        if lvl:
            when = base_row.get("audited_at")
            when = _iso(when) if isinstance(when, _dt.datetime) else str(when)
            parts.append(f"{label} grew {ratio:.2f}x from {fmt(base)} (batch {base_row.get('batch_id')}, {when}) "
                         f"to {fmt(now)} (threshold {t.growth_ratio:g}x)")
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
    return _finding("STATE_GROWTH", level, op, f"{_where(op)}: " + "; ".join(parts), fix)


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
           "executor can delete files on the checkpoint storage, and that minBatchesToRetain was not raised; "
           "then use StateOps retention (dry-run first) to trim old versions.")
    return _finding("CLEANUP_STUCK", level, op, message, fix)


# --- WATERMARK_LAG, LATE_DATA_DROPS ---------------------------------------------------------------------

def watermark_lag_finding(watermark: _dt.datetime | None, now: _dt.datetime, t: Thresholds) -> Finding | None:
    if watermark is None:
        return None
    lag = (now - watermark).total_seconds()
    level = _level(lag, t.watermark_lag_seconds, t.watermark_lag_error_seconds)
    if not level:
        return None
    message = (f"the watermark {_iso(watermark)} is {human_duration(lag)} behind now {_iso(now)} "
               f"(threshold {human_duration(t.watermark_lag_seconds)})")
    fix = ("Expected while replaying history. Otherwise the query is stopped or falling behind: check that it "
           "runs (progress table), that every input advances (with several inputs the slowest one sets the "
           "watermark) and that no input partition is idle; a stalled watermark stops all eviction.")
    return _finding("WATERMARK_LAG", level, None, message, fix)


def operator_progress(progress: Iterable[Mapping[str, Any]], operators: Sequence[tuple[int, str]],
                      window: int) -> tuple[int, dict[int, dict[str, int]]]:
    """Input rows over the last `window` progress rows, and per operator id: latest numRowsTotal and
    rows dropped by the watermark in the window.

    Progress lists state operators in plan order, which is the order Spark numbers operator ids in; the
    names are checked, and matched by name when the order does not line up.
    """
    rows = sorted((r for r in progress if r.get("batch_id") is not None), key=lambda r: r["batch_id"])
    rows = rows[-max(window, 1):]
    ids = sorted({op_id for op_id, _ in operators})
    names = {op_id: name for op_id, name in operators}
    input_rows, out = 0, {}
    for row in rows:
        input_rows += row.get("input_rows") or 0
        metrics = json.loads(row.get("state_operators_json") or "[]")
        for index, metric in enumerate(metrics):
            op_id = ids[index] if index < len(ids) and names[ids[index]] == metric.get("operator_name") else next(
                (i for i in ids if names[i] == metric.get("operator_name")), None)
            if op_id is None:
                continue
            entry = out.setdefault(op_id, {"rows_total": 0, "dropped": 0})
            entry["rows_total"] = metric.get("num_rows_total") or 0
            entry["dropped"] += metric.get("num_rows_dropped_by_watermark") or 0
    return input_rows, out


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

def evaluate(report: AuditReport, t: Thresholds, history: Sequence[Mapping[str, Any]] = (),
             input_rows: int = 0) -> list[Finding]:
    """All findings for a report. `history`: earlier audits of the same checkpoint (oldest first)."""
    earlier = [r for r in history if r.get("audited_at") is None or r["audited_at"] < report.audited_at]
    findings: list[Finding] = []
    lag = watermark_lag_finding(report.watermark, report.audited_at, t)
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
                              finding.recommendation)
        if finding:
            findings.append(finding)
    for op in report.operators:
        same_kind = [r for r in earlier if _same_store(r, op) and r.get("kind", report.kind) == report.kind]
        for finding in (
            unbounded_dedup_finding(op),
            eviction_finding(op, report.watermark, t),
            skew_finding(op, t),
            growth_finding(op, earlier, t),
            cleanup_finding(op, same_kind[-1] if same_kind else None, t),
            large_state_finding(op, t),
        ):
            if finding:
                findings.append(finding)
    order = {"error": 0, "warn": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.operator_id if f.operator_id is not None else -1))
