"""Growth: state rows or bytes growing past the audit's growth rate over its window while the watermark
advances, rows above the job's budget, or findings that say the state is never evicted.

From the latest deep audit of the query, in this order:
    STATE_MEMORY                                       the state's memory past the monitoring table's levels, or
                                                       Spark's in-memory store near the heap the settings give
                                                       it: a warning alerts with the finding's fix; an error
                                                       switches the in-memory store's state to RocksDB
                                                       (switch-store, no input replayed; the policy's
                                                       memory_action), and alerts for a state in RocksDB
    UNBOUNDED_DEDUP, EVICTION_STALLED, CLEANUP_STUCK   alert with the finding's fix: the cause is the query
                                                       or the cluster, and no runbook changes code
    STATE_GROWTH, watermark advancing                  the policy's growth_action: adjust (the delay times
                                                       watermark_factor, never below the job's watermark_min)
                                                       or rebuild with that delay
    STATE_GROWTH, watermark standing still             alert: nothing is evicted while the watermark stands
    rows above state_rows_budget                       growth_action, as for growth
    SLOW_COMMIT, SLOW_STATE_UPDATES, SLOW_CLEANUP,     alert with the finding's fix: the state's own times
    RESTART_COST                                       (the store, its memory, the checkpoint store, the
                                                       snapshot interval) are no runbook's to change
Otherwise the cheap signal: the progress rows of the window (rows growing past the rate while the watermark
advances, or above the budget) request a deep audit.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Sequence

from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.state_store import ROCKSDB
from stateops.remediation.model import Decision, at_least, finding_key, runbook_config, tightened, when
from stateops.remediation.policy import Policy
from stateops.remediation.signals import Trail

CODE_PROBLEMS = ("UNBOUNDED_DEDUP", "EVICTION_STALLED", "CLEANUP_STUCK")
SLOW = ("SLOW_COMMIT", "SLOW_STATE_UPDATES", "SLOW_CLEANUP", "RESTART_COST")
GROWTH = "STATE_GROWTH"
MEMORY = "STATE_MEMORY"


def _where(f: Mapping[str, Any]) -> str:
    return f"operator {f['operator_id']} store {f['store_name']}" if f.get("operator_id") is not None else "the query"


def decide_growth(job: str, trail: Trail, policy: Policy, thresholds: Thresholds, progress: Sequence[Mapping[str, Any]],
                  *, watermark_delay: str, watermark_min: str) -> Decision:
    latest = trail.latest
    if latest is not None:
        found = [f for f in trail.findings_of(latest["audit_id"]) if at_least(f["severity"], policy.min_severity)]
        memory = [f for f in found if f["code"] == MEMORY]
        if memory:
            return _memory(job, policy, memory[0])
        problems = [f for f in found if f["code"] in CODE_PROBLEMS]
        if problems:
            return _alert(job, min(problems, key=lambda p: CODE_PROBLEMS.index(p["code"])), "code fix")
        growth = [f for f in found if f["code"] == GROWTH]
        if growth:
            f = growth[0]
            return _grown(job, trail, policy, f, watermark_delay, watermark_min)
        if policy.state_rows_budget and latest["rows_total"] > policy.state_rows_budget:
            f = {"audit_id": latest["audit_id"], "code": "ROWS_BUDGET", "severity": "error", "operator_id": None,
                 "store_name": None, "message": f"{latest['rows_total']} state rows at batch {latest['batch_id']}, above "
                 f"the job's state_rows_budget {policy.state_rows_budget}", "recommendation": "", "details": {}}
            return _act(job, policy, f, f["message"], "growth.rows_budget", watermark_delay, watermark_min)
        slow = [f for f in found if f["code"] in SLOW]
        if slow:
            return _alert(job, min(slow, key=lambda p: (p["severity"] != "error", SLOW.index(p["code"]))), "its fix")
    return _progress_signal(job, trail, policy, thresholds, progress)


def _alert(job: str, f: Mapping[str, Any], what: str) -> Decision:
    return Decision(job, "alert", f"{f['code']} {f['severity']} on {_where(f)} (deep audit {f['audit_id'][:8]}): "
                    f"{f['message']}. Fix: {f['recommendation']}", key=finding_key(f),
                    rule=f"growth.{f['code'].lower()} -> alert ({what})", finding=f)


def _memory(job: str, policy: Policy, f: Mapping[str, Any]) -> Decision:
    """The memory guard: a warning alerts; an error switches the in-memory store's state to RocksDB
    (policy.memory_action). A state already in RocksDB alerts with the finding's fix: no runbook bounds it."""
    seen = f"{MEMORY} {f['severity']} (deep audit {f['audit_id'][:8]}): {f['message']}"
    in_rocksdb = (f.get("details") or {}).get("store") == ROCKSDB
    if f["severity"] != "error" or policy.memory_action == "alert" or in_rocksdb:
        return Decision(job, "alert", f"{seen}. Fix: {f['recommendation']}", key=finding_key(f),
                        rule="growth.state_memory -> alert", finding=f)
    rule = f"growth.state_memory -> switch-store ({ROCKSDB})"
    reason = f"sensor state_growth_sensor, rule {rule}, audit {f['audit_id']}: {f['message']}"
    return Decision(job, "remediate", f"{seen}: switch the state to RocksDB", key=finding_key(f), rule=rule, finding=f,
                    runbook=runbook_config(job, "switch-store", reason=reason, dry_run=policy.mode == "plan",
                                           to_store=ROCKSDB))


