"""Retention policies: defaults, then the config file's `[retention]` (every job) and
`[retention.jobs.<name>]` (one job), `[retention.ops_tables]` for the ops tables. Validated at load: an
unknown key, a wrong type or a bad interval is a ConfigError naming the field and the fix.

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

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from stateops.durations import parse_seconds
from stateops.errors import ConfigError

FOREVER = "forever"
ORPHAN_ACTIONS = ("archive", "delete", "keep")
OLD_ROW_ACTIONS = ("rollup", "drop", "keep")


@dataclass(frozen=True)
class JobPolicy:
    keep_archives: int = 3
    keep_archives_for: str = "30 days"
    rewind_batches: int = 0
    rewind_within: str = "0 seconds"
    checkpoint_history: bool = True
    deadletter_keep: str = FOREVER

    def deadletter_seconds(self) -> int | None:
        return None if self.deadletter_keep == FOREVER else parse_seconds(self.deadletter_keep)


@dataclass(frozen=True)
class OpsTablePolicy:
    compact: bool = True
    compact_min_files: int = 10
    vacuum_after: str = "7 days"
    log_retention: str = "7 days"
    progress_horizon: str = "30 days"
    progress_old_rows: str = "rollup"
    small_file_bytes: int = 8 << 20


@dataclass(frozen=True)
class Policies:
    default: JobPolicy = JobPolicy()
    jobs: Mapping[str, JobPolicy] = None  # type: ignore[assignment]
    ops_tables: OpsTablePolicy = OpsTablePolicy()
    orphan_idle: str = "14 days"
    orphan_action: str = "archive"
    apply_on_schedule: bool = False

    def for_job(self, job: str) -> JobPolicy:
        return (self.jobs or {}).get(job, self.default)


GLOBAL_KEYS = ("orphan_idle", "orphan_action", "apply_on_schedule")
INTERVALS = {"keep_archives_for", "rewind_within", "vacuum_after", "log_retention", "progress_horizon",
             "orphan_idle"}
CHOICES = {"orphan_action": ORPHAN_ACTIONS, "progress_old_rows": OLD_ROW_ACTIONS}


def _value(where: str, key: str, value: Any, default: Any) -> Any:
    """`value` checked against the type of `default` and the key's own rules."""
    field_name = f"{where}.{key}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(field_name, f"{value!r} is not true or false", f"write {key} = true or false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(field_name, f"{value!r} is not a whole number of 0 or more",
                              f"write a number without quotes, e.g. {key} = {default}")
        return value
    if not isinstance(value, str):
        raise ConfigError(field_name, f"{value!r} is not text", f'write it in quotes, e.g. {key} = "{default}"')
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(field_name, f"{value!r} is not one of {list(CHOICES[key])}",
                          f"use one of {list(CHOICES[key])}")
    if key == "deadletter_keep" and value != FOREVER and parse_seconds(value) is None:
        raise ConfigError(field_name, f"{value!r} is neither \"{FOREVER}\" nor an interval",
                          f'write "{FOREVER}" or an interval, e.g. "90 days"')
    if key in INTERVALS and parse_seconds(value) is None:
        raise ConfigError(field_name, f"{value!r} is not an interval", 'write a number and a unit, e.g. "30 days"')
    if key == "vacuum_after" and parse_seconds(value) % 3600:
        raise ConfigError(field_name, f"{value!r} is not a whole number of hours (delta-rs vacuums by the hour)",
                          'write hours or days, e.g. "168 hours" or "7 days"')
    return value


def _apply(base: Any, values: Mapping[str, Any], where: str, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(values, Mapping):
        raise ConfigError(where, "is not a table", f"write it as [{where}] with name = value lines")
    known = {f.name: f.default for f in fields(base)}
    clean = {}
    for key, value in values.items():
        if key in skip:
            continue
        if key not in known:
            hint = (" (a setting for every job: put it under [retention])" if key in GLOBAL_KEYS else "")
            raise ConfigError(f"{where}.{key}", f"is not a retention setting here{hint}",
                              f"use one of {sorted(known)}")
        clean[key] = _value(where, key, value, known[key])
    return replace(base, **clean)


def load_policies(config: Mapping[str, Any] | None, jobs: tuple[str, ...] | list[str]) -> Policies:
    """Policies from a parsed config file (the `retention` table); every job gets one."""
    section = (config or {}).get("retention", {})
    if not isinstance(section, Mapping):
        raise ConfigError("retention", "is not a table", "write it as [retention] with name = value lines")
    top = {k: v for k, v in section.items() if k not in ("jobs", "ops_tables")}
    globals_ = {k: v for k, v in top.items() if k in GLOBAL_KEYS}
    default = _apply(JobPolicy(), top, "retention", skip=GLOBAL_KEYS)
    per_job = section.get("jobs", {})
    if not isinstance(per_job, Mapping):
        raise ConfigError("retention.jobs", "is not a table", "write per-job policies as [retention.jobs.NAME]")
    for name in per_job:
        if name not in jobs:
            raise ConfigError(f"retention.jobs.{name}", "is not a known job", f"use one of {sorted(jobs)}")
    policies = {name: _apply(default, per_job.get(name, {}), f"retention.jobs.{name}") for name in jobs}
    ops = _apply(OpsTablePolicy(), section.get("ops_tables", {}), "retention.ops_tables")
    base = Policies()
    checked = {k: _value("retention", k, v, getattr(base, k)) for k, v in globals_.items()}
    return replace(base, default=default, jobs=policies, ops_tables=ops, **checked)
