"""The step loop every runbook runs its steps through: journaled, resumable, with the same fault points.

  - a step journaled `done` is never run again: the report hears it `skipped`, its `done` details are returned
    (what later steps and a resumed attempt read back);
  - a step journaled `started` only was interrupted: an idempotent step runs again (it completes what was begun);
    one that is not asks its `completed` check (complete counts as done; half-done raises, which the runbook
    turns into its rollback);
  - otherwise `started` (with the step's intent, what it is about to do), the step's handler, then `done` with what
    it returned, or `failed` with the error's line and re-raised;
  - `<kind>.before_done` fires between the act and its `done` entry, `<kind>.after_step` after it (journal.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from stateops.errors import error_line
from stateops.faults import fault_point

from stateops.runbooks.journal import Journal

Handler = Callable[[], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Step:
    """A step of a runbook: its name (the journal's and the fault points'), what acts it, and what its `started`
    entry says it is about to do."""

    name: str
    act: Handler
    idempotent: bool = True
    intent: Callable[[], dict[str, Any]] | None = None


def run_step(journal: Journal, name: str, act: Handler, *, idempotent: bool = True,
             completed: Callable[[], bool] | None = None,
             intent: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run one step by the rules above; the details of its `done` entry. `intent` gives the details of its
    `started` entry, asked just before it is journaled."""
    phase = journal.phase(name)
    if phase == "done":
        journal.replayed(name)
        return journal.details(name)
    if phase == "started" and not idempotent and completed is not None and completed():
        return journal.record(name, "done", {"detected": "completed before the interruption"}).details
    journal.record(name, "started", intent() if intent is not None else None)
    try:
        details = act() or {}
    except Exception as err:
        journal.record(name, "failed", {"error": error_line(err), **getattr(err, "details", {})})
        raise
    fault_point(f"{journal.kind}.before_done", job=journal.job, step=name)
    return journal.record(name, "done", details).details


def run_steps(journal: Journal, steps: Sequence[Step]) -> None:
    """Every step in order (a table of handlers: the runbooks that need no per-step checks)."""
    for step in steps:
        run_step(journal, step.name, step.act, idempotent=step.idempotent, intent=step.intent)