def _grown(job: str, trail: Trail, policy: Policy, f: Mapping[str, Any], delay: str, minimum: str) -> Decision:
    latest = trail.latest
    baseline_at = min((v["baseline_audited_at"] for v in f["details"].values()
                       if isinstance(v, Mapping) and "baseline_audited_at" in v), default=None)
    baseline = next((a for a in trail.audits if when(a["audited_at"]) == baseline_at), None)
    seen = f"STATE_GROWTH {f['severity']} on {_where(f)} (deep audit {f['audit_id'][:8]}): {f['message']}"
    before = baseline["watermark"] if baseline else None
    if before is None or latest["watermark"] is None or latest["watermark"] <= before:
        return Decision(job, "alert", f"{seen}; the watermark did not advance ({when(before)} -> "
                        f"{when(latest['watermark'])}): nothing is evicted while it stands still, and a tighter "
                        "delay would not change that. Check that every input advances (WATERMARK_LAG).",
                        key=finding_key(f), rule="growth.watermark_stalled -> alert", finding=f)
    return _act(job, policy, f, f"{seen}; the watermark advanced {when(before)} -> {when(latest['watermark'])}",
                "growth", delay, minimum)


def _act(job: str, policy: Policy, f: Mapping[str, Any], seen: str, rule: str, delay: str, minimum: str) -> Decision:
    key = finding_key(f)
    if policy.growth_action == "alert":
        return Decision(job, "alert", seen, key=key, rule=f"{rule} -> alert", finding=f)
    shorter = tightened(delay, minimum, policy.watermark_factor)
    if shorter is None and policy.growth_action == "adjust":
        return Decision(job, "alert", f"{seen}; the watermark delay {delay} is already at the job's watermark_min "
                        f"{minimum}: rebuild, or change the query", key=key, rule=f"{rule} -> alert (at watermark_min)",
                        finding=f)
    change = f"watermark delay {delay} -> {shorter}" if shorter else f"watermark delay {delay} (at watermark_min)"
    full_rule = f"{rule} -> {policy.growth_action} ({change})"
    reason = f"sensor state_growth_sensor, rule {full_rule}, audit {f['audit_id']}: {f['message']}"
    return Decision(job, "remediate", f"{seen}: {policy.growth_action}, {change}", key=key, rule=full_rule, finding=f,
                    runbook=runbook_config(job, policy.growth_action, reason=reason, dry_run=policy.mode == "plan",
                                           watermark_delay=shorter))


def _progress_signal(job: str, trail: Trail, policy: Policy, t: Thresholds,
                     progress: Sequence[Mapping[str, Any]]) -> Decision:
    latest = trail.latest
    deep = (f"latest deep audit {latest['audit_id'][:8]} at {when(latest['audited_at'])} shows no growth to act on"
            if latest else "no deep audit of this query yet")
    rows = [r for r in progress if r.get("state_rows_total") is not None]
    if not rows:
        return Decision(job, "skip", f"{job}: {deep}; no progress rows in the growth window")
    first, last = rows[0], rows[-1]
    now_rows, base = last["state_rows_total"], first["state_rows_total"]
    seen = None
    if policy.state_rows_budget and now_rows > policy.state_rows_budget:
        seen = f"{now_rows} state rows at batch {last['batch_id']}, above state_rows_budget {policy.state_rows_budget}"
    elif (now_rows - base >= max(t.growth_min_rows, 1) and base and now_rows / base >= t.growth_ratio
          and first["watermark"] is not None and last["watermark"] is not None and last["watermark"] > first["watermark"]):
        seen = (f"state rows grew {now_rows / base:.2f}x from {base} (batch {first['batch_id']}) to {now_rows} (batch "
                f"{last['batch_id']}) while the watermark advanced (growth_ratio {t.growth_ratio:g})")
    if seen is None:
        return Decision(job, "skip", f"{job}: {deep}; progress: {base} -> {now_rows} state rows over batches "
                        f"{first['batch_id']}..{last['batch_id']}")
    return Decision(job, "escalate", f"{deep}; progress: {seen}: the deep audit confirms or clears it",
                    key=f"progress:{last['query_id']}:{last['batch_id']}", rule="growth.progress -> deep audit")


def window_start(now: _dt.datetime, t: Thresholds) -> _dt.datetime:
    return now - _dt.timedelta(seconds=t.growth_window_seconds)
