"""What a sensor tick decides, as plain data: one Decision per job, and the runbook request it carries.

    remediate  launch the recovery runbook (`state_recovery`) with `runbook` as its config
    restart    launch an ordinary run of the job (a stale lease or a failed run: the next run takes over)
    escalate   launch the job's deep audit: cheap numbers look wrong, the deep audit confirms or clears them
    alert      tell a person (webhook, an observation on the job's asset): no runbook fixes this
    skip       nothing to do; `reason` says why

`key` identifies what was acted on (a finding: audit id, code, operator, store; or a health event), so a
finding leads to one run however many ticks see it: it is the run key and a tag of the launched run.
"""
from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from stateops.durations import parse_seconds

ACTIONS = ("remediate", "restart", "escalate", "alert", "skip")
SEVERITY_ORDER = {"info": 0, "warn": 1, "error": 2}
TAG = "stateops"  # tag prefix of sensor-launched runs


@dataclass(frozen=True)
class Decision:
    job: str
    action: str
    reason: str  # one line: what was seen and why this action (or why nothing)
    key: str | None = None
    rule: str | None = None  # the policy rule that chose the action, e.g. "skew.many_keys -> repartition"
    finding: Mapping[str, Any] | None = field(default=None, compare=False)  # the findings row acted on
    runbook: Mapping[str, Any] | None = None  # remediate: the state_recovery config
    run_config: Mapping[str, Any] | None = None  # restart: the job run's config (e.g. continuous mode)

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")

    def skipped(self, why: str) -> "Decision":
        """This decision held back by a guard: a skip that still names what it would have done."""
        return replace(self, action="skip", reason=f"{why} (would {self.action}: {self.reason})")

    def alerted(self, why: str) -> "Decision":
        """This remediation turned into an alert: the runbook would refuse it (`why`, its one line)."""
        return replace(self, action="alert", reason=f"{self.reason}; the runbook would refuse it: {why}",
                       rule=f"{self.rule} (refused) -> alert", runbook=None)

    def tags(self, sensor: str) -> dict[str, str]:
        """Tags of the launched run: they link it back to the finding, its audit and the rule."""
        finding = self.finding or {}
        values = {"job": self.job, "sensor": sensor, "action": self.action, "key": self.key, "rule": self.rule,
                  "finding_code": finding.get("code"), "finding_severity": finding.get("severity"),
                  "audit_id": finding.get("audit_id")}
        if self.runbook is not None:
            values["runbook_mode"] = self.runbook["mode"]
            values["dry_run"] = str(self.runbook["dry_run"]).lower()
        return {f"{TAG}/{name}": str(value) for name, value in values.items() if value is not None}


def finding_key(row: Mapping[str, Any]) -> str:
    """One finding of one audit: audit id, code, operator and store."""
    return ":".join(str(row.get(name)) for name in ("audit_id", "code", "operator_id", "store_name"))


def at_least(severity: str | None, minimum: str) -> bool:
    return SEVERITY_ORDER.get(severity or "", -1) >= SEVERITY_ORDER[minimum]


def runbook_config(job: str, mode: str, *, reason: str, dry_run: bool, watermark_delay: str | None = None,
                   shuffle_partitions: int | None = None, to_store: str | None = None) -> dict[str, Any]:
    """The `state_recovery` job's config (its Launchpad form), every field present. A dry run carries no
    confirmation: the person who launches it for real types the job's name."""
    return {"job": job, "mode": mode, "watermark_delay": watermark_delay, "shuffle_partitions": shuffle_partitions,
            "to_batch": None, "archive_id": None, "to_store": to_store, "reason": reason,
            "confirm": None if dry_run else job, "dry_run": dry_run}


def interval(seconds: int) -> str:
    """A delay as the runbook accepts it: whole minutes when it divides, else seconds."""
    return f"{seconds // 60} minutes" if seconds % 60 == 0 else f"{seconds} seconds"


def tightened(delay: str, minimum: str, factor: float) -> str | None:
    """`delay` times `factor`, never below `minimum`; None when that changes nothing (already at the minimum)."""
    current, low = parse_seconds(delay), parse_seconds(minimum)
    wanted = max(low, int(current * factor))
    return interval(wanted) if wanted < current else None


def more_partitions(current: int, factor: float, maximum: int) -> int | None:
    """At least `current` x `factor` partitions, coprime with `current`, at most `maximum`; None if no more fit.

    Coprime, because keys that collide modulo P keep colliding modulo any multiple of P: keys hashed onto
    partition 0 of 4 land on partitions 0 and 4 of 8 (half the state on one task of eight), but spread
    over every partition of 9.
    """
    wanted = max(current + 1, math.ceil(current * factor))
    while math.gcd(wanted, current) != 1:
        wanted += 1
    wanted = min(wanted, maximum)
    return wanted if wanted > current else None


def age(moment: _dt.datetime | None, now: _dt.datetime) -> float | None:
    return None if moment is None else (now - moment).total_seconds()


def when(moment: _dt.datetime | None) -> str:
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="seconds") if moment else "never"
