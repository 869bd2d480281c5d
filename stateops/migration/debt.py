"""What a partial migration still owes: its boundary, kept in the actions table (action `migration_debt`, recorded
when the migration lands), settled once the watermark has evicted every window or key opened before the boundary
(judged on every read: nothing is written to say so), and shown by `jobs check`, the `state_compatible` asset check (a warning until settled), `jobs describe` and the job
asset's metadata. An aggregation without a window keeps its keys for ever: its debt is never settled, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateops import actions
from stateops.layout import Layout

ACTION = "migration_debt"
OPEN = "open"


@dataclass(frozen=True)
class Debt:
    runbook_id: str
    query_id: str
    boundary: dict[str, Any]
    changes: tuple[str, ...]   # the partial changes, `kind at operator`

    @property
    def settles_at_ms(self) -> int | None:
        return self.boundary.get("settled_at_watermark_ms")

    def settled(self, watermark_ms: int) -> bool:
        return self.settles_at_ms is not None and watermark_ms >= self.settles_at_ms

    def line(self, watermark_ms: int) -> str:
        until = (f"until the watermark reaches {self.settles_at_ms} ms (now {watermark_ms} ms)"
                 if self.settles_at_ms is not None else "for as long as they are kept (no watermark evicts them)")
        return (f"migration {self.runbook_id} is partial ({'; '.join(self.changes)}): complete from batch "
                f"{self.boundary['batch']} (event time {self.boundary['complete_from']}); windows and keys opened "
                f"before it stay incomplete in the state {until}")

    def to_dict(self, watermark_ms: int) -> dict[str, Any]:
        return {"runbook_id": self.runbook_id, "boundary": self.boundary, "changes": list(self.changes),
                "settled": self.settled(watermark_ms), "line": self.line(watermark_ms)}


def record(layout: Layout, job: str, *, runbook_id: str, query_id: str, migration: dict, actor: str) -> None:
    """Keep a partial migration's boundary (once per runbook: a resumed step records nothing twice)."""
    if migration.get("boundary") is None or any(r["runbook_id"] == runbook_id for r in actions.read(layout, job, ACTION)):
        return
    partial = [f"{c['change']} at {c['operator']}" for c in migration["changes"] if c["carried"] == "partial"]
    actions.record(layout, job, ACTION, OPEN, actor=actor, runbook_id=runbook_id,
                   details={"query_id": query_id, "boundary": migration["boundary"], "changes": partial})


def open_debt(layout: Layout, job: str, query_id: str) -> Debt | None:
    """The job's last partial migration, of this checkpoint's query; None when there is none."""
    rows = actions.read(layout, job, ACTION)
    if not rows or rows[-1]["phase"] != OPEN or rows[-1]["details"].get("query_id") != query_id:
        return None
    details = rows[-1]["details"]
    return Debt(rows[-1]["runbook_id"], query_id, details["boundary"], tuple(details["changes"]))


def current(layout: Layout, job: str, checkpoint) -> dict[str, Any] | None:
    """The last partial migration of the job's checkpoint (a stateops.checkpoints.checkpoint.Checkpoint) against the
    watermark its next batch runs with (`settled`, `line`), or None."""
    debt = open_debt(layout, job, checkpoint.query_id())
    if debt is None:
        return None
    return debt.to_dict(checkpoint.next_watermark_ms(checkpoint.latest_committed_batch()))
