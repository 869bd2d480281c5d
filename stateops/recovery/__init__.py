"""Guarded state recovery: a runbook that stops a job, archives its checkpoint, adjusts, restarts, verifies,
and rolls back by itself when the restart is unhealthy. No Dagster; no Spark (the `Runtime` interface is
implemented by the jobs layer).

    plan(layout, target, request)                      -> RecoveryPlan (preflight; writes nothing)
    run(layout, target, request, runtime, on_event=, terminate=) -> RecoveryReport
    archives (stateops.checkpoints.archive): list_archives(root), summary(root, id), verify(root, id)

Modes: adjust (watermark delay), repartition (state partitions, offline), rebuild (fresh checkpoint,
replaying the retained input), rewind (back to batch N), restore (an archive), restart (as it ran),
switch-store (the state into the other store, offline, nothing replayed). See docs/operations.md, Recovery.
"""
from stateops.recovery.model import MODES, RecoveryPlan, RecoveryRefused, RecoveryReport
from stateops.recovery.request import RecoveryRequest, RequestRefused
from stateops.recovery.runbook import plan, run
from stateops.recovery.runtime import Runtime, Terminate
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.target import JobTarget

__all__ = ["JobTarget", "MODES", "RecoveryPlan", "RecoveryRefused", "RecoveryReport",
           "RecoveryRequest", "RecoverySettings", "RequestRefused", "Runtime", "Terminate", "plan", "run"]
