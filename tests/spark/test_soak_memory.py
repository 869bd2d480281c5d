"""Soak: a continuous run over thousands of small micro-batches keeps the driver's memory flat after warm-up.

The runner used to keep every progress event of both queries for the whole run (ProgressRecorder.events),
so a long-running job's driver grew with every batch; it now keeps running totals (stateops.jobs.runtime.listener.RunTotals)
and the newest batch per query. Oracle: Python's own allocations (tracemalloc, garbage collected first)
sampled on the run's thread every SAMPLE_EVERY batches through the progress callback, and the process RSS
alongside; after WARM_UP batches the traced memory may not grow by more than a fixed allowance, whatever
the number of batches (the kept events grew it with every batch). The run is real: the job's stateful and
dead-letter queries, the progress table, the lease; only the output goes to Spark's noop sink
(`dry_run`), whose memory is one batch's at a time (bench/bench_driver_sink.py measures it).

In the long suite: about 10 minutes on 2 cores (`STATEOPS_SOAK_BATCHES`, default 2,000, to change).
"""
from __future__ import annotations

import gc
import os
import tracemalloc
from dataclasses import replace

import pytest

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.control import request_stop
from stateops.control import ControlSettings

pytestmark = [pytest.mark.spark, pytest.mark.long]

BATCHES = int(os.environ.get("STATEOPS_SOAK_BATCHES", "2000"))
WARM_UP = max(100, BATCHES // 5)
SAMPLE_EVERY = 100
ALLOWANCE_MIB = 2.0  # traced growth allowed after warm-up, for all the batches after it
DEADLINE_SECONDS = 3600


def _rss_mib() -> float:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))


def test_a_continuous_run_keeps_the_drivers_memory_flat_after_warm_up(spark, layout, record_property):
    generate(layout, GeneratorConfig(events=BATCHES * 10, files=BATCHES, users=50, minutes_per_file=1, seed=11))
    spec = replace(get_job("user_activity", layout=layout), shuffle_partitions=2, trigger_interval="0 seconds",
                   max_files_per_trigger=1)
    samples: list[tuple[int, float, float]] = []  # (batch, traced MiB, RSS MiB)
    seen = {"batches": 0, "stopped": False}

    def observe(progress: dict) -> None:
        if progress.get("numInputRows", 0) <= 0:
            return
        seen["batches"] += 1
        if seen["batches"] % SAMPLE_EVERY == 0 or seen["batches"] == WARM_UP:
            gc.collect()
            samples.append((seen["batches"], tracemalloc.get_traced_memory()[0] / 2**20, _rss_mib()))
        if seen["batches"] >= BATCHES and not seen["stopped"]:
            seen["stopped"] = bool(request_stop(layout, spec.name, actor="soak", reason="enough batches",
                                                settings=ControlSettings.from_env()))

    tracemalloc.start()
    try:
        result = run_job(spark, spec, layout, settings=read_settings(), mode="continuous",
                         max_seconds=DEADLINE_SECONDS, on_progress=observe, dry_run=True)
    finally:
        tracemalloc.stop()
    assert result.batches >= BATCHES and result.stop_reason == "stop_request", (result.batches, result.stop_reason)
    assert len(result.batch_durations_ms) == result.batches and result.input_rows >= BATCHES * 10
    after = [s for s in samples if s[0] >= WARM_UP]
    traced_growth = after[-1][1] - after[0][1]
    rss_growth = after[-1][2] - after[0][2]
    line = (f"{result.batches} batches: traced Python memory {after[0][1]:.1f} MiB at batch {after[0][0]} -> "
            f"{after[-1][1]:.1f} MiB at batch {after[-1][0]} ({traced_growth:+.2f} MiB); driver RSS "
            f"{after[0][2]:.0f} -> {after[-1][2]:.0f} MiB ({rss_growth:+.0f} MiB); peak traced "
            f"{max(s[1] for s in after):.1f} MiB; median batch {result.median_batch_ms} ms")
    record_property("soak", line)
    print(line)
    assert traced_growth < ALLOWANCE_MIB, line
