"""The fence trials' faults as objects (a nemesis each, in Jepsen's sense): how the fault is armed in process A's (or
B's) environment, when it strikes (`ready`), `inject()` to start it and `end()` to stop it. tests/support/faults/trial.py
runs one between A's first batches and B's takeover; tests/e2e/test_fence.py lists them (SCENARIOS).

Where a fault strikes: at a fault point in A's own code (stateops/faults.py), at its batch `at_batch`'s Delta commit or
inside a heartbeat well into the run; once A committed batch `at_batch` (the harness acts, `start_delay` later); or at
A's next matching request once A committed batch `at_batch - 1` (its proxy holds it, then the harness freezes A).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from stateops.faults import ENV

from tests.support.faults import processes
from tests.support.faults.processes import StartedProcess
from tests.support.faults.proxy import FaultProxy

HEARTBEAT_FAULT = 25  # the heartbeat whose critical section freezes (about 25 s into A's run: batches committed)


def with_fault(env: dict[str, str], fault: str) -> dict[str, str]:
    """`env` with one more entry in STATEOPS_FAULTS."""
    return {**env, ENV: ";".join(filter(None, (env.get(ENV), fault)))}


@dataclass
class Target:
    """Process A as a nemesis acts on it: its process, its proxy on S3, the newest batch its job committed, and a
    wait for a condition that fails at once when A ends."""

    process: StartedProcess
    proxy: FaultProxy | None
    committed: Callable[[], int]
    wait: Callable[[Callable[[], bool], float, str], None]


class Scenario:
    """One kind of fault. `stores`: where it is tried (the proxy's faults need S3); `fenced`: the fence is what keeps
    the invariants under it (the negative control runs it with the fence off); `takeover`: it makes B take the lease
    over (a slow store never lets A's lease lapse)."""

    name = ""
    stores: tuple[str, ...] = ("local", "s3")
    fenced = True
    takeover = True
    kills = False       # A is killed: it ends at once, with no line of its own
    needs_batch = True
    taker = "bounded"   # how B runs: to the end of its input, or continuous (still running when the fault ends)  # A must have committed batches before it strikes (a fault point needs only A's lease)

    def a_env(self, env: dict[str, str], job: str, at_batch: int) -> dict[str, str]:
        """A's environment (a fault point armed)."""
        return env

    def b_env(self, env: dict[str, str], ttl: float) -> dict[str, str]:
        """B's environment."""
        return env

    def inject(self, a: Target, at_batch: int, start_delay: float) -> None:
        """Start the fault on A (A holds its lease and committed batch at_batch - 1)."""

    def end(self, a: Target) -> None:
        """Stop the fault: A may go on (and must then find it lost its lease)."""

    def __repr__(self) -> str:
        return self.name


class FreezeAtPoint(Scenario):
    """A's whole process group frozen by one of its own fault points (inside a batch's Delta commit, or inside its
    heartbeat's critical section, between reading its lease record and writing it), thawed at the end. Frozen in
    the heartbeat, A thaws with its record to write while B runs on (continuous): B must keep the lease."""

    needs_batch = False

    def __init__(self, name: str, point: str, taker: str = "bounded"):
        self.name, self.point, self.taker = name, point, taker

    def a_env(self, env, job, at_batch):
        where = f"table={job},batch={at_batch}" if self.point == "sink.before_commit" else f"beat={HEARTBEAT_FAULT}"
        return with_fault(env, f"{self.point}:job={job},{where},then=freeze")

    def inject(self, a, at_batch, start_delay):
        a.wait(lambda: processes.state(a.process.pid) == "T", 300, "A to freeze at its fault point")

    def end(self, a):
        processes.thaw(a.process, "group")


class AfterBatch(Scenario):
    """A fault the harness starts once A committed batch `at_batch`, `start_delay` later."""

    def inject(self, a, at_batch, start_delay):
        a.wait(lambda: a.committed() >= at_batch, 120, f"A to commit batch {at_batch}")
        time.sleep(start_delay)
        self.strike(a)

    def strike(self, a: Target) -> None:
        raise NotImplementedError


class Freeze(AfterBatch):
    """SIGSTOP between batches: the whole group (driver and JVM), or the Python driver alone (its JVM runs on)."""

    def __init__(self, name: str, scope: str):
        self.name, self.scope = name, scope

    def strike(self, a):
        processes.freeze(a.process, self.scope)

    def end(self, a):
        processes.thaw(a.process, "group")


class Partition(AfterBatch):
    """Every request of A's refused at its proxy (a connection reset), healed at the end."""

    name, stores = "partition", ("s3",)

    def strike(self, a):
        a.proxy.partition()

    def end(self, a):
        a.proxy.heal()


class SlowStore(AfterBatch):
    """Every request of A's delayed at its proxy by `delay` seconds: A keeps its lease, slowly."""

    name, stores, fenced, takeover = "slow-store", ("s3",), False, False

    def __init__(self, delay: float):
        self.delay = delay

    def strike(self, a):
        a.proxy.delay(self.delay)

    def end(self, a):
        a.proxy.clear_delays()


class Crash(AfterBatch):
    """kill -9 of A's process group: B takes the stale lease over."""

    name, fenced, kills = "crash-restart", False, True

    def strike(self, a):
        processes.crash(a.process)


class Hold(Scenario):
    """A's next matching request held at its proxy (a commit point's PUT: S3A's rename is a copy, a PUT too), then A
    frozen whole; at the end the request is let through and A thawed."""

    stores = ("s3",)

    def __init__(self, name: str, method: str, key_regex: str):
        self.name, self.method, self.key_regex = name, method, key_regex
        self.held = None

    def inject(self, a, at_batch, start_delay):
        time.sleep(start_delay)
        self.held = a.proxy.hold(self.method, self.key_regex)
        self.held.wait_held(120)
        processes.freeze(a.process, "group")

    def end(self, a):
        self.held.release()
        processes.thaw(a.process, "group")


class SkewedClock(Scenario):
    """B's lease clock runs ahead by twice the lease timeout: A's live lease looks stale to it."""

    name = "skewed-clock"

    def b_env(self, env, ttl):
        return with_fault(env, f"clock.skew:seconds={2 * ttl}")


def scenarios(ttl: float) -> dict[str, Scenario]:
    """Every scenario by name, for a lease timeout of `ttl` seconds (a fresh object each: a Hold keeps its hold)."""
    found = [
        FreezeAtPoint("freeze-in-batch", "sink.before_commit"),
        Freeze("freeze-between-batches", "group"),
        FreezeAtPoint("freeze-in-heartbeat", "lease.heartbeat", taker="continuous"),
        Freeze("freeze-python", "python"),
        Hold("hold-delta-commit", "PUT", r"/_delta_log/\d{20}\.json$"),
        Hold("hold-offsets", "PUT", r"/offsets/\d+$"),
        Hold("hold-commits", "PUT", r"/commits/\d+$"),
        Partition(),
        SlowStore(0.6 * ttl),
        SkewedClock(),
        Crash(),
    ]
    return {scenario.name: scenario for scenario in found}
