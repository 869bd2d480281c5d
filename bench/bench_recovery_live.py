"""Recovery on a live stream: the `adjust` runbook vs a bare stop and restart of a long-running query, on a
quiet stream (every input read, nothing lands) and on a busy one (a file lands every few seconds throughout).

Per side, stream and repetition: a fresh home with byte-identical landing files (`--files` files of the first
of `--sizes` events), the job run over them (bounded, in this process), then long-running in a process of its
own (`stateops jobs run user_activity --mode continuous`, the job's own settings: a 10 s trigger) until it
reports itself idle. Busy: from the side's start a file of the same size lands every 4 s. Timed from the
start of the side to a healthy query:
- bare: what an engineer does by hand: a stop request, wait until the run let go of its lease, record the new
  watermark delay (override), start `stateops jobs run --mode continuous` again; healthy = the new run holds
  the lease and, quiet: it has read every available input (verify.caught_up over observe_reading, the
  runbook's own verdict); busy: it has committed K batches that read new files (K = verification batches);
- runbook: `stateops.jobs.runtime.recovery.recover(... mode="adjust", confirm)` (stop request, deep audit, archive copy,
  override and sink epoch, sink alignment, long-running restart in its own process, verification: K batches
  with input or caught up, then a deep audit); healthy = outcome succeeded. What ended its verification
  (caught up, K batches, the timeout) is counted.
Sides alternate bare, runbook / runbook, bare per stream and repetition. Ratio: median runbook / median bare
of the same stream; the runbook's steps come from its journal.

  .venv/bin/python -m bench.bench_recovery_live [--quick] [--repeats N]
"""
from __future__ import annotations

from dataclasses import replace

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence

from stateops.jobs.definition.environment import Environment, get_job, read_settings
from stateops.jobs.definition.settings import watermark_bounds
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.recovery import job_target, recover
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import ControlSettings, current_lease, overrides, request_stop, wait_released
from stateops.layout import Layout
from stateops.recovery import RecoveryRequest, RecoverySettings, verify
from stateops.recovery.observation import observe_reading

from bench.bench_recovery import DELAY, JOB, step_seconds
from bench.common import fmt_ratio, machine, new_home, parse_args, Report, schedule, warm_up, workdir

