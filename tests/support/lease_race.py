"""Two processes racing for one job's lease, round after round: each round both try at the same instant (a start
time a few milliseconds ahead), exactly one may win, then the winner releases. Used by the control plane's test
(tests/e2e/test_control_s3.py: exactly one winner every round) and by the lease race benchmark
(bench/bench_lease_race.py: how long a round takes on each backend), on whatever home STATEOPS_HOME names."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tests.support import ROOT

RACER = """
    import os, sys, time
    from stateops.control import ControlSettings, LeaseHeldError, acquire, start_blocker
    from stateops.layout import Layout

    layout, name, held, settings = Layout.from_env(), sys.argv[1], None, ControlSettings.from_env()
    start_blocker(layout, {job!r}, settings=settings)  # the storage client and the imports, before the first round
    print("ready", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "go":
            time.sleep(max(0.0, float(args[1]) - time.time()))
            began = time.time()
            try:
                held = acquire(layout, {job!r}, run_id=f"{{name}}-{{args[0]}}", settings=settings)
                outcome = "won"
            except LeaseHeldError:
                outcome = "refused"
            print(outcome, began, time.time() - began, flush=True)
        elif command == "release":
            if held is not None:
                held.release()
                held = None
            print("released", flush=True)
"""


@dataclass
class Round:
    outcomes: list[str]          # per racer: won | refused
    spread_seconds: float        # how far apart the two tries started
    seconds: float               # the whole round: both tries, then the winner's release


@dataclass
class Racers:
    processes: list[subprocess.Popen]
    logs: list[Path]
    rounds: list[Round] = field(default_factory=list)

    def _answer(self, index: int) -> list[str]:
        line = self.processes[index].stdout.readline()
        if not line:
            self.processes[index].wait(10)
            raise RuntimeError(f"racer {index + 1} exited ({self.processes[index].returncode}): "
                               f"{self.logs[index].read_text()[-3000:]}")
        return line.split()

    def _tell(self, line: str) -> None:
        for process in self.processes:
            process.stdin.write(line + "\n")
            process.stdin.flush()

    def race(self, number: int, between=None) -> Round:
        """One round: both try at the same instant; `between()` runs while the winner holds the lease; then the
        winner releases. Returns what happened."""
        began = time.monotonic()
        self._tell(f"go {number} {time.time() + 0.03}")
        answers = [self._answer(i) for i in range(len(self.processes))]
        if between is not None:
            between([a[0] for a in answers])
        self._tell("release")
        released = [self._answer(i) for i in range(len(self.processes))]
        if released != [["released"]] * len(self.processes):
            raise RuntimeError(f"round {number}: release answered {released}")
        done = Round([a[0] for a in answers], abs(float(answers[0][1]) - float(answers[1][1])),
                     time.monotonic() - began)
        self.rounds.append(done)
        return done


@contextlib.contextmanager
def racers(job: str, logs: Path, env: dict[str, str] | None = None) -> Iterator[Racers]:
    """Two racer processes for `job` on the home of `env` (default: this process's), started and ready; closed
    (their stdin) after the block, each expected to exit 0."""
    code = textwrap.dedent(RACER.format(job=job))
    env = {**(env or os.environ), "PYTHONPATH": ROOT}
    paths = [logs / f"racer-{n}.log" for n in (1, 2)]
    processes = [subprocess.Popen([sys.executable, "-c", code, f"racer-{n}"], env=env, cwd=ROOT, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(path, "w"))
                 for n, path in zip((1, 2), paths)]
    found = Racers(processes, paths)
    try:
        for index in range(2):
            ready = found._answer(index)
            if ready != ["ready"]:
                raise RuntimeError(f"racer {index + 1} said {ready}")
        yield found
    finally:
        for process in processes:
            process.stdin.close()
            process.wait(30)
    codes = [p.returncode for p in processes]
    if codes != [0, 0]:
        raise RuntimeError(f"racers exited {codes}: {[p.read_text()[-2000:] for p in paths]}")
