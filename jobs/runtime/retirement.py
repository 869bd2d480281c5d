"""Retiring the dead-letter query of a home StateOps ran with two queries per job, without losing or repeating a line.

Until the stateful query collected its own dead letters (stateops.jobs.runtime.deadletters), a second query read every
line again into the dead-letter table, with its own checkpoint (`checkpoints/_deadletter/<job>`). The two never stood
at the same point of the input. At the first run of the job without it, under the job's lease and before the query
starts, the input the old dead-letter query judged (its batches up to the newest one the table holds: the batch it
committed, or one it wrote and did not commit) is set against the input the stateful query committed:
- **behind**: input the stateful query committed and the old query never judged: judged now, by a batch read of those
  files or Kafka offsets with the same parser and rules, written to the table once (its own Delta transaction);
- **ahead**: input the old query judged and the stateful query has not committed: the stateful query reads it again;
  it goes into the ledger (stateops.jobs.runtime.deadletters.Ledger), so its dead letters are not written twice.
Then the retirement is recorded (the job's control record `deadletter_retirement`, read by every later run for the
ledger, and the `deadletter_retired` action), and the old checkpoint is archived where retention archives checkpoints
no job owns (`ops/_orphans/archives/deadletter-<job>-<query id>`: copied, verified against its manifest; kept and
aged as those are; not the job's own archive root, whose archives a restore puts in place of the job's checkpoint)
and removed. Each step can be done again: a run killed
between them does it again (the batch write is skipped by its transaction, a recorded retirement only archives).
"""
from __future__ import annotations

import logging
import posixpath
from datetime import datetime, timezone
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from stateops import actions, control
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import HeldLease
from stateops.control.store import ControlStore
from stateops.delta import write_batch
from stateops.errors import StateOpsError
from stateops.faults import fault_point
from stateops.layout import Layout
from stateops.checkpoints.archive import MANIFEST, archive_copy, read_json, verify_folder
from stateops.retention.scope import ORPHANS
from stateops.sinkstate import app_id, transaction_version
from stateops.storage import comparable, exists
from stateops.storage.copies import remove_tree

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime.deadletters import as_table
from stateops.jobs.runtime.sources import file_lines, invalid_rows, kafka_lines

log = logging.getLogger(__name__)

RECORD = "deadletter_retirement"
ACTION = "deadletter_retired"
EARLIEST = -2  # Spark's Kafka source: a partition's earliest offset


def retire_deadletter_query(spark: SparkSession, spec: JobSpec, layout: Layout, *, run_id: str,
                            lease: HeldLease) -> dict[str, Any] | None:
    """Retire the job's old dead-letter query, if it has one (the module doc); returns the input it judged ahead of
    the stateful query (`files`, `offsets`), recorded for the ledger, or None when the job never had one."""
    store = ControlStore(layout, spec.name)
    found = store.read(RECORD)
    legacy = layout.deadletter_checkpoint(spec.name)
    if found is None:
        if not deadletter_in_use(legacy):
            return None
        found = _retire(spark, spec, layout, legacy, run_id, lease)
        fault_point("retirement.step", job=spec.name, step="judged")
        with store.critical():
            store.write(RECORD, found)
        fault_point("retirement.step", job=spec.name, step="recorded")
    if exists(legacy):
        lease.ensure_held()
        _archive(spec, layout, legacy, found)
    return found["judged"]


def deadletter_in_use(path: str) -> bool:
    """The old dead-letter checkpoint at `path` holds a batch (the job ran under StateOps with two queries)."""
    return exists(path) and Checkpoint(path).has_batches()


def _retire(spark: SparkSession, spec: JobSpec, layout: Layout, legacy: str, run_id: str,
            lease: HeldLease) -> dict[str, Any]:
    old = Checkpoint.open(legacy)
    through = _judged_through(spec, layout, old)
    stateful = _committed(spec.checkpoint_path(layout))
    if spec.source == "kafka":
        judged, behind, frames = _kafka_gap(spark, spec, old, through, stateful)
    else:
        judged, behind, frames = _file_gap(spark, spec, layout, old, through, stateful)
    lease.ensure_held()
    written = _write_behind(spec, layout, old.query_id(), frames, stateful[0] if stateful else -1)
    record = {"legacy_checkpoint": legacy, "legacy_query_id": old.query_id(), "judged_through_batch": through,
              "stateful_committed_batch": stateful[0] if stateful else None, "behind": behind,
              "behind_rows_written": written, "judged": judged, "retired_at": datetime.now(timezone.utc).isoformat(),
              "archive_id": f"deadletter-{spec.name}-{old.query_id()}"}
    actions.record(layout, spec.name, ACTION, "done", actor=control.default_actor(), run_id=run_id,
                   details={k: v for k, v in record.items() if k != "judged"} | {
                       "ahead_files": len(judged["files"]), "ahead_offsets": judged["offsets"]})
    log.info("%s: the dead-letter query is retired (judged through its batch %s; %d row(s) judged behind it; "
             "%d file(s) ahead of the stateful query)", spec.name, through, written, len(judged["files"]))
    return record


def _judged_through(spec: JobSpec, layout: Layout, old: Checkpoint) -> int | None:
    """The old query's newest batch whose dead letters are in the table: committed, or written and not committed
    (its Delta transaction, under the app id its sink used: the job, its query id, epoch 0)."""
    committed = old.committed_batches()
    newest = committed[-1] if committed else -1
    written = transaction_version(layout.deadletter_table(spec.name), app_id(spec.name, old.query_id()))
    planned = old.offset_batches()
    through = max(newest, written if written is not None else -1)
    through = min(through, planned[-1] if planned else -1)
    return None if through < 0 else through


