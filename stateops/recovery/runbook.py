"""The two entry points: plan a runbook (or find the interrupted one it would resume), and run it."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from stateops.control.settings import ControlSettings
from stateops.layout import Layout
from stateops.runbooks import StepEvent

from stateops.recovery import preflight
from stateops.recovery.executor import execute, planned_report
from stateops.recovery.model import RecoveryPlan, RecoveryReport
from stateops.recovery.request import RecoveryRequest
from stateops.recovery.runtime import Runtime, Terminate
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.target import JobTarget


def plan(layout: Layout, target: JobTarget, request: RecoveryRequest, *, settings: RecoverySettings,
         control: ControlSettings, migration: dict | None = None) -> RecoveryPlan:
    """The plan `request` would execute: the interrupted runbook of the same request (resumed), or a new one.
    Refuses with one line (RecoveryRefused, ConfigError); writes nothing. `migration`: mode migrate's changes."""
    resumed = preflight.unfinished(layout, target, request)
    if resumed is not None:
        preflight.check_confirmation(request)
        return replace(resumed, dry_run=request.dry_run,
                       notes=(*resumed.notes, f"resumes runbook {resumed.runbook_id}, interrupted before it ended"))
    return preflight.build_plan(layout, target, request, settings=settings, control=control, migration=migration)


def run(layout: Layout, target: JobTarget, request: RecoveryRequest, runtime: Runtime, *,
        settings: RecoverySettings, control: ControlSettings, on_event: Callable[[StepEvent], None] | None = None,
        terminate: Terminate | None = None, migration: dict | None = None) -> RecoveryReport:
    """Plan, then (unless a dry run) execute: the report says how it ended (succeeded, rolled_back, failed)."""
    chosen = plan(layout, target, request, settings=settings, control=control, migration=migration)
    if request.dry_run:
        return planned_report(chosen)
    return execute(layout, target, chosen, runtime, settings=settings, control=control, on_event=on_event,
                   terminate=terminate)
