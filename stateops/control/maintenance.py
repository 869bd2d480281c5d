"""The maintenance lock: while a runbook holds it, no run of the job starts, except one that presents the
runbook's id (the runbook restarts the job itself). Schedules skip while it is held.

The lock does not expire: a runbook that died leaves it, and an operator releases it deliberately
(`stateops jobs unlock NAME --runbook-id ID`). Taking and releasing it are journaled in `actions`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from stateops import actions
from stateops.errors import StateOpsError
from stateops.layout import Layout

from stateops.clock import now_iso
from stateops.control.store import ControlStore

RECORD = "maintenance"


@dataclass(frozen=True)
class MaintenanceLock:
    job: str
    runbook_id: str
    actor: str
    reason: str
    since: str

    def describe(self) -> str:
        return f"runbook {self.runbook_id} ({self.actor}, since {self.since}): {self.reason}"


class MaintenanceLockedError(StateOpsError):
    def __init__(self, lock: MaintenanceLock):
        self.lock = lock
        super().__init__(
            f"{lock.job} is under maintenance: locked by {lock.describe()}. Fix: wait for the runbook to "
            f"finish, or release a lock left behind: stateops jobs unlock {lock.job} --runbook-id {lock.runbook_id}")


def read(store: ControlStore) -> MaintenanceLock | None:
    record = store.read(RECORD)
    return MaintenanceLock(**record) if record else None


def current(layout: Layout, job: str) -> MaintenanceLock | None:
    return read(ControlStore(layout, job))


def acquire(layout: Layout, job: str, *, runbook_id: str, actor: str, reason: str,
            journal: bool = True) -> MaintenanceLock:
    """Take the lock for `runbook_id` (again: idempotent); refuses while another runbook holds it. `journal`:
    record it in `actions` (a home move journals in the new home instead: it changes nothing else in the old)."""
    if not runbook_id or not reason:
        raise StateOpsError("a maintenance lock needs a runbook id and a reason. Fix: pass both")
    store = ControlStore(layout, job)
    with store.critical():
        held = read(store)
        if held is not None:
            if held.runbook_id != runbook_id:
                raise MaintenanceLockedError(held)
            return held
        lock = MaintenanceLock(job=job, runbook_id=runbook_id, actor=actor, reason=reason, since=now_iso())
        store.write(RECORD, asdict(lock))
    if journal:
        actions.record(layout, job, "maintenance_lock", "acquired", actor=actor, runbook_id=runbook_id,
                       details={"reason": reason})
    return lock


def release(layout: Layout, job: str, *, runbook_id: str, actor: str, journal: bool = True) -> MaintenanceLock | None:
    """Release the lock held by `runbook_id`; None if no lock was held. Refuses another runbook's lock."""
    store = ControlStore(layout, job)
    with store.critical():
        held = read(store)
        if held is None:
            return None
        if held.runbook_id != runbook_id:
            raise StateOpsError(f"{job}: the maintenance lock is held by {held.describe()}, not by runbook "
                                f"{runbook_id}. Fix: pass --runbook-id {held.runbook_id} to release it")
        store.remove(RECORD)
    if journal:
        actions.record(layout, job, "maintenance_lock", "released", actor=actor, runbook_id=runbook_id,
                       details={"held_since": held.since, "held_by": held.actor, "reason": held.reason})
    return held
