"""Time to recover: the `adjust` runbook vs a bare stop and restart of the same query on the same checkpoint.

Both sides start from the same state: a home with byte-identical landing files, the `user_activity` checkpoint
and table after a bounded run over `--files` files, plus the same new files landed since (built per run). Nothing runs (the job ran bounded), so the
stop is the control plane's no-op on both sides.
- bare: what an engineer does by hand: record the new watermark delay (override) and run the job again on
  the same checkpoint; healthy = the run returned after processing the new input.
- runbook: stateops.recovery `adjust` to the same delay, confirmed (preflight, stop, deep audit before,
  archive copy verified against its manifest, adjust, sink alignment, restart, verification with a deep
  audit after); healthy = outcome succeeded (verification passed). Verification batches: 1.
Wall time from the start of each side to healthy; sides alternate A B, B A per repetition. The ratio is
median runbook / median bare (target <= 1.3x); the per-step breakdown comes from the runbook's journal
(done - started of each step, median over repetitions).

  .venv/bin/python -m bench.bench_recovery [--quick] [--repeats N]
"""
from __future__ import annotations

from dataclasses import replace

import os
import statistics
import time
from collections import defaultdict
from datetime import datetime
from typing import Sequence

from stateops.jobs.definition.environment import Environment, get_job, read_settings
from stateops.jobs.definition.settings import watermark_bounds
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.control import overrides
from stateops.layout import Layout
from stateops.recovery import RecoveryRequest, RecoverySettings

from bench.common import (fmt_ms, fmt_ratio, machine, new_home, parse_args, Report, schedule, warm_up,
                          workdir)

JOB = "user_activity"
DELAY = "20 minutes"


def prepare(spark, root: str, name: str, source: Layout, args) -> Layout:
    """A home with a copy of `source`'s landing files, the job run over them (bounded), then new files landed:
    built per side and repetition (a checkpoint's source log holds absolute paths, so it cannot be copied)."""
    layout = new_home(root, name, source)
    run_job(spark, get_job(JOB), layout, settings=read_settings())
    more = args.files // 2 + 1
    minutes = args.files * 15
    generate(layout, GeneratorConfig(events=args.sizes[0] * more, files=more, users=args.users, late_share=0.05,
                                     minutes_per_file=15, start=f"2026-01-01T{minutes // 60:02d}:{minutes % 60:02d}:00"
                                     "+00:00", seed=43))
    return layout


def bare(spark, layout: Layout) -> dict:
    spec = get_job(JOB)
    started = time.monotonic()
    overrides.set_override(layout, JOB, overrides.WATERMARK_DELAY, DELAY, bounds=watermark_bounds(spec),
                           reason="bench", actor="bench")
    result = run_job(spark, spec, layout, settings=read_settings())
    if not result.batches:
        raise RuntimeError("the bare restart processed no batch")
    return {"seconds": time.monotonic() - started}


def runbook(spark, layout: Layout) -> dict:
    environment = Environment.from_env(layout=layout)
    recovery = RecoverySettings(verify_batches=1, archive_min_free_bytes=0)
    environment = replace(environment, settings=replace(environment.settings, recovery=recovery))
    started = time.monotonic()
    report = recover(environment, RecoveryRequest(JOB, "adjust", watermark_delay=DELAY, reason="bench", confirm=JOB,
                                                  dry_run=False, actor="bench"), spark=spark)
    seconds = time.monotonic() - started
    if report.outcome != "succeeded":
        raise RuntimeError(f"the runbook did not succeed: {report.summary()}")
    return {"seconds": seconds, "steps": step_seconds(report.steps)}


def step_seconds(entries: list[dict]) -> dict[str, float]:
    """done - started per step, from the journal's timestamps (ms resolution)."""
    started, took = {}, {}
    for entry in entries:
        at = datetime.fromisoformat(entry["at"])
        if entry["phase"] == "started":
            started[entry["step"]] = at
        elif entry["phase"] == "done" and entry["step"] in started:
            took[entry["step"]] = (at - started[entry["step"]]).total_seconds()
    return took


SIDES = {"bare": bare, "runbook": runbook}


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    spark = spark or get_session(SparkSettings.from_env())
    size = args.sizes[0]
    print(f"recovery benchmark: {machine()}")
    print(f"job {JOB}; {size} events per file, {args.files} files before, {args.files // 2 + 1} new; adjust to "
          f"{DELAY}; {args.repeats} repetition(s) per side", flush=True)
    seconds: dict[str, list[float]] = defaultdict(list)
    steps: dict[str, list[float]] = defaultdict(list)
    with workdir(args) as root:
        source = Layout(os.path.join(root, "input"))
        generate(source, GeneratorConfig(events=size * args.files, files=args.files, users=args.users,
                                         late_share=0.05, duplicate_share=0.02, minutes_per_file=15, seed=42))
        warm_up(root, args.users, lambda layout: run_job(spark, get_job(JOB), layout, settings=read_settings()))
        for n, name in enumerate(schedule(list(SIDES), 0, args.repeats)):
            measured = SIDES[name](spark, prepare(spark, root, f"{name}-{n}", source, args))
            seconds[name].append(measured["seconds"])
            for step, took in measured.get("steps", {}).items():
                steps[step].append(took)
            print(f"  {name:<8} {measured['seconds']:.1f} s", flush=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    rows = [[name, len(seconds[name]), f"{median[name]:.1f}", f"{min(seconds[name]):.1f} - {max(seconds[name]):.1f}",
             fmt_ratio(median[name] / median["bare"]) if name == "runbook" else ""] for name in SIDES]
    report = Report("recovery")
    report.table("time to a healthy query (s); ratio = median runbook / median bare (target <= 1.3x)",
                ["side", "runs", "median s", "min - max s", "ratio"], rows)
    report.table("runbook steps (journal: done - started), median over repetitions",
                ["step", "median ms", "share of runbook"],
                [[step, fmt_ms(1000 * statistics.median(v)), f"{statistics.median(v) / median['runbook']:.0%}"]
                 for step, v in steps.items()])
    print(f"\nfinished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
