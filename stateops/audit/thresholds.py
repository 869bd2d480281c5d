"""Finding thresholds: sane defaults, overridable for all jobs and per job from the config TOML.

In the STATEOPS_CONFIG file (a top-level `audit` table, so `[jobs.<name>]` stays the job spec):

    [audit]                      # every job
    skew_ratio = 5
    [audit.jobs.user_activity]   # one job
    skew_ratio = 6
    growth_min_rows = 50000

An "error" threshold of 0 disables that error level (the warning stays). Unknown keys and wrong types are
ConfigErrors naming the field (stateops.config.Section), so a typo never silently falls back to a default;
shares are fractions (0.6, not 60).
"""
from __future__ import annotations

from typing import Annotated, Any, Mapping

from pydantic import Field

from stateops.cron import Cron
from stateops.config import ConfigFile, Section, layered

MiB = 1024 * 1024
GiB = 1024 * MiB

Count = Annotated[int, Field(ge=0)]
Number = Annotated[float, Field(ge=0)]
Share = Annotated[float, Field(ge=0, le=1, json_schema_extra={"fix": "write a share as a fraction: 0.6 for 60%"})]


class Thresholds(Section):
    what = "an audit threshold"

    # STATE_SKEW: max/mean rows (or bytes) per partition over every partition, i.e. the busiest task against
    # an even split (1 = even, at most the partition count). warn/error when the ratio reaches skew_ratio /
    # skew_ratio_error, or when the busiest partition holds skew_share / skew_share_error of the store
    # (what applies with few partitions, where max/mean cannot reach the ratio: 4 partitions -> 2.4x / 3.2x).
    # Spreads that hashing the store's keys explains (few keys, chance) are not skew; small stores are noise.
    skew_ratio: Number = 4.0
    skew_ratio_error: Number = 8.0
    skew_share: Share = 0.6
    skew_share_error: Share = 0.8
    skew_min_rows: Count = 1000
    skew_min_bytes: Count = 64 * MiB
    # STATE_GROWTH: now against the oldest earlier audit of the same kind (deep or fast) and store within
    # the last growth_window_seconds.
    growth_ratio: Number = 1.5
    growth_ratio_error: Number = 3.0
    growth_min_rows: Count = 10_000
    growth_min_bytes: Count = 256 * MiB
    growth_window_seconds: Count = 24 * 3600
    # EVICTION_STALLED: share of a store's rows already behind the watermark.
    eviction_share: Share = 0.01
    eviction_share_error: Share = 0.25
    # Join rows count as behind only when older than watermark - the join's time bound. The bound is known
    # for catalog jobs; for a checkpoint path that is no job's, this grace stands in for it.
    join_eviction_grace_seconds: Count = 3600
    # WATERMARK_LAG: the audit's wall clock (the batch's own time when a batch id was asked for) minus the
    # watermark.
    watermark_lag_seconds: Count = 6 * 3600
    watermark_lag_error_seconds: Count = 0
    # LATE_DATA_DROPS: rows dropped by the watermark over input rows, across recent progress rows.
    late_drop_share: Share = 0.01
    late_drop_share_error: Share = 0.10
    late_drop_window_batches: Count = 20
    # LARGE_STATE: per store; the bytes at the levels of the design's monitoring table (< 1 GB healthy, 1-5 GB a
    # warning, > 5 GB critical).
    large_state_rows: Count = 10_000_000
    large_state_rows_error: Count = 100_000_000
    large_state_bytes: Count = 1 * GiB
    large_state_bytes_error: Count = 5 * GiB
    # SLOW_COMMIT, SLOW_STATE_UPDATES, SLOW_CLEANUP: Spark's own times per stateful operator and micro-batch
    # (commitTimeMs, allUpdatesTimeMs, allRemovalsTimeMs), the median over the last slow_window_batches batches
    # (one slow batch, a GC pause, pages no one), at the design's monitoring table's levels: checkpoint duration
    # < 10 s healthy, 10-30 s a warning, > 30 s critical; state update latency < 10 ms, 10-50 ms, > 50 ms per
    # updated row; cleanup < 5 s, 5-15 s, > 15 s. The updates of a whole batch count too, at the commit's levels.
    slow_window_batches: Count = 5
    slow_commit_ms: Count = 10_000
    slow_commit_ms_error: Count = 30_000
    slow_updates_row_ms: Number = 10.0
    slow_updates_row_ms_error: Number = 50.0
    slow_updates_ms: Count = 10_000
    slow_updates_ms_error: Count = 30_000
    slow_cleanup_ms: Count = 5_000
    slow_cleanup_ms_error: Count = 15_000
    # STATE_MEMORY: Spark's in-memory store keeps every key of its loaded versions in executor heap (Spark's own
    # estimate: the progress's memoryUsedBytes); a share of the heap the state may use (StateOps' local session:
    # spark.driver.memory 2g; on a cluster set it to spark.executor.memory times the executors).
    state_memory_share: Share = 0.25
    state_memory_share_error: Share = 0.5
    state_memory_heap_bytes: Count = 2 * GiB
    # ... and, for every store, the state's memory at the design's monitoring table's levels (< 2 GB healthy,
    # 2-4 GB a warning, > 4 GB critical): Spark's memoryUsedBytes at the latest batch, which for RocksDB is its
    # memtables, block cache share and pinned blocks, off the heap but still the executor's memory.
    state_memory_bytes: Count = 2 * GiB
    state_memory_bytes_error: Count = 4 * GiB
    # RESTART_COST: what the next start of the query loads (the snapshots and the changelogs after them), at the
    # load rates Spark measured on the job's earlier starts (stateops.checkpoints.restart_cost): a warning past a
    # minute, an error past five (every runbook restart and every takeover pays it).
    restart_budget_seconds: Number = 60
    restart_budget_seconds_error: Number = 300
    # CLEANUP_STUCK: Spark keeps spark.sql.streaming.minBatchesToRetain (100) batches; cleanup is stuck
    # when more than that plus the slack are retained and minBatchId did not move since the last audit.
    min_batches_to_retain: Count = 100
    cleanup_slack_batches: Count = 50
    # KAFKA_LAG: the records a Kafka query is behind the latest offsets (stateops.kafka_lag) grew over this many
    # consecutive batches and reached the warn / error size.
    kafka_lag_batches: Count = 3
    kafka_lag_min_offsets: Count = 10_000
    kafka_lag_error_offsets: Count = 1_000_000
    # Report details.
    top_keys: Count = 5
    # Versions of the state kept per key (0 = by provider: HDFS keeps 2 in memory, RocksDB 1).
    versioning_factor: Number = 0
    # When the deep audit schedule (`<job>_deep_audit_hourly`, stopped until turned on) runs: hourly by default.
    deep_audit_cron: Cron = "0 * * * *"

    @property
    def progress_batches(self) -> int:
        """How many of a query's latest progress rows an audit reads: enough for every window above."""
        return max(self.late_drop_window_batches, self.slow_window_batches, 1)

    @classmethod
    def from_config(cls, config: ConfigFile | Mapping[str, Any] | None, job: str | None = None) -> "Thresholds":
        """Defaults, then `[audit]`, then `[audit.jobs.<job>]` from a config file (or its parsed tables)."""
        tables = config.tables if isinstance(config, ConfigFile) else (config or {})
        base, per_job = layered(cls, tables.get("audit"), "audit")
        return per_job.get(job, base) if job else base

    def with_overrides(self, values: Mapping[str, Any], where: str = "audit") -> "Thresholds":
        return self.updated(values, where)
