"""The mark a moved home keeps: `MOVED.json` at its root, written once when a move completed (the only change a
move makes to the old home), naming where the home went. Every entry point (a CLI command, the code location's load,
a Dagster run or tick: stateops.jobs.definition.environment) refuses a moved home in one line naming the new one, so
no run, audit or runbook acts on the old copy; until the user deletes it, the old home is the rollback.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from stateops.errors import StateOpsError
from stateops.storage import can_lock, records_at

RECORD = "MOVED"  # MOVED.json


@dataclass(frozen=True)
class Moved:
    home: str      # the old home, as the move named it
    to: str        # the new home
    move_id: str
    at: str        # when the move completed


class HomeMovedError(StateOpsError):
    """A command was asked to act on a home that was moved elsewhere."""

    def __init__(self, moved: Moved, variable: str):
        self.moved = moved
        super().__init__(
            f"{variable} {moved.home} was moved to {moved.to} at {moved.at} (move {moved.move_id}); nothing is done "
            f"here. Fix: set {variable}={moved.to} (Dagster: the code location's STATEOPS_HOME, or build_defs(home="
            f"\"{moved.to}\")); delete {moved.home} once you no longer need it as the rollback")


def moved(home: str) -> Moved | None:
    """Where `home` was moved to, None when it was not (or it is on a storage that holds no records)."""
    if not can_lock(home):
        return None
    found = records_at(home).read(RECORD)
    return Moved(**found) if found else None


def refuse_if_moved(home: str, variable: str = "STATEOPS_HOME") -> None:
    found = moved(home)
    if found is not None:
        raise HomeMovedError(found, variable)


def mark(home: str, to: str, move_id: str, at: str) -> None:
    """Write the mark (once: a mark already there from this move is kept as it is)."""
    records_at(home).create(RECORD, asdict(Moved(home, to, move_id, at)))
