"""The executor: applies a confirmed plan step by step, journaled, resumable, rolling back on failure.

Order: intent (plan.json + journal) -> maintenance lock -> the plan's steps -> finish (report.json, lock
released). Each step is journaled `started` before it acts and `done` after; its `done` details carry what
later steps need, so an attempt that resumes after a crash reads them back instead of acting again:

- a step journaled `done` is never run again;
- a step journaled `started` only was interrupted: idempotent steps run again (they complete what was
  begun); the one that is not (the offline repartition) is checked against the checkpoint: complete
  counts as done, half-done rolls back;
- a failure after the archive is complete (restart throws, verification fails, a step raises) rolls
  back: the failed attempt's checkpoint moves into the archive (`failed-attempt/`), the archived one is
  copied back, the archived overrides return with a new sink epoch, the sink is restored to the archived
  version, the job restarts as it ran, and the report says why. A failure before the archive changed
  nothing: the job is restarted as it ran, if the runbook had stopped it.

While it changes files the runbook holds the job's lease (so a zombie holder is fenced off from the sink)
and, from start to end, the maintenance lock (so no run starts but its own restart).

This module is the order and the bookkeeping: the run loop, the dispatch of each step through the runbook
engine (stateops.runbooks: journal, heartbeat lock, the lost-lock rule, resume), the maintenance lock and the
report. What the steps do is in steps.py, the rollback's own steps in rollback.py, and how the restarted run is
watched and judged in observation.py.
"""
from __future__ import annotations

import posixpath
from datetime import datetime, timezone
from typing import Any, Callable

from stateops.control import maintenance
from stateops.clock import now_iso
from stateops.control.settings import ControlSettings
from stateops.errors import error_line
from stateops.layout import Layout
from stateops.runbooks import StepEvent, run_step

from stateops.recovery import rollback, steps
from stateops.checkpoints import archive
from stateops.recovery.journal import recovery_journal
from stateops.recovery.model import (ALIGN_SINK, AUDIT_BEFORE, FINISH, ROLLBACK_SINK, ROLLBACK_VERIFY, STOP, VERIFY,
                                     RecoveryPlan, RecoveryRefused, RecoveryReport)
from stateops.recovery.rollback import ROLLBACK
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.runtime import Runtime, Terminate
from stateops.recovery.attempt import RUNBOOK, Attempt
from stateops.recovery.target import JobTarget


