"""What `stateops jobs adopt NAME --confirm` writes, and reading it back.

The record (JSON) goes to the overrides table (setting `adoption`, with its history, as every runbook setting)
and to the job's control folder (`adoption`), and the `adopt` action is journaled with the whole plan. Readers:
the sink (stateops.sinkstate: batches of the adopted query up to `written_through` are in the table already) and
the dead-letter query (its starting point).

The dead-letter query is StateOps' own and new to the job: started from nothing, it would read every file or
record the old query ever read. Its starting point is the old query's last committed batch instead:
- a Kafka job: the offsets of that batch per topic, given to Spark's Kafka source as `startingOffsets` (read by
  Spark on a new checkpoint only);
- a file job: a dead-letter checkpoint whose file source log already holds every file the old query read up to
  that batch, in Spark's own log format (`sources/<i>/0`: `v1`, then one entry a line), one committed batch with
  that log offset. Spark's file source takes a file in its log as seen, so the first batch reads only new files.
"""
from __future__ import annotations

import json
import posixpath
import uuid
from typing import Any

from stateops import actions
from stateops.checkpoint import Checkpoint
from stateops.control import overrides
from stateops.control.overrides import WatermarkBounds
from stateops.control.records import now_iso
from stateops.control.store import ControlStore
from stateops.layout import Layout
from stateops.storage import exists, filesystem, names

from stateops.adoption.evidence import FILES, KAFKA
from stateops.adoption.plan import AdoptionPlan

RECORD = "adoption"
ACTION = "adopt"


def adoption(layout: Layout, job: str) -> dict[str, Any] | None:
    """The job's adoption record in force, None when it was never adopted."""
    found = overrides.in_force(layout, job).get(overrides.ADOPTION)
    return json.loads(found.value) if found is not None else None


def deadletter_start(plan: AdoptionPlan) -> dict[str, Any]:
    """The dead-letter query's starting point: Kafka offsets per input, or the files its log will hold."""
    if plan.sources and plan.sources[0].kind == KAFKA:
        return {"kind": KAFKA, "offsets": {s.input: s.offset for s in plan.sources}}
    return {"kind": FILES, "files": {s.input: s.files_read for s in plan.sources}}


def seed_deadletter_checkpoint(path: str, plan: AdoptionPlan, checkpoint: Checkpoint, inputs: list[str]) -> int:
    """Write the dead-letter query's checkpoint at the old query's last committed batch (the module doc): one
    file-source log per input, in the dead-letter query's source order (`inputs`), holding the files the old
    query read by then. Returns the files written into the logs."""
    by_input = {s.input: s for s in plan.sources}
    fs, root = filesystem(path)
    written = 0
    for index, name in enumerate(inputs):
        source = by_input[name]
        last = source.offset.get("logOffset") if isinstance(source.offset, dict) else None
        entries = [{"path": e["path"], "timestamp": e["timestamp"], "batchId": 0}
                   for e in checkpoint.source_log(source.index).values()
                   if last is not None and int(e["batchId"]) <= int(last)]
        _write(fs, posixpath.join(root, "sources", str(index), "0"),
               "v1\n" + "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries))
        written += len(entries)
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
    _write(fs, posixpath.join(root, "offsets", "0"),
           "v1\n" + json.dumps(metadata) + "\n" + "".join('{"logOffset":0}\n' for _ in inputs))
    _write(fs, posixpath.join(root, "commits", "0"), 'v1\n{"nextBatchWatermarkMs":0}\n')
    _write(fs, posixpath.join(root, "metadata"), json.dumps({"id": str(uuid.uuid4())}) + "\n")
    return written


def _write(fs, path: str, text: str) -> None:
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    with fs.open(path, "w") as handle:
        handle.write(text)


def deadletter_in_use(path: str) -> bool:
    """The dead-letter checkpoint holds a batch already (the job ran under StateOps, or was adopted)."""
    return exists(path) and bool(names(posixpath.join(path, "offsets")) or ())


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
