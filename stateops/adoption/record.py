"""What `stateops jobs adopt NAME --confirm` writes, and reading it back.

The record (JSON) goes to the overrides table (setting `adoption`, with its history, as every runbook setting)
and to the job's control folder (`adoption`), and the `adopt` action is journaled with the whole plan. Reader:
the sink (stateops.sinkstate: batches of the adopted query up to `written_through` are in the table already).

Dead letters are new to the job: the stateful query judges the lines of the batches it runs under StateOps
(stateops.jobs.runtime.deadletters), so they start where it goes on, after the old query's last committed batch:
the plan says where (`deadletter_start`: the offsets of that batch per topic, or the files read by then).
"""
from __future__ import annotations

import json
from typing import Any

from stateops import actions
from stateops.control import overrides
from stateops.control.overrides import WatermarkBounds
from stateops.clock import now_iso
from stateops.control.store import ControlStore
from stateops.layout import Layout

from stateops.adoption.evidence import FILES, KAFKA
from stateops.adoption.plan import AdoptionPlan

RECORD = "adoption"
ACTION = "adopt"


def adoption(layout: Layout, job: str) -> dict[str, Any] | None:
    """The job's adoption record in force, None when it was never adopted."""
    found = overrides.in_force(layout, job).get(overrides.ADOPTION)
    return json.loads(found.value) if found is not None else None


def deadletter_start(plan: AdoptionPlan) -> dict[str, Any]:
    """Where dead letters start (the module doc): Kafka offsets per input, or the files the old query read."""
    if plan.sources and plan.sources[0].kind == KAFKA:
        return {"kind": KAFKA, "offsets": {s.input: s.offset for s in plan.sources}}
    return {"kind": FILES, "files": {s.input: s.files_read for s in plan.sources}}


def record(layout: Layout, plan: AdoptionPlan, *, actor: str, bounds: WatermarkBounds,
           deadletter: dict[str, Any]) -> dict[str, Any]:
    """Journal the adoption: the overrides table (setting `adoption`), the control record, the `adopt` action."""
    value = {"checkpoint": plan.checkpoint, "query_id": plan.query_id, "adopted_at": now_iso(), "actor": actor,
             "last_committed": plan.batches.last_committed, "batch_in_flight": plan.batches.in_flight,
             "in_flight_output": plan.in_flight_output, "written_through": plan.written_through,
             "replay_last_batch": plan.replay_last_batch, "sink_table": plan.sink.table if plan.sink else None,
             "txn_app_id": plan.sink.writer if plan.sink else None, "deadletter": deadletter}
    overrides.set_override(layout, plan.job, overrides.ADOPTION, json.dumps(value, sort_keys=True), bounds=bounds,
                           reason=f"adopted {plan.checkpoint} at batch {plan.batches.last_committed}", actor=actor)
    store = ControlStore(layout, plan.job)
    with store.critical():
        store.write(RECORD, value)
    actions.record(layout, plan.job, ACTION, "done", actor=actor, details={**plan.to_json(), "adopted": value})
    return value
