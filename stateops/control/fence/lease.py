"""The lease record: who runs a job's queries now (run ids, pid, host, started, heartbeat, epoch).

A lease is live while its holder heartbeats; it is stale when no heartbeat came for the timeout, or when
its pid no longer runs on this host (a kill -9; the pid's start time guards against pid reuse). Only a
stale lease may be taken over (holder.acquire). The record lives in `ops/<job>/control/lease.json`.

Each lease carries an epoch, a fencing token: every lease taken gets one more than any before it, kept in its own
record (`epoch.json`, written only when a lease is taken, never by a heartbeat, and left when a lease is released).
The epochs order the holders' records: a record with an older epoch than a holder's own is a stale holder's late
write (one frozen between its heartbeat's check and its write, resumed after the takeover), which the live holder
ignores and writes over; a newer epoch than a holder's own means it was taken over (holder.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from stateops.errors import OperationFailed, StateOpsError
from stateops.layout import Layout

from stateops.storage.holders import HOST, alive
from stateops.clock import age_seconds
from stateops.control.settings import ControlSettings
from stateops.control.store import ControlStore

RECORD = "lease"
EPOCH = "epoch"


@dataclass(frozen=True)
class Lease:
    lease_id: str
    job: str
    run_id: str
    dagster_run_id: str | None
    runbook_id: str | None
    pid: int
    pid_started: int | None  # clock ticks since boot, from /proc (pid reuse guard)
    host: str
    started: str
    heartbeat: str
    mode: str | None = None  # bounded | continuous: how the holder runs the job (a runbook restarts it alike)
    epoch: int = 0           # the fencing token: one more than every lease taken before (0: a record without one)

    def heartbeat_age(self, now: datetime | None = None) -> float:
        return age_seconds(self.heartbeat, now)

    def stale_reason(self, settings: ControlSettings, now: datetime | None = None) -> str | None:
        """Why the lease may be taken over, or None while it is live."""
        age = self.heartbeat_age(now)
        if age > settings.lease_timeout_seconds:
            return f"no heartbeat for {age:.0f} s (timeout {settings.lease_timeout_seconds:g} s)"
        if self.host == HOST and not alive(self.pid, self.pid_started):
            return f"pid {self.pid} on {self.host} is no longer running"
        return None

    def describe(self) -> str:
        dagster = f" (Dagster run {self.dagster_run_id})" if self.dagster_run_id else ""
        runbook = f" for runbook {self.runbook_id}" if self.runbook_id else ""
        return f"run {self.run_id}{dagster}{runbook}, pid {self.pid} on {self.host}, since {self.started}"

    def to_dict(self) -> dict:
        return asdict(self)


class LeaseHeldError(StateOpsError):
    """A live lease is held by another run: the job is already running."""

    def __init__(self, holder: Lease):
        self.holder = holder
        super().__init__(
            f"{holder.job} is already running: lease held by {holder.describe()}, last heartbeat "
            f"{holder.heartbeat_age():.0f} s ago. Fix: wait for that run to end, or stop it: "
            f"stateops jobs stop {holder.job} --wait 120")


class LeaseLostError(OperationFailed):
    """This run's lease was taken over: it lost the right to write and stopped its queries."""

    def __init__(self, mine: Lease, now_held_by: Lease | None, *, taken_by: str | None = None):
        self.mine, self.now_held_by, self.taken_by = mine, now_held_by, taken_by
        self.by = (f"now held by {now_held_by.describe()}" if now_held_by else
                   taken_by or "the lease record is gone")
        super().__init__(
            f"{mine.job}: run {mine.run_id} lost its lease ({self.by}); its queries were stopped. Fix: check "
            f"`stateops jobs status {mine.job}`; the heartbeat stalled past the lease timeout "
            "(STATEOPS_LEASE_TIMEOUT_SECONDS) or someone removed the lease")


def read(store: ControlStore) -> Lease | None:
    return read_versioned(store)[0]


def read_versioned(store: ControlStore) -> tuple[Lease | None, str | None]:
    """The lease record and its version (for a conditional write over it)."""
    record, version = store.read_versioned(RECORD)
    return (Lease(**record) if record else None), version


def newest_epoch(store: ControlStore) -> int:
    """The epoch of the last lease taken (0 when none was, or only before epochs)."""
    record = store.read(EPOCH)
    return int(record["epoch"]) if record else 0


def current(layout: Layout, job: str) -> Lease | None:
    """The lease record as it is now (live or stale), read without the lock."""
    return read(ControlStore(layout, job))
