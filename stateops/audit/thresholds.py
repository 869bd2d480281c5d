"""Finding thresholds: sane defaults, overridable for all jobs and per job from the config TOML.

In the STATEOPS_CONFIG file (a top-level `audit` table, so `[jobs.<name>]` stays the job spec):

    [audit]                      # every job
    skew_ratio = 5
    [audit.jobs.user_activity]   # one job
    skew_ratio = 6
    growth_min_rows = 50000

An "error" threshold of 0 disables that error level (the warning stays). Unknown keys and wrong types are
ConfigErrors naming the field, so a typo never silently falls back to a default; shares are fractions
(0.6, not 60).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from stateops.errors import ConfigError

MiB = 1024 * 1024
GiB = 1024 * MiB
SHARE_SUFFIXES = ("_share", "_share_error")


@dataclass(frozen=True)
class Thresholds:
    # STATE_SKEW: max/mean rows (or bytes) per partition over every partition, i.e. the busiest task against
    # an even split (1 = even, at most the partition count). warn/error when the ratio reaches skew_ratio /
    # skew_ratio_error, or when the busiest partition holds skew_share / skew_share_error of the store
    # (what applies with few partitions, where max/mean cannot reach the ratio: 4 partitions -> 2.4x / 3.2x).
    # Spreads that hashing the store's keys explains (few keys, chance) are not skew; small stores are noise.
    skew_ratio: float = 4.0
    skew_ratio_error: float = 8.0
    skew_share: float = 0.6
    skew_share_error: float = 0.8
    skew_min_rows: int = 1000
    skew_min_bytes: int = 64 * MiB
    # STATE_GROWTH: now against the oldest earlier audit of the same kind (deep or fast) and store within
    # the last growth_window_seconds.
    growth_ratio: float = 1.5
    growth_ratio_error: float = 3.0
    growth_min_rows: int = 10_000
    growth_min_bytes: int = 256 * MiB
    growth_window_seconds: int = 24 * 3600
    # EVICTION_STALLED: share of a store's rows already behind the watermark.
    eviction_share: float = 0.01
    eviction_share_error: float = 0.25
    # Join rows count as behind only when older than watermark - the join's time bound. The bound is known
    # for catalog jobs; for a checkpoint path that is no job's, this grace stands in for it.
    join_eviction_grace_seconds: int = 3600
    # WATERMARK_LAG: the audit's wall clock (the batch's own time when a batch id was asked for) minus the
    # watermark.
    watermark_lag_seconds: int = 6 * 3600
    watermark_lag_error_seconds: int = 0
    # LATE_DATA_DROPS: rows dropped by the watermark over input rows, across recent progress rows.
    late_drop_share: float = 0.01
    late_drop_share_error: float = 0.10
    late_drop_window_batches: int = 20
    # LARGE_STATE: per store.
    large_state_rows: int = 10_000_000
    large_state_rows_error: int = 100_000_000
    large_state_bytes: int = 10 * GiB
    large_state_bytes_error: int = 100 * GiB
    # CLEANUP_STUCK: Spark keeps spark.sql.streaming.minBatchesToRetain (100) batches; cleanup is stuck
    # when more than that plus the slack are retained and minBatchId did not move since the last audit.
    min_batches_to_retain: int = 100
    cleanup_slack_batches: int = 50
    # Report details.
    top_keys: int = 5
    # Versions of the state kept per key (0 = by provider: HDFS keeps 2 in memory, RocksDB 1).
    versioning_factor: float = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, job: str | None = None) -> "Thresholds":
        """Defaults, then `[audit]`, then `[audit.jobs.<job>]` from a parsed config file."""
        audit = (config or {}).get("audit", {})
        if not isinstance(audit, Mapping):
            raise ConfigError("audit", "is not a table", "write it as [audit] with threshold = value lines")
        base = {k: v for k, v in audit.items() if k != "jobs"}
        thresholds = cls().with_overrides(base, "audit")
        per_job = audit.get("jobs", {})
        if not isinstance(per_job, Mapping):
            raise ConfigError("audit.jobs", "is not a table", "write per-job thresholds as [audit.jobs.NAME]")
        if job and job in per_job:
            thresholds = thresholds.with_overrides(per_job[job], f"audit.jobs.{job}")
        return thresholds

    def with_overrides(self, values: Mapping[str, Any], where: str = "audit") -> "Thresholds":
        if not isinstance(values, Mapping):
            raise ConfigError(where, "is not a table", "write thresholds as name = number lines")
        types = {f.name: type(f.default) for f in fields(self)}
        clean: dict[str, Any] = {}
        for key, value in values.items():
            if key not in types:
                raise ConfigError(f"{where}.{key}", "is not an audit threshold", f"use one of {sorted(types)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{where}.{key}", f"{value!r} is not a number", "write a plain number")
            if value < 0:
                raise ConfigError(f"{where}.{key}", f"{value} is negative", "use 0 or more")
            if key.endswith(SHARE_SUFFIXES) and value > 1:
                raise ConfigError(f"{where}.{key}", f"{value} is above 1", "write a share as a fraction: 0.6 for 60%")
            if types[key] is int and float(value) != int(value):
                raise ConfigError(f"{where}.{key}", f"{value} is not a whole number", "write an integer")
            clean[key] = types[key](value)
        return replace(self, **clean)
