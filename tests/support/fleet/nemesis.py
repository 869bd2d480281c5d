"""The soak's nemesis: every few minutes, one fault at random among those the fleet allows, held for a while and
then ended, each recorded with its times.

    kill_run       kill -9 of a job's lease holder (its driver, JVM and Python workers): a crash
    kill_daemon    kill -9 of a home's Dagster daemon, started again 10 s later (a supervisor's restart)
    freeze_run     SIGSTOP of a holder past its lease (until another run took the lease, at most FREEZE_MAX), then
                   SIGCONT: the thawed holder must stop by itself and the taker run on
    partition      every request of the S3 home's processes refused at their proxy for PARTITION_SECONDS
    slow_store     every request of the S3 home's processes SLOW_SECONDS late for SLOW_FOR seconds
    full_disk      the local home's archive disk (a tmpfs) filled to the last byte for FULL_FOR seconds
    kafka_restart  kill -9 of the Kafka broker, started again on its data 10 s later

A holder is found by its lease record (pid on this host), whoever started it: the CLI, or the daemon's run
launcher (a run process of the code server). Its descendants are found in /proc: pyspark's JVM and its Python
workers.
"""
from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from tests.support.faults.processes import descendants
from tests.support.fleet.homes import Home
from tests.support.fleet.watch import Watch

FREEZE_MAX = 600.0   # the sensor sees the stale lease and launches a run, which starts and takes the lease over
STOP_BOUND = 180.0                               # a thawed holder stops by itself within this
PARTITION_SECONDS, SLOW_SECONDS, SLOW_FOR, FULL_FOR = 45.0, 2.0, 60.0, 120.0
RESTART_AFTER = 10.0


@dataclass
class Fault:
    kind: str
    home: str
    target: str
    at: float
    ended: float | None = None
    detail: dict = field(default_factory=dict)

    def line(self) -> str:
        took = f"{self.ended - self.at:.0f} s" if self.ended else "not ended"
        details = ", ".join(f"{k} {v}" for k, v in self.detail.items())
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.kind} {self.home} {self.target} ({took}" \
               f"{'; ' + details if details else ''})"