class Executor:
    def __init__(self, layout: Layout, target: JobTarget, plan: RecoveryPlan, runtime: Runtime, *,
                 settings: RecoverySettings, control: ControlSettings,
                 on_event: Callable[[StepEvent], None] | None = None, terminate: Terminate | None = None):
        self.layout, self.target, self.plan = layout, target, plan
        self.directory = plan.archive["path"]
        self.journal = recovery_journal(layout, target.job, plan.runbook_id, self.directory, plan.actor, on_event)
        self.attempt = Attempt(layout, target, plan, runtime, settings, control, self.journal, terminate)
        self.handlers = {**steps.handlers(self.attempt), **rollback.handlers(self.attempt)}

    def run(self) -> RecoveryReport:
        with self.journal.held({"actor": self.plan.actor}):
            started = self._intent()
            outcome, error, rolled_back = "succeeded", None, None
            try:
                if self.journal.phase(ROLLBACK) is None:
                    try:
                        for step in self.plan.steps:
                            self._step(step.name, step.idempotent)
                    except RecoveryRefused as refusal:
                        if self.journal.phase(STOP) != "done":
                            raise  # refused before anything was stopped or changed
                        error = str(refusal)
                        self.journal.record(ROLLBACK, "started", {"reason": error})
                    except Exception as err:  # noqa: BLE001 (every failure ends in a rollback and a report)
                        error = error_line(err)
                        self.journal.record(ROLLBACK, "started", {"reason": error})
                if self.journal.phase(ROLLBACK) is not None:
                    error = error or self.journal.details(ROLLBACK, "started").get("reason")
                    outcome, rolled_back = rollback.run_steps(self.attempt, self._step)
            except RecoveryRefused as err:
                self._refused(err)
                raise
            finally:
                self.attempt.release_lease()
            return self._finish(outcome, error, rolled_back, started)

    def _intent(self) -> str:
        if self.journal.phase(RUNBOOK) is None:
            archive.write_json(posixpath.join(self.directory, archive.PLAN), self.plan.to_dict())
            self.journal.record(RUNBOOK, "started", {"plan": self.plan.to_dict()})
        maintenance.acquire(self.layout, self.target.job, runbook_id=self.plan.runbook_id, actor=self.plan.actor,
                            reason=f"runbook {self.plan.mode}: {self.plan.reason}")
        return self.journal.started_at(RUNBOOK)

    def _step(self, name: str, idempotent: bool = True) -> dict[str, Any]:
        """One step through the engine: skipped when done, judged by steps.completed when interrupted and not
        idempotent, with its intent journaled before it acts."""
        return run_step(self.journal, name, self.handlers[name], idempotent=idempotent,
                        completed=lambda: steps.completed(self.attempt, name),
                        intent=lambda: self._intent_details(name))

    def _intent_details(self, name: str) -> dict[str, Any]:
        if name in (ALIGN_SINK, ROLLBACK_SINK):
            return {"target_version": steps.align_target(self.attempt, rollback=name != ALIGN_SINK)}
        return {}

    def _refused(self, err: RecoveryRefused) -> None:
        """A refusal changed nothing: journal it and release the lock."""
        self.journal.record(RUNBOOK, "refused", {"error": str(err)})
        maintenance.release(self.layout, self.target.job, runbook_id=self.plan.runbook_id, actor=self.plan.actor)

    def _finish(self, outcome: str, error: str | None, rolled_back: dict | None, started: str) -> RecoveryReport:
        report = RecoveryReport(
            runbook_id=self.plan.runbook_id, job=self.target.job, mode=self.plan.mode, outcome=outcome,
            plan=self.plan.to_dict(), archive_path=self.directory,
            audit_before=self.journal.details(AUDIT_BEFORE).get("audit"),
            audit_after=self.journal.details(VERIFY).get("audit_after") or self.journal.details(
                ROLLBACK_VERIFY).get("audit_after"),
            verification=self.journal.details(VERIFY).get("verification") or self.journal.details(
                VERIFY, "failed").get("verification"),
            rollback=rolled_back, error=error, notes=list(self.plan.notes), started_at=started, finished_at=now_iso())
        if outcome != "failed":
            maintenance.release(self.layout, self.target.job, runbook_id=self.plan.runbook_id, actor=self.plan.actor)
        else:
            report.notes.append(f"the maintenance lock stays held so that nothing starts on this state; after "
                                f"fixing it: stateops jobs unlock {self.target.job} --runbook-id "
                                f"{self.plan.runbook_id}")
        self.journal.record(FINISH, "done", {"outcome": outcome, "error": error})
        report.steps = list(self.journal.entries)
        try:
            archive.write_json(posixpath.join(self.directory, archive.REPORT), report.to_dict())
        except OSError as err:  # a full archive disk must not hide the outcome: the journal has it too
            report.notes.append(f"{archive.REPORT} could not be written next to the archive: {err}")
        return report


def execute(layout: Layout, target: JobTarget, plan: RecoveryPlan, runtime: Runtime, *,
            settings: RecoverySettings, control: ControlSettings,
            on_event: Callable[[StepEvent], None] | None = None,
            terminate: Terminate | None = None) -> RecoveryReport:
    """Apply a confirmed plan (or resume it): see the module doc."""
    return Executor(layout, target, plan, runtime, settings=settings, control=control, on_event=on_event,
                    terminate=terminate).run()


def planned_report(plan: RecoveryPlan) -> RecoveryReport:
    """The report of a dry run: the plan, nothing done."""
    return RecoveryReport(runbook_id=plan.runbook_id, job=plan.job, mode=plan.mode, outcome="planned",
                          plan=plan.to_dict(), notes=list(plan.notes),
                          started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
