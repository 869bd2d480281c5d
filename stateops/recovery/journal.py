"""The recovery runbook's journal: the runbook engine's (stateops.runbooks), in the runbook's folder next to its
archive, mirrored into the `actions` ops table (action `recovery.<step>`) so that the audit trail of a job shows its
runbooks among its other control actions.

Why not the job's maintenance lock (control plane), which the runbook holds from its intent to its end, to say which
process executes it: it does not expire and deliberately outlives a crashed runbook (resuming relies on it), so it
cannot tell a live runbook from a dead one, which is the one question the engine's heartbeat lock answers.
"""
from __future__ import annotations

from typing import Callable

from stateops import actions
from stateops.layout import Layout
from stateops.runbooks import Journal, StepEvent


def recovery_journal(layout: Layout, job: str, runbook_id: str, directory: str, actor: str,
                     on_event: Callable[[StepEvent], None] | None = None) -> Journal:
    """The journal of runbook `runbook_id` of `job` in `directory`, mirrored into `actions`, reported to
    `on_event`."""

    def mirror(event: StepEvent) -> None:
        actions.record(layout, job, f"recovery.{event.step}", event.phase, actor=actor, runbook_id=runbook_id,
                       details=event.details)

    return Journal(directory, kind="runbook", runbook_id=runbook_id, job=job, title=f"runbook {runbook_id} of {job}",
                   fix=f"wait for it to end (stateops jobs status {job}; stateops archives show {runbook_id}), then "
                       "run it again to resume it", mirror=mirror, report=on_event)