def _signal_tree(pid: int, signum: int) -> list[int]:
    """`signum` to `pid` and every descendant (parents first, so a stopped parent spawns nothing new)."""
    tree = [pid, *descendants(pid)]
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signum)
    return tree


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class FullDisk:
    """A tmpfs for the local home's archives (mounting needs root; None where it cannot be mounted)."""

    def __init__(self, root: str):
        self.root = root
        self.filler = os.path.join(root, ".nemesis-filler")

    def fill(self) -> int:
        written = 0
        with open(self.filler, "wb") as handle:
            with contextlib.suppress(OSError):
                while True:
                    handle.write(b"\0" * (1 << 20))
                    handle.flush()
                    written += 1 << 20
        with contextlib.suppress(OSError):
            with open(self.filler + ".tail", "wb") as tail:  # the last page's bytes
                while True:
                    tail.write(b"\0" * 4096)
                    tail.flush()
        return written

    def free(self) -> None:
        for path in (self.filler, self.filler + ".tail"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


class Nemesis:
    def __init__(self, homes: list[Home], watch: Watch, rng: random.Random, *, disk: FullDisk | None = None,
                 restart_broker: Callable[[], None] | None = None, kill_broker: Callable[[], None] | None = None):
        self.homes, self.watch, self.rng = homes, watch, rng
        self.disk, self.restart_broker, self.kill_broker = disk, restart_broker, kill_broker
        self.faults: list[Fault] = []

    def kinds(self) -> list[tuple[str, Home | None]]:
        found: list[tuple[str, Home | None]] = []
        for home in self.homes:
            found += [("kill_run", home), ("freeze_run", home), ("kill_daemon", home)]
            if home.proxy is not None:
                found += [("partition", home), ("slow_store", home)]
        local = next((h for h in self.homes if h.kind == "local"), None)
        if self.disk is not None and local is not None:
            found.append(("full_disk", local))
        if self.kill_broker is not None:
            found.append(("kafka_restart", next((h for h in self.homes if h.bootstrap), None)))
        return found

    def act(self) -> Fault | None:
        kind, home = self.rng.choice(self.kinds())
        return getattr(self, kind)(home)

    def _holder(self, home: Home):
        """A job of `home` whose lease a live process on this host holds: (job, lease), or None."""
        held = [(job.name, home.lease(job.name)) for job in home.jobs]
        held = [(job, lease) for job, lease in held if lease is not None and _alive(lease.pid)]
        return self.rng.choice(held) if held else None

    def _record(self, fault: Fault) -> Fault:
        fault.ended = fault.ended or time.time()
        self.faults.append(fault)
        return fault

    def kill_run(self, home: Home) -> Fault | None:
        found = self._holder(home)
        if found is None:
            return None
        job, lease = found
        fault = Fault("kill_run", home.kind, job, time.time(), detail={"pid": lease.pid, "lease": lease.lease_id})
        _signal_tree(lease.pid, signal.SIGKILL)
        home.note(f"nemesis: kill -9 of {job}'s holder pid {lease.pid} (run {lease.run_id})")
        return self._record(fault)

    def freeze_run(self, home: Home) -> Fault | None:
        found = self._holder(home)
        if found is None:
            return None
        job, lease = found
        fault = Fault("freeze_run", home.kind, job, time.time(), detail={"pid": lease.pid, "lease": lease.lease_id})
        tree = _signal_tree(lease.pid, signal.SIGSTOP)
        home.note(f"nemesis: froze {job}'s holder pid {lease.pid} and {len(tree) - 1} descendants")
        deadline = time.monotonic() + FREEZE_MAX
        while time.monotonic() < deadline and self.watch.takeover_after(home.kind, job, fault.at, lease.lease_id) is None:
            time.sleep(2)
        time.sleep(5)  # the taker is writing
        for member in reversed(tree):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGCONT)
        fault.ended = time.time()
        taken = self.watch.takeover_after(home.kind, job, fault.at, lease.lease_id)
        stop_by = time.monotonic() + STOP_BOUND
        while _alive(lease.pid) and time.monotonic() < stop_by:
            time.sleep(1)
        fault.detail.update({"taken_over_after_s": None if taken is None else round(taken, 1),
                             "thawed_stopped": not _alive(lease.pid),
                             "thawed_stopped_after_s": round(time.time() - fault.ended, 1)})
        home.note(f"nemesis: thawed {job}'s pid {lease.pid}: {fault.detail}")
        return self._record(fault)

    def kill_daemon(self, home: Home) -> Fault:
        fault = Fault("kill_daemon", home.kind, "daemon", time.time(),
                      detail={"pid": home.daemon.pid if home.daemon else None})
        home.kill_daemon()
        home.note("nemesis: kill -9 of the daemon")
        time.sleep(RESTART_AFTER)
        home.start_daemon()
        return self._record(fault)

    def _held(self, fault: Fault, home: Home, what: str, seconds: float, end: Callable[[], None]) -> Fault:
        """A fault already started: noted, held `seconds`, then ended by `end` whatever happens."""
        home.note(f"nemesis: {what}")
        try:
            time.sleep(seconds)
        finally:
            end()
        return self._record(fault)

    def partition(self, home: Home) -> Fault:
        home.proxy.partition()
        return self._held(Fault("partition", home.kind, "store", time.time(), detail={"seconds": PARTITION_SECONDS}),
                          home, "the store partitioned away", PARTITION_SECONDS, home.proxy.heal)

    def slow_store(self, home: Home) -> Fault:
        home.proxy.delay(SLOW_SECONDS)
        return self._held(Fault("slow_store", home.kind, "store", time.time(), detail={"delay_s": SLOW_SECONDS}),
                          home, f"every request {SLOW_SECONDS} s late", SLOW_FOR, home.proxy.clear_delays)

    def full_disk(self, home: Home) -> Fault:
        fault = Fault("full_disk", home.kind, "archives", time.time())
        fault.detail["filled_mib"] = self.disk.fill() >> 20
        return self._held(fault, home, "the archive disk is full", FULL_FOR, self.disk.free)

    def kafka_restart(self, home: Home) -> Fault:
        fault = Fault("kafka_restart", home.kind if home else "-", "broker", time.time())
        self.kill_broker()
        time.sleep(RESTART_AFTER)
        self.restart_broker()
        return self._record(fault)