def _committed(path: str) -> tuple[int, Checkpoint] | None:
    """The stateful query's newest committed batch and its checkpoint; None before its first."""
    try:
        checkpoint = Checkpoint.open(path)
        committed = checkpoint.committed_batches()
    except (StateOpsError, OSError, ValueError):  # no checkpoint yet: nothing committed
        return None
    return (committed[-1], checkpoint) if committed else None


def _files_through(checkpoint: Checkpoint | None, batch: int | None) -> set[str]:
    """Every file a checkpoint's file sources read up to its batch `batch`."""
    if checkpoint is None or batch is None:
        return set()
    offsets = checkpoint.source_offsets(batch)
    files: set[str] = set()
    for index, entries in checkpoint.source_files().items():
        last = offsets[index].get("logOffset") if index < len(offsets) and offsets[index] else None
        files |= {comparable(path) for path, source_batch in entries if last is not None and source_batch <= last}
    return files


def _file_gap(spark: SparkSession, spec: JobSpec, layout: Layout, old: Checkpoint, through: int | None,
              stateful: tuple[int, Checkpoint] | None):
    judged = _files_through(old, through)
    committed = _files_through(stateful[1], stateful[0]) if stateful else set()
    behind = sorted(committed - judged)
    gone = [path for path in behind if not exists(path)]
    if gone:
        log.warning("%s: %d file(s) the stateful query read and the retired dead-letter query did not are gone from "
                    "the landing zone (first: %s): their lines cannot be judged", spec.name, len(gone), gone[0])
    behind = [path for path in behind if path not in gone]
    frames = []
    for inp in spec.inputs:
        root = comparable(inp.landing(layout)) + "/"
        mine = [path for path in behind if path.startswith(root)]
        if mine:
            frames.append(invalid_rows(file_lines(spark, mine), inp, spec))
    return ({"files": sorted(judged - committed), "offsets": {}}, {"files": len(behind), "gone": len(gone)}, frames)


def _kafka_ends(checkpoint: Checkpoint | None, batch: int | None) -> dict[str, dict[int, int]]:
    """{topic: {partition: the next offset}} after a checkpoint's batch `batch`."""
    ends: dict[str, dict[int, int]] = {}
    if checkpoint is None or batch is None:
        return ends
    for offset in checkpoint.source_offsets(batch):
        for topic, partitions in (offset or {}).items():
            if isinstance(partitions, dict):
                ends.setdefault(topic, {}).update({int(p): int(o) for p, o in partitions.items()})
    return ends


def _kafka_gap(spark: SparkSession, spec: JobSpec, old: Checkpoint, through: int | None,
               stateful: tuple[int, Checkpoint] | None):
    judged = _kafka_ends(old, through)
    committed = _kafka_ends(stateful[1], stateful[0]) if stateful else {}
    ahead: dict[str, dict[str, int]] = {}
    behind: dict[str, dict[str, list[int]]] = {}
    frames = []
    for inp in spec.inputs:
        done, read = judged.get(inp.topic, {}), committed.get(inp.topic, {})
        start = {p: done.get(p, EARLIEST) for p, end in read.items() if end > done.get(p, 0)}
        if start:
            end = {p: read[p] for p in start}
            frames.append(invalid_rows(kafka_lines(spark, spec, inp, start, end), inp, spec))
            behind[inp.name] = {str(p): [start[p], end[p]] for p in start}
        over = {str(p): o - 1 for p, o in done.items() if o > read.get(p, 0)}
        if over:
            ahead[inp.name] = over
    return {"files": [], "offsets": ahead}, {"offsets": behind}, frames


def _write_behind(spec: JobSpec, layout: Layout, legacy_query: str, frames: list[DataFrame], batch: int) -> int:
    """The behind gap's dead letters, written once: their own app id (the retired query's), version 0. Each row is
    tagged with the stateful query's newest committed batch, the batch that read its line."""
    if not frames:
        return 0
    data = as_table((row.asDict() for row in reduce(DataFrame.unionByName, frames).collect()), batch)
    if data.num_rows == 0:
        return 0
    return write_batch(layout.deadletter_table(spec.name), data, app_id=f"stateops/{spec.name}/retired-{legacy_query}",
                       batch_id=0).rows


def _archive(spec: JobSpec, layout: Layout, legacy: str, record: dict[str, Any]) -> None:
    """The old checkpoint into the orphans' archive root (the module doc), then removed."""
    destination = posixpath.join(layout.home.rstrip("/"), "ops", ORPHANS, "archives", record["archive_id"])
    if exists(destination) and not _verified(destination):
        remove_tree(destination)  # a copy a killed run left unfinished
    if not exists(destination):
        archive_copy(legacy, destination, {
            "archive_id": record["archive_id"], "job": spec.name, "mode": "deadletter-retirement",
            "reason": "the dead-letter query was retired: the stateful query collects its dead letters"})
    fault_point("retirement.step", job=spec.name, step="archived")
    remove_tree(legacy)


def _verified(archive: str) -> bool:
    return not verify_folder(archive, read_json(posixpath.join(archive, MANIFEST)))  # no manifest: not verified
