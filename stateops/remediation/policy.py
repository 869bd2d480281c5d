"""Remediation policy per job: which finding leads to which runbook action, and how often sensors may act.

In the STATEOPS_CONFIG file, beside `[jobs.*]` and `[audit]`:

    [remediation]                  # every job
    mode = "plan"                  # plan: a dry-run runbook whose plan waits for a person; auto: act
    [remediation.jobs.user_activity]
    mode = "auto"
    daily_budget = 2

Every value is checked at load (type, range, allowed words); a problem is a ConfigError naming the field
and the fix, so a typo never silently falls back to a default.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from stateops.errors import ConfigError

MODES = ("plan", "auto")
SKEW_ACTIONS = ("repartition", "rebuild", "alert")
GROWTH_ACTIONS = ("adjust", "rebuild", "alert")
SEVERITIES = ("warn", "error")
_CHOICES = {"mode": MODES, "skew_action": SKEW_ACTIONS, "growth_action": GROWTH_ACTIONS, "min_severity": SEVERITIES}
_FACTORS = {"partitions_factor": (1.0, None), "watermark_factor": (0.0, 1.0)}  # exclusive bounds


@dataclass(frozen=True)
class Policy:
    # plan: launch the runbook as a dry run (its plan waits for a person, who launches it for real from the
    # Launchpad with the same config); auto: launch it confirmed.
    mode: str = "plan"
    # Findings below this severity are never acted on.
    min_severity: str = "warn"
    # At most one sensor-launched remediation per job in this time, and at most daily_budget in 24 h.
    cooldown_seconds: int = 6 * 3600
    daily_budget: int = 3
    # STATE_SKEW: act after this many consecutive deep audits of the query show it (M).
    skew_audits: int = 2
    # Skew across many keys: repartition (offline, keeps the checkpoint: the cheap cure) or rebuild (fresh
    # checkpoint); the partition count grows by partitions_factor, up to max_shuffle_partitions. One hot key is
    # alert-only whatever this says: no partition count splits a key.
    skew_action: str = "repartition"
    partitions_factor: float = 2.0
    max_shuffle_partitions: int = 200
    # STATE_GROWTH while the watermark advances, or rows above state_rows_budget (0: no budget): adjust (the
    # watermark delay times watermark_factor, never below the job's watermark_min) or rebuild.
    growth_action: str = "adjust"
    watermark_factor: float = 0.5
    state_rows_budget: int = 0
    # Escalation: a tick that sees trouble in cheap numbers requests the job's deep audit, at most once per
    # escalate_interval_seconds.
    escalate_interval_seconds: int = 900
    # Query health: a live lease without a new batch for this long is a stalled query.
    progress_timeout_seconds: int = 900
    # Query health: restart a job whose last run failed.
    restart_failed: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, job: str | None = None) -> "Policy":
        """Defaults, then `[remediation]`, then `[remediation.jobs.<job>]`."""
        section = (config or {}).get("remediation", {})
        if not isinstance(section, Mapping):
            raise ConfigError("remediation", "is not a table", "write it as [remediation] with name = value lines")
        policy = cls().with_values({k: v for k, v in section.items() if k != "jobs"}, "remediation")
        per_job = section.get("jobs", {})
        if not isinstance(per_job, Mapping):
            raise ConfigError("remediation.jobs", "is not a table", "write per-job policies as [remediation.jobs.NAME]")
        if job and job in per_job:
            policy = policy.with_values(per_job[job], f"remediation.jobs.{job}")
        return policy

    def with_values(self, values: Mapping[str, Any], where: str) -> "Policy":
        if not isinstance(values, Mapping):
            raise ConfigError(where, "is not a table", "write the policy as name = value lines")
        types = {f.name: type(f.default) for f in fields(self)}
        clean: dict[str, Any] = {}
        for key, value in values.items():
            name = f"{where}.{key}"
            if key not in types:
                raise ConfigError(name, "is not a remediation setting", f"use one of {sorted(types)}")
            clean[key] = _checked(name, key, types[key], value)
        return replace(self, **clean)


def _checked(name: str, key: str, kind: type, value: Any) -> Any:
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(name, f"{value!r} is not true or false", "write true or false")
        return value
    if kind is str:
        if value not in _CHOICES[key]:
            raise ConfigError(name, f"{value!r} is not one of {', '.join(_CHOICES[key])}",
                              f'write one of {", ".join(repr(c) for c in _CHOICES[key])}')
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f"{value!r} is not a number", "write a plain number")
    if kind is int:
        if float(value) != int(value):
            raise ConfigError(name, f"{value} is not a whole number", "write an integer")
        value = int(value)
        low = 0 if key in ("state_rows_budget", "cooldown_seconds") else 1
        if value < low:
            raise ConfigError(name, f"{value} is below {low}", f"use {low} or more")
        return value
    low, high = _FACTORS[key]
    if value <= low or (high is not None and value >= high):
        limit = f"between {low:g} and {high:g} (exclusive)" if high is not None else f"above {low:g}"
        raise ConfigError(name, f"{value} is not {limit}", f"use a factor {limit}, e.g. {getattr(Policy(), key)}")
    return float(value)
