"""Retention: bounded storage that never breaks a restart. Plan, then apply; no Dagster, no Spark.

    scope        what is looked after (jobs' paths, roots guard, policies, Spark's minBatchesToRetain)
    inventory    everything under the roots, from one listing per root
    planner      inventory + policies + the jobs' control state -> Plan (data)
    executor     applies a Plan under the per-root lock, re-checking and journaling every item
    tables       Delta maintenance of ops and dead-letter tables (vacuum, log, rows, compaction)
    history      the `storage` ops table: storage and plans over time

    inv = take_inventory(scope); plan = make_plan(scope, inv); report = apply(scope, plan, actor=...)
"""
from __future__ import annotations

from datetime import datetime

from stateops.checkpoints.archive import archive_copy
from stateops.retention import archives
from stateops.retention.executor import Executor
from stateops.retention.inventory import Inventory, MissingRootError, take as take_inventory
from stateops.retention.lock import RetentionLockedError
from stateops.retention.model import ApplyReport, Item, ItemResult, Plan
from stateops.retention.planner import make_plan as _make_plan, read_controls
from stateops.retention.policy import JobPolicy, OpsTablePolicy, Policies, load_policies
from stateops.retention.scope import JobArea, Scope


def make_plan(scope: Scope, inventory: Inventory | None = None, now: datetime | None = None) -> Plan:
    """The plan for `scope` now (read-only: lists, reads small files, verifies the newest archives)."""
    return _make_plan(inventory or take_inventory(scope), read_controls(scope), archives.verify, now)


def apply(scope: Scope, plan: Plan, *, actor: str, run_id: str | None = None, fresh: bool = False) -> ApplyReport:
    """Apply `plan` (RetentionLockedError while another run holds a root). Each item is admitted only as the
    planner makes it now (retention.admission): pass fresh=True when `plan` is what make_plan just returned,
    so it is not made twice; any other plan (saved, old, edited) is checked against a new one."""
    return Executor(scope, plan, actor=actor, verify=archives.verify, archive=archive_copy,
                    replan=lambda: make_plan(scope), current=plan if fresh else None, run_id=run_id).apply()


__all__ = ["ApplyReport", "Inventory", "Item", "ItemResult", "JobArea", "JobPolicy", "MissingRootError",
           "OpsTablePolicy", "Plan", "Policies", "RetentionLockedError", "Scope", "apply", "load_policies",
           "make_plan", "take_inventory"]
