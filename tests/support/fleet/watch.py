"""What the soak observes while the fleet runs, from outside every process: each job's lease record as it changes
(who holds it, since when: the takeovers and their delays), and the resident memory of the daemons and of each
lease holder's driver over time (the "memory flat" invariant)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from tests.support.fleet.homes import Home


@dataclass
class Holding:
    """One lease as the watch saw it: from when to when, which run and process."""

    home: str
    job: str
    lease_id: str
    run_id: str
    pid: int
    dagster_run_id: str | None
    seen_at: float
    gone_at: float | None = None


@dataclass
class Watch:
    homes: list[Home]
    holdings: list[Holding] = field(default_factory=list)
    memory: dict[tuple[str, int], list[tuple[float, float]]] = field(default_factory=dict)  # (what, pid) -> samples
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> "Watch":
        for target, every in ((self._leases, 1.0), (self._memory, 30.0)):
            thread = threading.Thread(target=self._loop, args=(target, every), daemon=True, name=target.__name__)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _loop(self, step, every: float) -> None:
        while not self._stop.wait(every):
            try:
                step()
            except Exception:  # noqa: BLE001 - a record half-written or the store busy: the next round reads again
                self.errors += 1

    def current(self, home: str, job: str) -> Holding | None:
        """The lease of `job` in home `home` (its kind) the watch saw last, None when none is held."""
        return next((h for h in reversed(self.holdings) if (h.home, h.job) == (home, job) and h.gone_at is None), None)

    def _leases(self) -> None:
        now = time.time()
        for home in self.homes:
            for job in home.jobs:
                lease = home.lease(job.name)
                held = self.current(home.kind, job.name)
                if held is not None and (lease is None or lease.lease_id != held.lease_id):
                    held.gone_at = now
                if lease is not None and (held is None or lease.lease_id != held.lease_id):
                    self.holdings.append(Holding(home.kind, job.name, lease.lease_id, lease.run_id, lease.pid,
                                                 getattr(lease, "dagster_run_id", None), now))

    def _memory(self) -> None:
        now = time.time()
        for home in self.homes:
            if home.daemon is not None and home.daemon.poll() is None:
                self._sample(f"{home.kind} daemon", home.daemon.pid, now)
        for held in [h for h in self.holdings if h.gone_at is None]:
            self._sample(f"{held.home} {held.job} driver", held.pid, now)

    def _sample(self, what: str, pid: int, now: float) -> None:
        rss = rss_mib(pid)
        if rss is not None:
            self.memory.setdefault((what, pid), []).append((now, rss))

    def takeover_after(self, home: str, job: str, since: float, lease_id: str | None) -> float | None:
        """Seconds from `since` until a lease other than `lease_id` of the job was first seen (None: not yet)."""
        taken = [h.seen_at for h in self.holdings if h.home == home and h.job == job and h.lease_id != lease_id
                 and h.seen_at >= since]
        return min(taken) - since if taken else None


def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None
