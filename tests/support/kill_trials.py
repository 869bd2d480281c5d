"""kill -9 of `stateops jobs run` (its own process group, its JVM with it): at a fault point
(stateops/faults.py) or at a random point of a run, and the counts every kill test reports.

The counts a test records with `record_counts(record_property, scenario, counts)` are printed at the end of the run
(section "fault suite counts"), whether the test passed or not.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from deltalake import DeltaTable

from stateops.sinkstate import query_app_id
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.delta import open_table
from stateops.faults import ENV
from stateops.layout import Layout
from tests.support.delta_rows import table_rows
from tests.support.outcomes import KEYS

STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")
FAULT_COUNTS = "fault suite counts"
_lines: list[str] = []


def committed(checkpoint: str) -> int:
    """How many batches the checkpoint's commit log holds (0 before the first)."""
    try:
        return len(Checkpoint(checkpoint).committed_batches())
    except FileNotFoundError:
        return 0


def delta_batch(layout: Layout, job: str) -> int | None:
    """The newest batch of the job's query in its Delta table (None before the first)."""
    if not open_table(layout.table(job)):
        return None
    try:
        return DeltaTable(layout.table(job)).transaction_version(query_app_id(job, layout.checkpoint(job)))
    except (FileNotFoundError, OSError, ValueError):
        return None


def run_until_fault(job: str, home: str, fault: str, env: dict[str, str] | None = None) -> None:
    """`stateops jobs run JOB` in its own process group until the fault kills it; its JVM must follow."""
    proc = subprocess.Popen([STATEOPS, "jobs", "run", job],
                            env={**os.environ, "STATEOPS_HOME": home, ENV: fault, **(env or {})},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
        assert f"fault {fault.split(':')[0]}" in err
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        raise AssertionError("the JVM outlived its killed driver")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_trial(layout: Layout, job: str, rng: random.Random, env: dict[str, str] | None = None) -> dict:
    """One run of `stateops jobs run JOB` (with `env` added to its environment), SIGKILLed after 0 or 1 new
    commits plus a random delay (during startup, inside a batch, between the Delta commit and Spark's commit).
    Returns where it landed."""
    checkpoint = layout.checkpoint(job)
    before = committed(checkpoint)
    target = before + rng.randint(0, 1)
    delay = rng.uniform(0.0, 1.2)
    proc = subprocess.Popen([STATEOPS, "jobs", "run", job], env={**os.environ, "STATEOPS_HOME": layout.home, **(env or {})},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while committed(checkpoint) < target:
            if proc.poll() is not None:
                raise AssertionError(f"{job} ended before the kill: {proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, f"{job} made no progress"
            time.sleep(0.02)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL, f"{job} ended before the kill"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    after = committed(checkpoint)
    in_delta = delta_batch(layout, job)
    rows = table_rows(layout.table(job), KEYS[job]) if open_table(layout.table(job)) else []
    return {"committed_before": before, "committed_after": after,
            "delta_ahead": in_delta is not None and in_delta >= after,  # killed between Delta and commits/N
            "duplicates": len(rows) - len(set(rows))}


WRITERS = ("delta-rs", "spark")


def chain(layout: Layout, job: str, trials: int, seed: int, env: dict[str, str] | None = None,
          alternate_writers: bool = False) -> list[dict]:
    """`trials` kill trials in a row on one home, each restarting where the last was killed; with
    `alternate_writers` every other trial writes with Delta's Spark writer (a batch killed on one writer is
    replayed on the other)."""
    rng = random.Random(seed)
    return [kill_trial(layout, job, rng, {**(env or {}), **({"STATEOPS_DELTA_WRITER": WRITERS[i % 2]}
                                                             if alternate_writers else {})})
            for i in range(trials)]


def trial_counts(trials: list[dict]) -> dict:
    """What a chain of kill trials did: how many, killed between the Delta commit and commits/N, killed before
    the first new commit, duplicates seen after a trial."""
    return {"trials": len(trials),
            "killed_between_delta_and_commit": sum(t["delta_ahead"] for t in trials),
            "killed_before_first_new_commit": sum(t["committed_after"] == t["committed_before"] for t in trials),
            "duplicates_after_a_trial": sum(t["duplicates"] for t in trials)}


def record_counts(record_property, scenario: str, counts: dict) -> None:
    """The counts, printed in pytest's terminal summary whether the test passes or not."""
    record_property(FAULT_COUNTS, f"{scenario}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


def collect(user_properties) -> None:
    """In the main process: keep the counts a test reported (pytest-xdist sends them back with its report)."""
    _lines.extend(str(v) for k, v in user_properties if k == FAULT_COUNTS)


def summary(terminalreporter) -> None:
    if _lines:
        terminalreporter.section(FAULT_COUNTS)
        for line in _lines:
            terminalreporter.write_line(line)
