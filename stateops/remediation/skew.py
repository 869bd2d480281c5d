"""Skew: act when M consecutive deep audits of the query show STATE_SKEW on the same store, by its cause.

    many_keys  more keys hash onto one partition than chance does: another partition count spreads them
               (repartition, the cheap cure, or rebuild; the policy's skew_action)
    hot_key    one key holds most of the busiest partition: no partition count splits a key, so alert only,
               naming the key and recommending salting
    unknown    alert with the audit's recommendation

Fewer than M: request another deep audit (escalation). No deep skew but the tick's fast audit sees bytes
skew: request a deep audit too, rather than remediate on the cheap numbers.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from stateops.audit.model import AuditReport
from stateops.remediation.model import Decision, at_least, finding_key, more_partitions, runbook_config, when
from stateops.remediation.policy import Policy
from stateops.remediation.signals import Trail

CODE = "STATE_SKEW"
ACTED_ON = ("many_keys", "hot_key", "unknown")  # few_keys is an info finding, hashing is no finding


def _qualifying(trail: Trail, audit_id: str, policy: Policy) -> dict[tuple, dict[str, Any]]:
    return {(f["operator_id"], f["store_name"]): f for f in trail.findings_of(audit_id, [CODE])
            if at_least(f["severity"], policy.min_severity) and f["details"].get("cause") in ACTED_ON}


def _where(f: Mapping[str, Any]) -> str:
    return f"operator {f['operator_id']} store {f['store_name']}"


def decide_skew(job: str, trail: Trail, policy: Policy, fast: AuditReport | None) -> Decision:
    latest = trail.latest
    current = _qualifying(trail, latest["audit_id"], policy) if latest else {}
    if not current:
        return _fast_signal(job, trail, policy, fast)
    store, finding = max(current.items(), key=lambda item: item[1]["details"].get("ratio") or 0)
    streak = 0
    for audit in reversed(trail.audits):
        if store not in _qualifying(trail, audit["audit_id"], policy):
            break
        streak += 1
    d = finding["details"]
    seen = (f"STATE_SKEW {finding['severity']} on {_where(finding)}: {d.get('ratio')}x an even split, cause "
            f"{d.get('cause')}, on {min(streak, policy.skew_audits)} of {policy.skew_audits} consecutive deep audits "
            f"(latest {latest['audit_id'][:8]} at {when(latest['audited_at'])})")
    if streak < policy.skew_audits:
        return Decision(job, "escalate", f"{seen}; another deep audit confirms or clears it",
                        key=f"confirm:{finding_key(finding)}", rule="skew.confirm -> deep audit", finding=finding)
    key = finding_key(finding)
    if d.get("cause") == "hot_key":
        hot = json.dumps(d.get("hot_key"), default=str) if d.get("hot_key") is not None else "one key"
        share = f" holds {d['hot_key_share']:.0%} of partition {d.get('hot_partition')}" if d.get("hot_key_share") else ""
        return Decision(job, "alert", f"{seen}: key {hot}{share}. No partition count splits a key: salt it (a random "
                        f"suffix, aggregate, then combine) or route it to its own path. {finding['recommendation']}",
                        key=key, rule="skew.hot_key -> alert", finding=finding)
    if d.get("cause") != "many_keys" or policy.skew_action == "alert":
        return Decision(job, "alert", f"{seen}. {finding['recommendation']}", key=key,
                        rule=f"skew.{d.get('cause')} -> alert", finding=finding)
    partitions = d.get("partitions") or latest["partitions"].get(store)
    wanted = more_partitions(partitions, policy.partitions_factor, policy.max_shuffle_partitions)
    if wanted is None:
        return Decision(job, "alert", f"{seen}; already {partitions} partitions, max_shuffle_partitions is "
                        f"{policy.max_shuffle_partitions}. {finding['recommendation']}", key=key,
                        rule="skew.many_keys -> alert (at max_shuffle_partitions)", finding=finding)
    rule = f"skew.many_keys -> {policy.skew_action} {partitions} -> {wanted} partitions"
    reason = f"sensor state_skew_sensor, rule {rule}, audit {finding['audit_id']}: {finding['message']}"
    return Decision(job, "remediate", f"{seen}: {policy.skew_action} to {wanted} partitions", key=key, rule=rule,
                    finding=finding, runbook=runbook_config(job, policy.skew_action, reason=reason,
                                                            dry_run=policy.mode == "plan",
                                                            shuffle_partitions=wanted))


def _fast_signal(job: str, trail: Trail, policy: Policy, fast: AuditReport | None) -> Decision:
    latest = trail.latest
    deep = (f"latest deep audit {latest['audit_id'][:8]} at {when(latest['audited_at'])} shows no actionable skew"
            if latest else "no deep audit of this query yet")
    flagged = [f for f in (fast.findings if fast else []) if f.code == CODE and at_least(f.severity, policy.min_severity)
               and (f.details or {}).get("cause") in ACTED_ON]
    if flagged:
        worst = max(flagged, key=lambda f: (f.details or {}).get("ratio") or 0)
        return Decision(job, "escalate", f"{deep}; the fast audit at batch {fast.batch_id} sees {worst.severity} bytes "
                        f"skew on operator {worst.operator_id} store {worst.store_name} "
                        f"({(worst.details or {}).get('ratio')}x): the deep audit confirms or clears it",
                        key=f"fast:{fast.query_id}:{fast.batch_id}", rule="skew.fast -> deep audit")
    ratios = [op.skew_ratio for op in (fast.operators if fast else []) if op.skew_ratio is not None]
    fast_text = f"; fast audit at batch {fast.batch_id}: max bytes ratio {max(ratios):g}" if ratios else ""
    return Decision(job, "skip", f"{job}: no skew to act on: {deep}{fast_text}")
