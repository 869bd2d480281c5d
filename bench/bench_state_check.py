"""State check: what the compatibility check (stateops.jobs.runtime.compatibility) adds to the start of a run,
per job, and how it grows with the state's files.

  plan:   what a run does before it starts its queries anyway: the job's query built (stateful_frame) and its
          stateful operators found (stateful_plan)
  check:  check_state on the job's checkpoint: the query planned twice by Spark (on an empty scratch and on a
          copy of the checkpoint's schema and metadata files) and the schemas compared

Each of the four built-in jobs runs once over the same input (`--files` files of `--events` events); then
`--repeats` rounds alternate plan / check per job (one discarded warm-up each), medians reported; the ratio is
check / plan. Scale: user_activity's checkpoint again with 8x the shuffle partitions (8x the state files),
whose check lists the schema folders only (operators and partition 0), not the state.

  .venv/bin/python -m bench.bench_state_check [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from typing import Sequence

from bench.common import Report, fmt_ratio, machine


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 2 files")
    parser.add_argument("--repeats", type=int, default=9, help="rounds per job (default 9)")
    parser.add_argument("--files", type=int, default=6, help="input files, one batch each (default 6)")
    parser.add_argument("--events", type=int, default=2_000, help="events per file (default 2,000)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.files = 3, 2
    return args


def _ms(action) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _state_files(checkpoint: str) -> int:
    return sum(len(names) for _, _, names in os.walk(os.path.join(checkpoint, "state")))


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    from stateops.jobs.definition.catalog import Catalog
    from stateops.jobs.definition.environment import read_settings
    from stateops.jobs.definition.settings import effective_spec
    from stateops.jobs.demo.generator import GeneratorConfig, generate
    from stateops.jobs.definition.spark_settings import SparkSettings
    from stateops.jobs.runtime.compatibility import COMPATIBLE, check_state
    from stateops.jobs.runtime.plan import stateful_plan
    from stateops.jobs.runtime.runner import run_job
    from stateops.jobs.runtime.session import get_session
    from stateops.jobs.runtime.start import stateful_frame
    from stateops.layout import Layout

    args = parse_args(argv)
    spark = spark or get_session(SparkSettings.from_env())
    report = Report("state_check", f"The state check at a run's start, per job; {machine()}")
    root = tempfile.mkdtemp(prefix="stateops-bench-state-check-")
    try:
        layout = Layout(os.path.join(root, "home"))
        generate(layout, GeneratorConfig(events=args.events * args.files, files=args.files, users=500, orders=300,
                                         seed=7))
        catalog = Catalog.load(layout, None)
        wide = replace(catalog.job("user_activity"), name="user_activity_wide", sink_table="user_activity_wide",
                       shuffle_partitions=8 * catalog.job("user_activity").shuffle_partitions)
        specs = [*catalog.jobs.values(), wide]
        for spec in specs:
            run_job(spark, spec, layout, settings=read_settings())
        rows = []
        for spec in specs:
            spec = effective_spec(spec, layout)

            def plan():
                stateful_plan(stateful_frame(spark, spec, layout), spec)

            def check():
                assert check_state(spark, spec, layout, stateful_frame(spark, spec, layout)).status == COMPATIBLE

            sides: dict[str, list[float]] = {"plan": [], "check": []}
            plan(), check()  # warm-up
            for i in range(args.repeats):
                for side in (("plan", "check") if i % 2 == 0 else ("check", "plan")):
                    sides[side].append(_ms(plan if side == "plan" else check))
            p, c = statistics.median(sides["plan"]), statistics.median(sides["check"])
            rows.append([spec.name, spec.shuffle_partitions, _state_files(spec.checkpoint_path(layout)),
                         f"{p:.0f} ms", f"{c:.0f} ms", fmt_ratio(c / p)])
        report.table(f"Median of {args.repeats} rounds per job ({args.files} batches of {args.events:,} events run "
                     "first; `check` includes building the query, as `plan`)",
                     ["job", "partitions", "state files", "plan", "check", "check / plan"], rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report


if __name__ == "__main__":
    main()
