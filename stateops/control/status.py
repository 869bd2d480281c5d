"""A job's control state as plain data, without a JVM: lease (live or stale), latest committed batch and
its watermark (from the checkpoint), pending stop request, maintenance lock, overrides in force."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import StateOpsError
from stateops.layout import Layout

from stateops.control.fence import lease as leases
from stateops.control import maintenance, overrides, stop
from stateops.control.settings import ControlSettings
from stateops.control.store import ControlStore


def checkpoint_summary(path: str) -> dict[str, Any]:
    """Latest committed batch and the watermark in force during it; None for both before the first commit."""
    summary: dict[str, Any] = {"path": path, "latest_committed_batch": None, "watermark": None}
    try:
        checkpoint = Checkpoint.open(path)
        batch = checkpoint.latest_committed_batch()
        watermark = checkpoint.watermark(batch)
    except (StateOpsError, OSError, ValueError):
        return summary
    summary.update(latest_committed_batch=batch, watermark=watermark.isoformat() if watermark else None)
    return summary


def job_status(layout: Layout, job: str, checkpoint: str, settings: ControlSettings,
               forced: Mapping[str, overrides.Override] | None = None) -> dict[str, Any]:
    """state: running (live lease), stale (a lease nobody renews: the next run takes it over), idle.
    `forced`: the job's overrides in force, when the caller read them for every job at once
    (overrides.in_force_by_job); read here otherwise."""
    store = ControlStore(layout, job)
    holder = leases.read(store)
    lease = None
    state = "idle"
    if holder is not None:
        reason = holder.stale_reason(settings)
        state = "stale" if reason else "running"
        lease = {**holder.to_dict(), "heartbeat_age_seconds": round(holder.heartbeat_age(), 1),
                 "stale": reason is not None, "stale_reason": reason}
    request = stop.pending(store, holder.lease_id) if holder is not None else None
    lock = maintenance.read(store)
    return {
        "job": job,
        "state": state,
        "lease": lease,
        "checkpoint": checkpoint_summary(checkpoint),
        "stop_request": asdict(request) if request else None,
        "maintenance_lock": asdict(lock) if lock else None,
        "overrides": {name: change.contract() for name, change in
                      (overrides.in_force(layout, job) if forced is None else forced).items()},
    }
