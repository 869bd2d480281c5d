"""One attempt at executing (or resuming) a runbook: what the steps (steps.py), the rollback (rollback.py) and
the observation of the restarted run (observation.py) act on, and the job's lease while the runbook holds it.

Below all three, so none imports another for it. The observation only reads: it gets `view()`, which holds no
lease, no journal and no runtime that could launch anything.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from stateops import control
from stateops.control import Lease, current_lease
from stateops.control.fence.holder import HeldLease
from stateops.control.settings import ControlSettings
from stateops.layout import Layout
from stateops.runbooks import Journal

from stateops.checkpoints import archive
from stateops.recovery.model import RecoveryPlan
from stateops.recovery.runtime import Runtime, Terminate
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.target import JobTarget

RUNBOOK = "runbook"  # the journal's entry for the whole runbook, and the mode of the lease the runbook holds


def restarted_run(layout: Layout, job: str, runbook_id: str) -> Lease | None:
    """The lease of a run the runbook started (live or stale), if such a run holds the job's lease."""
    holder = current_lease(layout, job)
    if holder is not None and holder.runbook_id == runbook_id and holder.mode != RUNBOOK:
        return holder
    return None


@dataclass(frozen=True)
class AttemptView:
    """What watching and judging the restarted run may use: the attempt's facts and two reads (a deep audit of
    one batch, the lease of the run the runbook started)."""

    layout: Layout
    target: JobTarget
    plan: RecoveryPlan
    settings: RecoverySettings
    control_settings: ControlSettings
    audit: Callable[[str, int], dict[str, Any]]

    def restarted_run(self) -> Lease | None:
        return restarted_run(self.layout, self.target.job, self.plan.runbook_id)


@dataclass
class Attempt:
    """One attempt at executing (or resuming) a runbook (see the module doc)."""

    layout: Layout
    target: JobTarget
    plan: RecoveryPlan
    runtime: Runtime
    settings: RecoverySettings
    control_settings: ControlSettings
    journal: Journal
    terminate: Terminate | None = None
    lease: HeldLease | None = None

    @property
    def directory(self) -> str:
        """The runbook's own directory: its archive, plan, journal and report."""
        return self.plan.archive["path"]

    @property
    def archived(self) -> str:
        """The archived checkpoint (its copy, or the moved original)."""
        return posixpath.join(self.directory, archive.CHECKPOINT)

    def manifest(self) -> dict[str, Any]:
        """The manifest of the runbook's own archive."""
        return archive.read_json(posixpath.join(self.directory, archive.MANIFEST))

    def hold_lease(self) -> None:
        """Hold the job's lease while files change (takes over the stale lease of a crashed attempt)."""
        if self.lease is None or self.lease.lost is not None:
            self.lease = control.acquire(self.layout, self.target.job, run_id=f"runbook-{self.plan.runbook_id}",
                                         runbook_id=self.plan.runbook_id, actor=self.plan.actor, mode=RUNBOOK,
                                         settings=self.control_settings)
        self.lease.ensure_held()

    def release_lease(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def restarted_run(self) -> Lease | None:
        return restarted_run(self.layout, self.target.job, self.plan.runbook_id)

    def view(self) -> AttemptView:
        """The read-only view the observation of the restarted run gets."""
        return AttemptView(self.layout, self.target, self.plan, self.settings, self.control_settings,
                           self.runtime.audit)
