"""The stop request: asks the run that holds the job's lease to stop gracefully.

The request names the lease it is for, so it can never stop a later run; the runner polls it between
batches, lets the batch in flight finish (hard-stopping only after `grace_seconds`) and clears it when it
releases the lease. Requests are journaled in `actions`. Record: `ops/<job>/control/stop.json`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from stateops import actions
from stateops.layout import Layout

from stateops.control.fence import lease as leases
from stateops.clock import now_iso
from stateops.control.settings import ControlSettings
from stateops.control.store import ControlStore

RECORD = "stop"


@dataclass(frozen=True)
class StopRequest:
    job: str
    lease_id: str
    run_id: str
    requested_at: str
    actor: str
    reason: str
    grace_seconds: float


def read(store: ControlStore) -> StopRequest | None:
    record = store.read(RECORD)
    return StopRequest(**record) if record else None


def pending(store: ControlStore, lease_id: str) -> StopRequest | None:
    """The request aimed at `lease_id`, if any (read without the lock: records are replaced whole)."""
    request = read(store)
    return request if request is not None and request.lease_id == lease_id else None


def request_stop(layout: Layout, job: str, *, actor: str, reason: str = "", grace_seconds: float | None = None,
                 settings: ControlSettings) -> StopRequest | None:
    """Ask the live holder to stop. None when nothing runs (no lease, or a stale one): nothing to stop."""
    grace = settings.stop_grace_seconds if grace_seconds is None else grace_seconds
    store = ControlStore(layout, job)
    with store.critical():
        holder = leases.read(store)
        if holder is None or holder.stale_reason(settings) is not None:
            return None
        request = StopRequest(job=job, lease_id=holder.lease_id, run_id=holder.run_id, requested_at=now_iso(),
                              actor=actor, reason=reason, grace_seconds=grace)
        store.write(RECORD, asdict(request))
    actions.record(layout, job, "stop_request", "requested", actor=actor, run_id=holder.run_id,
                   dagster_run_id=holder.dagster_run_id, runbook_id=holder.runbook_id,
                   details={"reason": reason, "grace_seconds": grace, "lease_id": holder.lease_id})
    return request


def withdraw(layout: Layout, job: str, request: StopRequest, *, actor: str, reason: str = "") -> bool:
    """Remove `request` if it is still pending (a runbook that refuses takes its request back); journaled."""
    store = ControlStore(layout, job)
    with store.critical():
        if read(store) != request:
            return False
        store.remove(RECORD)
    actions.record(layout, job, "stop_request", "withdrawn", actor=actor, run_id=request.run_id,
                   details={"reason": reason, "lease_id": request.lease_id})
    return True
