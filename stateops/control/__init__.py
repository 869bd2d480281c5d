"""The control plane of a job: one writer at a time, and the levers a runbook pulls.

    fence/       one writer per job: the lease (who runs the job's queries; fence.holder.acquire / HeldLease: taken
                 atomically with the maintenance lock checked, heartbeated, fenced, released in `finally`; stale
                 ones taken over), the JVM's revocations, the fenced writes and the commit points' settings
    stop         a request to the holder to stop gracefully (request_stop, wait_released)
    maintenance  a runbook's lock: no run starts unless it presents the runbook id
    overrides    watermark delay / shuffle partitions per job, with history (ops table `overrides`)
    status       all of it as plain data, with the checkpoint's latest batch and watermark

Records live in `ops/<job>/control/` of the control home, under one lock, both from the storage layer
(store.py: local or POSIX shared storage, or S3); the journal of what happened is the `actions` ops table
(stateops.actions). No Spark, no Dagster here.
"""
from stateops.control.fence.holder import HeldLease, acquire, check_can_start, start_blocker, wait_released
from stateops.control.fence.lease import Lease, LeaseHeldError, LeaseLostError, current as current_lease
from stateops.control.maintenance import MaintenanceLock, MaintenanceLockedError
from stateops.control.overrides import Override, WatermarkBounds
from stateops.control.process import default_actor
from stateops.control.settings import ControlSettings
from stateops.control.status import job_status
from stateops.control.stop import StopRequest, request_stop
from stateops.control.store import UnsupportedStorageError

__all__ = [
    "ControlSettings", "HeldLease", "Lease", "LeaseHeldError", "LeaseLostError", "MaintenanceLock",
    "MaintenanceLockedError", "Override", "StopRequest", "UnsupportedStorageError", "WatermarkBounds", "acquire",
    "check_can_start", "current_lease", "default_actor", "job_status", "request_stop", "start_blocker",
    "wait_released",
]
