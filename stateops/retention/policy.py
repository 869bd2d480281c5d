"""Retention policies: defaults, then the config file's `[retention]` (every job) and
`[retention.jobs.<name>]` (one job), `[retention.ops_tables]` for the ops tables. Validated at load
(stateops.config.Section): an unknown key, a wrong type or a bad interval is a ConfigError naming the field
and the fix.

    [retention]
    keep_archives = 3               # the newest N archives of a job are kept ...
    keep_archives_for = "30 days"   # ... and every archive younger than this; never the last verified one
    rewind_batches = 0              # every one of the last N committed batches stays a rewind point
    rewind_within = "0 seconds"     # every batch committed within this stays a rewind point
    checkpoint_history = true       # remove checkpoint files no restart from a kept batch needs
    deadletter_keep = "forever"     # or an interval: dead letters recorded longer ago are deleted
    orphan_idle = "14 days"         # checkpoints of no configured job, untouched this long, are ...
    orphan_action = "archive"       # ... archived (ops/_orphans/archives), deleted, or kept
    apply_on_schedule = false       # the daily Dagster run applies its plan (else it only plans)
    cron = "30 3 * * *"             # when that run's schedule (`retention_daily`) fires: 03:30 UTC
    [retention.ops_tables]
    compact = true                  # compact small files (delta-rs optimize.compact) and checkpoint the log ...
    compact_min_files = 10          # ... once a table has this many small files
    vacuum_after = "7 days"         # files the table no longer uses are deleted this long after
    log_retention = "7 days"        # Delta log entries older than this (before a checkpoint) are deleted
    progress_horizon = "30 days"    # progress rows older than this are ...
    progress_old_rows = "rollup"    # ... rolled up per query and hour (table progress_rollup), dropped, or kept
    small_file_bytes = 8388608      # what counts as a small file in the inventory

Whatever the policy, every checkpoint keeps Spark's own spark.sql.streaming.minBatchesToRetain batches
restorable (the planner takes the larger of the two).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, Field

from stateops.cron import Cron
from stateops.config import ConfigFile, Section, layered, refuse
from stateops.durations import parse_seconds
from stateops.errors import ConfigError

FOREVER = "forever"


def _interval(value: str) -> str:
    if parse_seconds(value) is None:
        raise refuse(f"{value!r} is not an interval", 'write a number and a unit, e.g. "30 days"')
    return value


def _hours(value: str) -> str:
    if parse_seconds(_interval(value)) % 3600:
        raise refuse(f"{value!r} is not a whole number of hours (delta-rs vacuums by the hour)",
                     'write hours or days, e.g. "168 hours" or "7 days"')
    return value


def _interval_or_forever(value: str) -> str:
    if value != FOREVER and parse_seconds(value) is None:
        raise refuse(f"{value!r} is neither \"{FOREVER}\" nor an interval", f'write "{FOREVER}" or an interval, e.g. "90 days"')
    return value


Interval = Annotated[str, AfterValidator(_interval)]
Count = Annotated[int, Field(ge=0)]
GLOBAL_KEYS = ("orphan_idle", "orphan_action", "apply_on_schedule", "cron")


class JobPolicy(Section):
    what = "a retention setting here"

    keep_archives: Count = 3
    keep_archives_for: Interval = "30 days"
    rewind_batches: Count = 0
    rewind_within: Interval = "0 seconds"
    checkpoint_history: bool = True
    deadletter_keep: Annotated[str, AfterValidator(_interval_or_forever)] = FOREVER

    def deadletter_seconds(self) -> int | None:
        return None if self.deadletter_keep == FOREVER else parse_seconds(self.deadletter_keep)


class OpsTablePolicy(Section):
    what = "a retention setting here"

    compact: bool = True
    compact_min_files: Count = 10
    vacuum_after: Annotated[str, AfterValidator(_hours)] = "7 days"
    log_retention: Interval = "7 days"
    progress_horizon: Interval = "30 days"
    progress_old_rows: Literal["rollup", "drop", "keep"] = "rollup"
    small_file_bytes: Count = 8 << 20


class Globals(Section):
    """The settings of `[retention]` that hold for every job at once (orphans belong to no job)."""

    orphan_idle: Interval = "14 days"
    orphan_action: Literal["archive", "delete", "keep"] = "archive"
    apply_on_schedule: bool = False
    cron: Cron = "30 3 * * *"


class _JobLevel(JobPolicy):
    """`[retention.jobs.NAME]`: a job's values; the every-job settings are refused there by name."""

    @classmethod
    def _misplaced(cls, key: str) -> str:
        return " (a setting for every job: put it under [retention])" if key in GLOBAL_KEYS else ""


@dataclass(frozen=True)
class Policies:
    default: JobPolicy = JobPolicy()
    jobs: Mapping[str, JobPolicy] = field(default_factory=dict)
    ops_tables: OpsTablePolicy = OpsTablePolicy()
    orphan_idle: str = Globals().orphan_idle
    orphan_action: str = Globals().orphan_action
    apply_on_schedule: bool = Globals().apply_on_schedule
    cron: str = Globals().cron

    def for_job(self, job: str) -> JobPolicy:
        return self.jobs.get(job, self.default)


def load_policies(config: ConfigFile | Mapping[str, Any] | None, jobs: tuple[str, ...] | list[str]) -> Policies:
    """Policies from a config file (or its parsed tables); every job gets one, and a `[retention.jobs.NAME]`
    naming no job is refused."""
    tables = config.tables if isinstance(config, ConfigFile) else (config or {})
    section = tables.get("retention", {})
    if not isinstance(section, Mapping):
        raise ConfigError("retention", f"{section!r} is not a table", "write it as [retention] with name = value lines")
    known = sorted({*JobPolicy.model_fields, *GLOBAL_KEYS, "ops_tables", "jobs"})
    for key in section:
        if key not in known:
            raise ConfigError(f"retention.{key}", "is not a retention setting", f"use one of {known}")
    every_job = {k: v for k, v in section.items() if k in GLOBAL_KEYS}
    per_job_tables = {k: v for k, v in section.items() if k not in GLOBAL_KEYS and k != "ops_tables"}
    default, per_job = layered(_JobLevel, per_job_tables, "retention")
    for name in per_job:
        if name not in jobs:
            raise ConfigError(f"retention.jobs.{name}", "is not a known job", f"use one of {sorted(jobs)}")
    globals_ = Globals.parse(every_job, "retention")
    return Policies(default=default, jobs={name: per_job.get(name, default) for name in jobs},
                    ops_tables=OpsTablePolicy.parse(section.get("ops_tables", {}), "retention.ops_tables"),
                    **globals_.model_dump())
