"""Remediation policy per job: which finding leads to which runbook action, and how often sensors may act.

In the STATEOPS_CONFIG file, beside `[jobs.*]` and `[audit]`:

    [remediation]                  # every job
    mode = "plan"                  # plan: a dry-run runbook whose plan waits for a person; auto: act
    [remediation.jobs.user_activity]
    mode = "auto"
    daily_budget = 2

Every value is checked at load (type, range, allowed words: stateops.config.Section); a problem is a
ConfigError naming the field and the fix, so a typo never silently falls back to a default.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import Field

from stateops.config import ConfigFile, Section, layered

Mode = Literal["plan", "auto"]
SkewAction = Literal["repartition", "rebuild", "alert"]
GrowthAction = Literal["adjust", "rebuild", "alert"]
MemoryAction = Literal["switch", "alert"]
AtLeastOne = Annotated[int, Field(ge=1)]
AtLeastZero = Annotated[int, Field(ge=0)]


class Policy(Section):
    what = "a remediation setting"

    # plan: launch the runbook as a dry run (its plan waits for a person, who launches it for real from the
    # Launchpad with the same config); auto: launch it confirmed.
    mode: Mode = "plan"
    # Findings below this severity are never acted on.
    min_severity: Literal["warn", "error"] = "warn"
    # At most one sensor-launched remediation per job in this time, and at most daily_budget in 24 h.
    cooldown_seconds: AtLeastZero = 6 * 3600
    daily_budget: AtLeastOne = 3
    # STATE_SKEW: act after this many consecutive deep audits of the query show it (M).
    skew_audits: AtLeastOne = 2
    # Skew across many keys: repartition (offline, keeps the checkpoint: the cheap cure) or rebuild (fresh
    # checkpoint); the partition count grows by partitions_factor, up to max_shuffle_partitions. One hot key is
    # alert-only whatever this says: no partition count splits a key.
    skew_action: SkewAction = "repartition"
    partitions_factor: Annotated[float, Field(gt=1.0, json_schema_extra={
        "fix": "use a factor above 1, e.g. 2.0"})] = 2.0
    max_shuffle_partitions: AtLeastOne = 200
    # STATE_GROWTH while the watermark advances, or rows above state_rows_budget (0: no budget): adjust (the
    # watermark delay times watermark_factor, never below the job's watermark_min) or rebuild.
    growth_action: GrowthAction = "adjust"
    watermark_factor: Annotated[float, Field(gt=0.0, lt=1.0, json_schema_extra={
        "fix": "use a factor between 0 and 1 (exclusive), e.g. 0.5"})] = 0.5
    state_rows_budget: AtLeastZero = 0
    # STATE_MEMORY (Spark's in-memory store against the heap audit.state_memory_heap_bytes gives it): a warning
    # alerts; an error (audit.state_memory_share_error) switches the state to RocksDB (the switch-store runbook,
    # no input replayed), or only alerts with "alert".
    memory_action: MemoryAction = "switch"
    # Escalation: a tick that sees trouble in cheap numbers requests the job's deep audit, at most once per
    # escalate_interval_seconds.
    escalate_interval_seconds: AtLeastOne = 900
    # Query health: a live lease without a new batch for this long is a stalled query.
    progress_timeout_seconds: AtLeastOne = 900
    # Query health: restart a job whose last run failed.
    restart_failed: bool = True

    @classmethod
    def from_config(cls, config: ConfigFile | Mapping[str, Any] | None, job: str | None = None) -> "Policy":
        """Defaults, then `[remediation]`, then `[remediation.jobs.<job>]`."""
        tables = config.tables if isinstance(config, ConfigFile) else (config or {})
        base, per_job = layered(cls, tables.get("remediation"), "remediation")
        return per_job.get(job, base) if job else base

    def with_values(self, values: Mapping[str, Any], where: str) -> "Policy":
        return self.updated(values, where)