STREAMS = ("quiet", "busy")
SIDES = ("bare", "runbook")
CONTROL = ControlSettings.from_env()  # the benchmark is an entry point: its environment, read once
BATCHES = RecoverySettings().verify_batches  # K, for the runbook's verification and the bare side's health
WAIT = 600  # a JVM start and batches on a loaded 2-core machine
LAND_SECONDS = 4.0  # busy stream: a new file this often
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def start_run(layout: Layout, name: str) -> subprocess.Popen:
    """`stateops jobs run JOB --mode continuous` in a session of its own, logging to ops/<job>/logs/<name>.log."""
    folder = os.path.join(layout.ops_dir(JOB), "logs")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.log"), "w") as log:
        return subprocess.Popen([sys.executable, "-m", "stateops.cli", "--home", layout.home, "jobs", "run", JOB,
                                 "--mode", "continuous"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def wait_until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {WAIT} s")
        time.sleep(0.2)


def latest_batch(layout: Layout) -> int:
    return Checkpoint(get_job(JOB).checkpoint_path(layout)).latest_committed_batch()


def caught_up(layout: Layout, pid: int, start_batch: int | None) -> bool:
    """Run `pid` holds the lease and has read every available input (the runbook's own verdict)."""
    lease = current_lease(layout, JOB)
    if lease is None or lease.pid != pid or lease.stale_reason(CONTROL) is not None:
        return False
    target = job_target(get_job(JOB), Environment.from_env(layout=layout).catalog)
    return verify.caught_up(observe_reading(layout, target, lease.run_id, True, start_batch))[0]


def batches_read(layout: Layout, pid: int, start_batch: int) -> bool:
    """Run `pid` holds the lease and has committed K batches after `start_batch` that read new files."""
    lease = current_lease(layout, JOB)
    if lease is None or lease.pid != pid:
        return False
    checkpoint = Checkpoint(get_job(JOB).checkpoint_path(layout))
    committed = checkpoint.latest_committed_batch()
    read = {batch for files in checkpoint.source_files().values() for _, batch in files}
    return len([b for b in read if start_batch < b <= committed]) >= BATCHES


class Lander:
    """A busy stream: a file of `events` events every `every` s, each 15 minutes of event time after the last."""

    def __init__(self, layout: Layout, events: int, every: float, first_slice: int):
        self.layout, self.events, self.every, self.slice = layout, events, every, first_slice
        self.landed = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._land, name="bench-lander", daemon=True)

    def _land(self) -> None:
        while not self._done.is_set():
            generate(self.layout, GeneratorConfig(events=self.events, files=1, users=1000, minutes_per_file=15,
                                                  late_share=0.05, seed=100 + self.slice,
                                                  start=(START + self.slice * timedelta(minutes=15)).isoformat()))
            self.slice += 1
            self.landed += 1
            self._done.wait(self.every)

    def __enter__(self) -> "Lander":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def bare(spark, layout: Layout, stream: str, pids: list[int]) -> dict:
    spec = get_job(JOB)
    started = time.monotonic()
    request = request_stop(layout, JOB, actor="bench", reason="bench: bare stop and restart", settings=CONTROL)
    if request is None or not wait_released(layout, JOB, request.lease_id, WAIT, settings=CONTROL):
        raise RuntimeError("the running query did not stop")
    overrides.set_override(layout, JOB, overrides.WATERMARK_DELAY, DELAY, bounds=watermark_bounds(spec),
                           reason="bench", actor="bench")
    start_batch = latest_batch(layout)
    run = start_run(layout, "bare-restart")
    pids.append(run.pid)
    if stream == "quiet":
        wait_until("the restarted query did not read every input", lambda: caught_up(layout, run.pid, start_batch))
    else:
        wait_until(f"the restarted query did not commit {BATCHES} batches",
                   lambda: batches_read(layout, run.pid, start_batch))
    return {"seconds": time.monotonic() - started}


def runbook(spark, layout: Layout, stream: str, pids: list[int]) -> dict:
    environment = Environment.from_env(layout=layout)
    recovery = RecoverySettings(archive_min_free_bytes=0)
    environment = replace(environment, settings=replace(environment.settings, recovery=recovery))
    started = time.monotonic()
    report = recover(environment, RecoveryRequest(JOB, "adjust", watermark_delay=DELAY, reason="bench", confirm=JOB,
                                                  dry_run=False, actor="bench"), spark=spark)
    seconds = time.monotonic() - started
    pids += [e["details"]["pid"] for e in report.steps if e["step"] == "restart" and e["phase"] == "done"]
    if report.outcome != "succeeded":
        raise RuntimeError(f"the runbook did not succeed: {report.summary()}")
    verification = report.verification or {}
    ended = ("timeout" if verification.get("timed_out") else "caught up" if verification.get("caught_up")
             else f"{BATCHES} batches")
    return {"seconds": seconds, "steps": step_seconds(report.steps), "ended": ended}


SIDE = {"bare": bare, "runbook": runbook}


def stop_all(layout: Layout, pids: list[int]) -> None:
    """Stop whatever runs the job (a stop request), then make sure every process this side started is gone."""
    lease = current_lease(layout, JOB)
    request = request_stop(layout, JOB, actor="bench", reason="bench: side done", settings=CONTROL) if lease else None
    if request is not None:
        wait_released(layout, JOB, request.lease_id, 120, settings=CONTROL)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def measure(spark, root: str, name: str, side: str, stream: str, source: Layout, args) -> dict:
    layout = new_home(root, name, source)
    # the input read (bounded, in this process), then long-running:
    run_job(spark, get_job(JOB), layout, settings=read_settings())
    before = latest_batch(layout)
    first = start_run(layout, "first-run")
    pids = [first.pid]
    try:
        wait_until("the long-running query did not go idle", lambda: caught_up(layout, first.pid, before))
        if stream == "quiet":
            return SIDE[side](spark, layout, stream, pids)
        with Lander(layout, args.sizes[0], LAND_SECONDS, args.files) as lander:
            measured = SIDE[side](spark, layout, stream, pids)
        return {**measured, "landed": lander.landed}
    finally:
        stop_all(layout, pids)


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    spark = spark or get_session(SparkSettings.from_env())
    size = args.sizes[0]
    print(f"recovery on a live stream: {machine()}")
    print(f"job {JOB} long-running; {size} events per file, {args.files} files before; busy: a file every "
          f"{LAND_SECONDS:g} s; adjust to {DELAY}; K = {BATCHES}; {args.repeats} repetition(s) per side and "
          "stream", flush=True)
    seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
    steps: dict[tuple[str, str], list[float]] = defaultdict(list)
    ended: dict[str, list[str]] = defaultdict(list)
    with workdir(args) as root:
        source = Layout(os.path.join(root, "input"))
        generate(source, GeneratorConfig(events=size * args.files, files=args.files, users=args.users,
                                         late_share=0.05, duplicate_share=0.02, minutes_per_file=15, seed=42))
        warm_up(root, args.users, lambda layout: run_job(spark, get_job(JOB), layout, settings=read_settings()))
        for s, stream in enumerate(STREAMS):
            for n, side in enumerate(schedule(SIDES, s, args.repeats)):
                measured = measure(spark, root, f"{stream}-{side}-{n}", side, stream, source, args)
                seconds[stream, side].append(measured["seconds"])
                for step, took in measured.get("steps", {}).items():
                    steps[stream, step].append(took)
                if "ended" in measured:
                    ended[stream].append(measured["ended"])
                landed = f", {measured['landed']} files landed meanwhile" if "landed" in measured else ""
                print(f"  {stream:<6} {side:<8} {measured['seconds']:.1f} s"
                      f"{'; verification ended by ' + measured['ended'] if 'ended' in measured else ''}{landed}",
                      flush=True)
    median = {key: statistics.median(values) for key, values in seconds.items()}
    rows = [[stream, side, len(seconds[stream, side]), f"{median[stream, side]:.1f}",
             f"{min(seconds[stream, side]):.1f} - {max(seconds[stream, side]):.1f}",
             fmt_ratio(median[stream, side] / median[stream, "bare"]) if side == "runbook" else "",
             ", ".join(f"{ended[stream].count(e)}x {e}" for e in sorted(set(ended[stream]))) if side == "runbook"
             else ""]
            for stream in STREAMS for side in SIDES]
    report = Report("recovery_live")
    report.table("time to a healthy query (s); ratio = median runbook / median bare stop and restart, same stream",
                 ["stream", "side", "runs", "median s", "min - max s", "ratio", "verification ended by"], rows)
    names = list(dict.fromkeys(step for _, step in steps))
    report.table("runbook steps (journal: done - started), median s over repetitions",
                 ["step", *STREAMS], [[step, *(f"{statistics.median(steps[stream, step]):.1f}"
                                              if steps.get((stream, step)) else None for stream in STREAMS)]
                                     for step in names])
    print(f"\nfinished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
