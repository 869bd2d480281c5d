"""What a run is asked (its mode) and what it answers (RunResult), without Spark: the CLI and the Dagster
asset read and print results without importing the runtime that produces them."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

MODES = ("bounded", "continuous")


@dataclass
class RunResult:
    job: str
    run_id: str
    query_id: str | None = None
    batches: int = 0
    input_rows: int = 0
    output_rows: int = 0
    deadletter_rows: int = 0
    deadletter_total: int = 0
    watermark: str | None = None
    state_operators: list[dict[str, Any]] = field(default_factory=list)
    batch_durations_ms: list[int] = field(default_factory=list)
    delta_version: int | None = None
    batches_skipped: int = 0  # batches the sink found already in Delta (re-run after a crash)
    stop_reason: str | None = None  # stop_request | max_seconds; None: the input was consumed
    hard_stopped: bool = False      # a batch was still running when the stop's grace period ran out
    progress_write_failures: int = 0
    progress_gap_batches: int = 0   # batches earlier runs committed without a progress row (noted at start)

    @property
    def median_batch_ms(self) -> float | None:
        return statistics.median(self.batch_durations_ms) if self.batch_durations_ms else None
