"""Run every registered benchmark (bench/registry.py) in one process and, with --write, store what each
printed (bench/results/KEY.json, with the run: command, time, machine, load) and regenerate BENCHMARKS.md
from the stored results of every benchmark:

  .venv/bin/python -m bench [--quick] [--write] [--only KEY,KEY]    (other options go to every benchmark)

Benchmarks on the local session share one; those with their own session (a cluster) run after it stops.
`--only KEY --write` re-measures one benchmark and leaves the other sections as their last run printed them.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys

from bench.common import load_average, machine_facts
from bench.registry import BENCHMARKS
from bench.render import RunInfo, dump_result, load_result, render

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "bench", "BENCHMARKS.template.md")
OUTPUT = os.path.join(ROOT, "BENCHMARKS.md")
RESULTS = os.path.join(ROOT, "bench", "results")


def now() -> str:
    return f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M}"


def write_page() -> None:
    """BENCHMARKS.md from the template and every benchmark's stored result."""
    results = {}
    for benchmark in BENCHMARKS:
        path = os.path.join(RESULTS, f"{benchmark.key}.json")
        if os.path.exists(path):
            with open(path) as handle:
                results[benchmark.key] = load_result(json.load(handle))
    with open(TEMPLATE) as handle:
        text = render(handle.read(), BENCHMARKS, results)
    with open(OUTPUT, "w") as handle:
        handle.write(text)
    print(f"wrote {OUTPUT}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], add_help=False)
    parser.add_argument("--write", action="store_true",
                        help="store this run's results (bench/results) and regenerate BENCHMARKS.md")
    parser.add_argument("--only", help="comma-separated benchmark keys: " + ", ".join(b.key for b in BENCHMARKS))
    args, rest = parser.parse_known_args(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b.key in args.only.split(",")]
    if args.only and len(chosen) != len(args.only.split(",")):
        parser.error(f"--only: unknown key in {args.only!r}; known: {', '.join(b.key for b in BENCHMARKS)}")
    started, load_before, reports = now(), load_average(), {}
    spark = None
    for benchmark in sorted(chosen, key=lambda b: b.own_session):
        module = importlib.import_module(benchmark.module)
        if benchmark.own_session:
            if spark is not None:
                spark.stop()
                spark = None
        elif spark is None:
            from stateops.jobs.definition.spark_settings import SparkSettings
            from stateops.jobs.runtime.session import get_session

            spark = get_session(SparkSettings.from_env())
        reports[benchmark.key] = module.main(rest, spark=spark)
    if spark is not None:
        spark.stop()
    if args.write:
        command = " ".join(["python -m bench", *argv])
        run = RunInfo(command, started, now(), machine_facts(), load_before, load_average())
        os.makedirs(RESULTS, exist_ok=True)
        for key, report in reports.items():
            with open(os.path.join(RESULTS, f"{key}.json"), "w") as handle:
                json.dump(dump_result(report, run), handle, indent=1)
                handle.write("\n")
        write_page()


if __name__ == "__main__":
    main(sys.argv[1:])
