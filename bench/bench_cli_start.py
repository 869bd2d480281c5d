"""CLI start: the commands that only read, each in a fresh process as a user types it, on this tree against an
earlier revision of it (`--before`, default: the commit before the job model's split), side by side in one run.

  after:    `python -m stateops.cli --home H COMMAND` from this tree (the reading commands import no Spark:
            tests/unit/test_cli_imports.py)
  before:   the same command from a temporary `git worktree` of `--before`
  floor:    `python -c pass`, the interpreter's own start

Runs alternate before / after per command, `--runs` each (one discarded warm-up per side); medians are
reported, the ratio is before / after. The home exists and is empty apart from what the commands create: the cost measured
is starting the command (imports, the catalog of the four built-in jobs), not reading a large home (bench_scale
measures that).

  .venv/bin/python -m bench.bench_cli_start [--quick] [--before REV]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from bench.common import Report, fmt_ratio, machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEFORE = "0e662ba"  # main before the job model's split (issue 30)
COMMANDS = (("jobs", "list"), ("jobs", "describe", "user_activity"), ("jobs", "status"),
            ("audit", "user_activity", "--fast"), ("archives", "list", "user_activity"), ("inventory",),
            ("retention", "plan"))
PROBE = "import sys, runpy; sys.argv[0] = 'stateops'; runpy.run_module('stateops.cli', run_name='__main__')"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 runs per command and side")
    parser.add_argument("--runs", type=int, default=9, help="runs per command and side (default 9)")
    parser.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 3
    return args


def _seconds(tree: str, command: Sequence[str], home: str) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    for name in ("STATEOPS_CONFIG", "STATEOPS_HOME"):
        env.pop(name, None)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", PROBE, "--home", home, *command], cwd=tree, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(argv)
    report = Report("cli_start", f"CLI start of the reading commands, before ({args.before}) and after; {machine()}")
    work = tempfile.mkdtemp(prefix="stateops-cli-start-")
    before = os.path.join(work, "before")
    subprocess.run(["git", "worktree", "add", "--detach", before, args.before], cwd=ROOT, check=True,
                   capture_output=True)
    for side in ("before", "after"):
        os.makedirs(os.path.join(work, f"home-{side}"))  # an empty home: retention refuses a missing one
    try:
        floor = [_timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)]
        rows = []
        for command in COMMANDS:
            sides: dict[str, list[float]] = {"before": [], "after": []}
            for side, tree in (("before", before), ("after", ROOT)):  # warm-up: the file cache, .pyc files
                _seconds(tree, command, os.path.join(work, f"home-{side}"))
            for _ in range(args.runs):
                for side, tree in (("before", before), ("after", ROOT)):
                    sides[side].append(_seconds(tree, command, os.path.join(work, f"home-{side}")))
            b, a = statistics.median(sides["before"]), statistics.median(sides["after"])
            rows.append([f"stateops {' '.join(command)}", f"{b:.2f} s", f"{a:.2f} s", fmt_ratio(b / a)])
        report.table(f"Fresh process per command, median of {args.runs} (interpreter start alone: "
                     f"{statistics.median(floor):.2f} s)", ["command", "before", "after", "before / after"], rows)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", before], cwd=ROOT, check=False, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return report


def _timed(command: Sequence[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


if __name__ == "__main__":
    main(sys.argv[1:])
