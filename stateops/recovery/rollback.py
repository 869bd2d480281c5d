"""The rollback: what a runbook does when it fails after it stopped the job, to leave the job as it ran.

After the archive is complete: the failed attempt's checkpoint moves into the archive (`failed-attempt/`), the
archived one is copied back, the archived overrides return with a new sink epoch, the sink is restored to the
archived version, the job restarts as it ran and is verified. Before the archive nothing was changed: the job
is only restarted, if the runbook had stopped it. A rollback that fails itself leaves the maintenance lock held.

Apart from executor.py so that undoing a runbook reads apart from carrying it out: the executor decides that a
rollback is due and journals each step it runs (`run_steps`, so an interrupted rollback resumes too); the
steps here reuse the forward ones' primitives (steps.py) and the verification (observation.py).
"""
from __future__ import annotations

import posixpath
import time
from functools import partial
from typing import Any, Callable

from stateops import sinkstate
from stateops.storage import copies
from stateops.control import overrides
from stateops.errors import error_line

from stateops.recovery import observation, steps, verify
from stateops.checkpoints import archive
from stateops.recovery.model import (ARCHIVE, ROLLBACK_RESTART, ROLLBACK_SINK, ROLLBACK_STEPS, ROLLBACK_STOP,
                                     ROLLBACK_VERIFY, STOP)
from stateops.recovery.attempt import Attempt
from stateops.recovery.steps import StepFailed

ROLLBACK = "rollback"  # the journal's entry for the rollback as a whole (its steps are model.ROLLBACK_STEPS)


def handlers(attempt: Attempt) -> dict[str, Callable[[], dict[str, Any]]]:
    """The rollback's steps by name, each acting on `attempt`."""
    return dict(zip(ROLLBACK_STEPS, (partial(steps.stop, attempt, "rollback"), partial(_checkpoint, attempt),
                                     partial(_settings, attempt), partial(_sink, attempt),
                                     partial(_restart, attempt), partial(_verify, attempt))))


MIGRATION_NOT_RESTARTED = ("the old state and what it means are back, and the job's changed query does not fit them, "
                           "so nothing was restarted: run the query that wrote the state, or fix what failed and "
                           "migrate again")


def run_steps(attempt: Attempt, step: Callable[[str], Any]) -> tuple[str, dict[str, Any]]:
    """Roll back the attempt (its journal has `rollback started` with the reason), each step through `step`
    (the executor's: journaled, skipped when done): ("rolled_back" or "failed", what the report says of it)."""
    journal = attempt.journal
    reason = journal.details(ROLLBACK, "started").get("reason")
    archived = journal.phase(ARCHIVE) == "done"
    names = ROLLBACK_STEPS if archived else (ROLLBACK_STOP, ROLLBACK_RESTART)
    if journal.phase(STOP) != "done" and not archived:
        journal.record(ROLLBACK, "done", {"reason": reason, "note": "nothing was stopped or changed"})
        return "rolled_back", {"reason": reason, "note": "nothing was stopped or changed"}
    # A migration rolled back puts the old query's state back, which the job's changed query does not fit: no restart
    note = MIGRATION_NOT_RESTARTED if attempt.plan.mode == "migrate" else None
    try:
        for name in names:
            if name == ROLLBACK_RESTART and journal.details(STOP).get("how") in (
                    "nothing was running", "no live holder") and not archived:
                continue
            if note and name in (ROLLBACK_RESTART, ROLLBACK_VERIFY):
                continue
            step(name)
    except Exception as err:  # noqa: BLE001
        attempt.release_lease()
        journal.record(ROLLBACK, "failed", {"error": error_line(err)})
        return "failed", {"reason": reason, "error": error_line(err)}
    journal.record(ROLLBACK, "done", {"reason": reason, **({"note": note} if note else {})})
    return "rolled_back", {"reason": reason, "verification": journal.details(ROLLBACK_VERIFY).get("verification"),
                           **({"note": note} if note else {})}


def _checkpoint(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    first = posixpath.join(attempt.directory, archive.FAILED)
    # an interrupted rollback may have moved the failed attempt already: a second one never overwrites it
    failed = posixpath.join(attempt.directory, f"{archive.FAILED}-{int(time.time())}") if copies.tree_size(
        first) else first
    steps.put_back(attempt, attempt.plan.runbook_id, failed_to=failed)
    return {"failed_attempt": next((p for p in (first, failed) if copies.tree_size(p)), None)}


def _settings(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    kept = attempt.manifest()["overrides"]
    epoch = sinkstate.next_epoch(attempt.layout, attempt.target.job)
    wanted = {s: kept.get(s) for s in overrides.SETTINGS}
    wanted.update({overrides.SINK_EPOCH: str(epoch), overrides.SINK_REPLAY: None,
                   overrides.STATE_FORMATS: kept.get(overrides.STATE_FORMATS)})  # a rebuild's or switch's
    changes = [c for c in (steps.set_override(attempt, s, v) for s, v in wanted.items()) if c]
    return {"changes": changes, "sink_epoch": epoch}


def _sink(attempt: Attempt) -> dict[str, Any]:
    return steps.align(attempt, attempt.journal.details(ROLLBACK_SINK, "started").get("target_version"))


def _restart(attempt: Attempt) -> dict[str, Any]:
    if attempt.journal.phase(ROLLBACK_RESTART) == "started" and attempt.plan.restart_mode == "continuous":
        if attempt.restarted_run() is not None:
            return {**steps.start_state(attempt), "how": "continuous", "note": "launched before the interruption"}
    return steps.launch(attempt)


def _verify(attempt: Attempt) -> dict[str, Any]:
    kept = attempt.manifest() or {}
    details = observation.verification(attempt.view(), attempt.journal.details(ROLLBACK_RESTART),
                                       kept.get("audit_before"), observation.audited_partitions(kept.get("audit_before")),
                                       None)
    if not details["verification"]["ok"]:
        raise StepFailed(f"the query did not run healthily after the rollback either: "
                         f"{verify.failures(details['verification'])}", details)
    return details
