"""What holds a decision back: a person's runbook (maintenance lock), a finding already acted on, a run still
in flight, the per-job cooldown, the daily budget; and for escalations, a deep audit already running or
requested recently. Pure: the sensor passes the Dagster runs it found as `Launched` rows.

The sensor's cursor remembers the keys it acted on (and alerted about), so a finding leads to one run
however many ticks see it; the runs' tags say the same after a cursor is lost, and the run key makes the
Dagster daemon drop a repeated request as well.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from stateops.timefmt import human_duration
from stateops.remediation.model import Decision, when
from stateops.remediation.policy import Policy

DAY = _dt.timedelta(days=1)
KEPT_KEYS = 50  # per job and list in the cursor: far more than one job produces between two ticks


@dataclass(frozen=True)
class Launched:
    """A run launched earlier for a job (a remediation or restart by a sensor, or a deep audit)."""

    run_id: str
    created_at: _dt.datetime
    finished: bool
    key: str | None = None  # the decision key it was launched for (tag), if any


def lock_reason(lock: Mapping[str, Any] | None) -> str | None:
    if not lock:
        return None
    return (f"runbook {lock['runbook_id']} ({lock['actor']}, since {lock['since']}) holds the maintenance lock: "
            f"{lock['reason']}")


def guard(decision: Decision, policy: Policy, launched: Iterable[Launched], *, lock: Mapping[str, Any] | None,
          handled: bool, now: _dt.datetime) -> Decision:
    """`decision` if it may launch now, else a skip naming the first guard that holds it back."""
    if decision.action not in ("remediate", "restart"):
        return decision
    if (why := lock_reason(lock)) is not None:
        return decision.skipped(f"{decision.job}: {why}")
    runs = sorted(launched, key=lambda r: r.created_at)
    same = next((r for r in runs if r.key == decision.key), None)
    if handled or same is not None:
        by = f" by run {same.run_id} at {when(same.created_at)}" if same else ""
        return decision.skipped(f"{decision.job}: {decision.key} was already acted on{by}")
    flying = [r for r in runs if not r.finished]
    if flying:
        return decision.skipped(f"{decision.job}: remediation run {flying[-1].run_id} is still in flight")
    if runs and policy.cooldown_seconds:
        last = runs[-1]
        ready = last.created_at + _dt.timedelta(seconds=policy.cooldown_seconds)
        if now < ready:
            return decision.skipped(f"{decision.job}: cooldown after run {last.run_id} at {when(last.created_at)} "
                                    f"until {when(ready)} (cooldown_seconds {policy.cooldown_seconds})")
    today = [r for r in runs if r.created_at > now - DAY]
    if len(today) >= policy.daily_budget:
        return decision.skipped(f"{decision.job}: daily budget used: {len(today)} of {policy.daily_budget} runs in "
                                f"the last 24 h (daily_budget), next at {when(today[0].created_at + DAY)}")
    return decision


def guard_escalation(decision: Decision, policy: Policy, audits: Iterable[Launched], *,
                     lock: Mapping[str, Any] | None, now: _dt.datetime) -> Decision:
    """An escalation waits for a deep audit in flight, and for escalate_interval_seconds after the last one."""
    if decision.action != "escalate":
        return decision
    if (why := lock_reason(lock)) is not None:
        return decision.skipped(f"{decision.job}: {why}")
    runs = sorted(audits, key=lambda r: r.created_at)
    flying = [r for r in runs if not r.finished]
    if flying:
        return decision.skipped(f"{decision.job}: deep audit run {flying[-1].run_id} is still in flight")
    if runs:
        since = (now - runs[-1].created_at).total_seconds()
        if since < policy.escalate_interval_seconds:
            return decision.skipped(
                f"{decision.job}: deep audit run {runs[-1].run_id} was launched {human_duration(since)} ago "
                f"(escalate_interval_seconds {policy.escalate_interval_seconds})")
    return decision


@dataclass
class Cursor:
    """Per job, the decision keys a sensor acted on and alerted about (newest last), and its last report of the
    stream's health (fingerprint, when: stateops.remediation.observed)."""

    acted: dict[str, list[str]] = field(default_factory=dict)
    alerted: dict[str, list[str]] = field(default_factory=dict)
    reported: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "Cursor":
        """An unreadable cursor starts empty: the runs' tags and run keys still prevent repeats."""
        try:
            data = json.loads(text) if text else {}
            return cls({j: list(k) for j, k in data.get("acted", {}).items()},
                       {j: list(k) for j, k in data.get("alerted", {}).items()},
                       {j: (str(r[0]), str(r[1])) for j, r in data.get("reported", {}).items()})
        except (ValueError, TypeError, AttributeError, IndexError):
            return cls()

    def dumps(self) -> str:
        return json.dumps({"acted": self.acted, "alerted": self.alerted,
                           **({"reported": self.reported} if self.reported else {})}, sort_keys=True)

    def has_acted(self, job: str, key: str | None) -> bool:
        return key is not None and key in self.acted.get(job, [])

    def has_alerted(self, job: str, key: str | None) -> bool:
        return key is not None and key in self.alerted.get(job, [])

    def mark_acted(self, job: str, key: str) -> None:
        self.acted[job] = [*self.acted.get(job, []), key][-KEPT_KEYS:]

    def mark_alerted(self, job: str, key: str) -> None:
        self.alerted[job] = [*self.alerted.get(job, []), key][-KEPT_KEYS:]
