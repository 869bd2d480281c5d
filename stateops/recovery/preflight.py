"""Preflight: check everything the runbook needs before it touches anything, and build the plan.

Nothing here writes: a refusal (RecoveryRefused or ConfigError, one line naming the problem and the fix)
leaves the file system as it was. Checked: the request's values (mode, the values the mode needs, the
watermark within the job's bounds), the confirmation, every path against the roots guard, the checkpoint
(present, a committed batch), no other runbook on the job, the mode's own conditions (a rewind target
whose offsets, commits and state are retained; a restorable archive; an idempotent key for a rebuild of
an append sink), and room for the archive on its filesystem, measured, with a margin.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from stateops.storage import copies
from stateops.checkpoints.operators import describe
from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError
from stateops.control import current_lease, default_actor, maintenance, overrides
from stateops.durations import parse_seconds
from stateops import progress, sinkstate
from stateops.checkpoints import kafka_offsets
from stateops.checkpoints import rewind, state_store
from stateops.storage import can_lock, exists
from stateops.control.settings import ControlSettings
from stateops.layout import Layout
from stateops.runbooks import running
from stateops.checkpoints.profile import JOIN

from stateops.migration import repartition
from stateops.recovery import coverage, store_switch
from stateops.checkpoints import archive
from stateops.recovery.model import (ADJUST, ALIGN_SINK, ARCHIVE, AUDIT_BEFORE, FRESH_CHECKPOINT, MODES, REPARTITION,
                                     MIGRATE, RESTART, RESTORE_CHECKPOINT, REWIND_CUT, STOP, SWITCH_STORE, VERIFY,
                                     VERIFY_SOURCE, MigrationRefused, RecoveryPlan, RecoveryRefused, Step)
from stateops.recovery.request import RecoveryRequest, RequestRefused, example, refuse_field, safe
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.target import JobTarget

_NEEDS = {  # mode -> (request field, required?)
    "adjust": {"watermark_delay": True},
    "repartition": {"shuffle_partitions": True},
    "rebuild": {"watermark_delay": False, "shuffle_partitions": False},
    "rewind": {"to_batch": True},
    "restore": {"archive_id": True},
    "restart": {},
    "switch-store": {"to_store": True},
    "migrate": {"transform": False},
}
NOTE_LATE_ROWS = ("a restarted query may admit late rows that an uninterrupted run would drop (its first batch "
                  "can cover more input than the batch it replaces; measured on Spark 4.2): the output stays free "
                  "of duplicates and losses, and verification does not count this as a failure")


def _check_values(target: JobTarget, request: RecoveryRequest) -> None:
    if request.mode not in MODES:
        raise refuse_field("mode", f"unknown mode {request.mode!r}", f"use one of {', '.join(MODES)}")
    needs = _NEEDS[request.mode]
    for name in ("watermark_delay", "shuffle_partitions", "to_batch", "archive_id", "to_store", "transform"):
        value = getattr(request, name)
        if value is not None and name not in needs:
            users = [m for m, n in _NEEDS.items() if name in n]
            raise refuse_field(name, f"does not apply to mode {request.mode}",
                               f"use it with {' or '.join(users)}, or leave it out")
        if value is None and needs.get(name):
            raise refuse_field(name, f"is required for mode {request.mode}", f"pass {{{name}}} {example(name)}")
    if request.watermark_delay is not None:
        overrides.validate(target.job, overrides.WATERMARK_DELAY, request.watermark_delay, target.bounds)
    if request.shuffle_partitions is not None:
        overrides.validate(target.job, overrides.SHUFFLE_PARTITIONS, request.shuffle_partitions, target.bounds)
    if request.to_store is not None and request.to_store not in state_store.STORES:
        raise refuse_field("to_store", f"{request.to_store!r} is not a state store",
                           f"pass {{to_store}} {' or '.join(sorted(state_store.STORES, reverse=True))}")
    if request.transform is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", request.transform):
        raise refuse_field("transform", f"{request.transform!r} is not module:function",
                           f"pass {{transform}} {example('transform')}")
    if request.to_batch is not None and request.to_batch < 0:
        raise refuse_field("to_batch", f"{request.to_batch!r} is not a batch id", "use a committed batch id >= 0")


def check_confirmation(request: RecoveryRequest) -> None:
    if request.dry_run:
        return
    if request.confirm != request.job:
        got = f"{request.confirm!r}" if request.confirm else "no confirmation"
        raise RequestRefused(f"{request.job}: {safe(got)} does not confirm the runbook. Fix: pass {{confirm}} "
                             f"{request.job} (the job's name) to act, or leave it out for a dry run")


def _open_checkpoint(target: JobTarget) -> tuple[Checkpoint, int]:
    try:
        checkpoint = Checkpoint.open(target.checkpoint)
        return checkpoint, checkpoint.latest_committed_batch()
    except NotACheckpointError as err:
        raise RecoveryRefused(f"{target.job}: nothing to recover: {err}") from None


def check_concurrency(layout: Layout, target: JobTarget, runbook_id: str) -> None:
    lock = maintenance.current(layout, target.job)
    if lock is not None and lock.runbook_id != runbook_id:
        directory = archive.runbook_dir(target.archive_root, lock.runbook_id)
        unlock = f"stateops jobs unlock {target.job} --runbook-id {lock.runbook_id}"
        if running(directory):
            how = "it is running now"
        elif exists(posixpath.join(directory, archive.REPORT)):
            how = (f"it failed and keeps the job locked (stateops archives show {lock.runbook_id}); after fixing "
                   f"the job, release the lock: {unlock}")
        else:
            how = f"it did not finish; run it again with the same settings to resume it, or release the lock: {unlock}"
        raise RecoveryRefused(f"{target.job}: another runbook holds the job: {lock.describe()}; {how}")


def _source_archive(target: JobTarget, request: RecoveryRequest) -> dict:
    if archive.job_of(request.archive_id) != target.job:
        raise RecoveryRefused(f"{target.job}: archive {request.archive_id} belongs to job "
                              f"{archive.job_of(request.archive_id)}. Fix: pick one of stateops archives list "
                              f"{target.job}")
    target.roots.confine(archive.runbook_dir(target.archive_root, request.archive_id), job=target.job)
    found = archive.manifest(target.archive_root, request.archive_id)
    if found is None:
        raise RecoveryRefused(f"{target.job}: no archive {request.archive_id} under {target.archive_root}. Fix: "
                              f"pick one of stateops archives list {target.job}")
    return found


def _room(target: JobTarget, checkpoint_bytes: int, method: str, restore_bytes: int,
          settings: RecoverySettings, directory: str) -> dict:
    """Bytes the archive step, a restore and a rollback may write, against free bytes (measured)."""
    needed = (0 if method == "rename" else checkpoint_bytes) + restore_bytes + checkpoint_bytes  # + rollback copy
    required = int(needed * (1 + settings.archive_margin)) + settings.archive_min_free_bytes
    free = copies.free_bytes(directory)
    if not copies.writable(directory):
        raise RecoveryRefused(f"{target.job}: the archive destination {directory} is not writable. Fix: make it "
                              "writable, or set the job's archive_dir")
    if free is not None and free < required:
        raise RecoveryRefused(
            f"{target.job}: not enough room for the archive on {directory}'s filesystem: {free} bytes free, "
            f"{required} needed ({needed} bytes to write x {1 + settings.archive_margin:g} + "
            f"{settings.archive_min_free_bytes} kept free: STATEOPS_ARCHIVE_MARGIN, STATEOPS_ARCHIVE_MIN_FREE_BYTES). "
            "Fix: free space, or point the job's archive_dir to a filesystem with room")
    return {"bytes": checkpoint_bytes, "required_bytes": required, "free_bytes": free}


def _settings_before(layout: Layout, target: JobTarget, checkpoint: Checkpoint, latest: int) -> dict:
    offsets = checkpoint.offset_batches()
    return {"watermark_delay": target.watermark_delay,
            "shuffle_partitions": checkpoint.shuffle_partitions(offsets[-1] if offsets else latest),
            "sink_epoch": sinkstate.sink_state(layout, target.job).epoch,
            "state_store": _store_text(checkpoint)}


# The modes that cut or rewrite state files by version: in checkpoint format 2 a version has a file per unique id,
# and the commit log says which one is current (STORES-NOTES: the rewind's preflight could read another id's).
BY_VERSION = ("rewind", "repartition", "switch-store", "migrate")
REBUILD_INSTEAD = ("Fix: rebuild it with the partitions you want (stateops recover run {job} --mode rebuild "
                   "--partitions N: a new checkpoint, the input replayed)")


def check_store(job: str, checkpoint: str, mode: str) -> None:
    """Refuse, before anything changes, a mode the checkpoint's store or format does not allow (each measured on
    Spark 4.2's own checkpoints: tests/spark/test_store_matrix.py)."""
    found = state_store.of_checkpoint(checkpoint)
    if not found:
        return
    formats = found[0]
    if formats.checkpoint_format == 2 and mode in BY_VERSION:
        raise RecoveryRefused(f"{job}: cannot {mode} a checkpoint in format 2 (state files named "
                              "<version>_<id>, the commit log naming the current one): the runbook cuts and rewrites "
                              "state files by version. Fix: rebuild it (a new checkpoint, in format 2 again), or "
                              f"restore an archive (stateops archives list {job})")
    if mode != "repartition":
        return
    if formats.store == state_store.MEMORY:  # Spark's reads RocksDB only: the migration's writer re-places it
        why = repartition.refusal(checkpoint)
        if why:
            raise RecoveryRefused(f"{job}: cannot repartition state kept in Spark's in-memory store: {why} (Spark's "
                                  "offline repartition reads RocksDB state only). " + REBUILD_INSTEAD.format(job=job))
        return
    if formats.join_format >= 4 and _joins(checkpoint):
        raise RecoveryRefused(f"{job}: cannot repartition a stream-stream join in state format "
                              f"{formats.join_format}: Spark 4.2's offline repartition writes state its own reader then cannot "
                              "read (INTERNAL_ERROR: Invalid byte array backed UnsafeRow). "
                              + REBUILD_INSTEAD.format(job=job) + ", or with join format 3 in STATEOPS_SPARK_CONF")


def check_switch(target: JobTarget, to_store: str) -> None:
    """Refuse, before anything changes, a switch whose state the target store cannot hold (one line naming why)."""
    why = store_switch.refusal(target.checkpoint, to_store)
    if why is None:
        return
    if why.startswith("its state is already"):
        raise RequestRefused(f"{target.job}: {why}; nothing to switch. Fix: pass the other {{to_store}}")
    fix = (f"keep it in {store_switch.source_store(target.checkpoint)}, or rebuild it with "
           f"jobs.{target.job}.state_store = \"{to_store}\" (a new checkpoint, the input replayed)")
    if store_switch.TWS in why:
        fix = "keep it in RocksDB (transformWithState runs on RocksDB only)"
    raise RecoveryRefused(f"{target.job}: cannot switch the state to the {to_store} store: {why}. Fix: {fix}")


def _joins(checkpoint: str) -> list[int]:
    opened = Checkpoint(checkpoint)
    return [op for op in opened.operator_ids()
            if (meta := describe(opened, op)) is not None and meta.operator_name == JOIN]


def _store_text(checkpoint: Checkpoint) -> str | None:
    found = state_store.of_checkpoint(checkpoint.path)
    return found[0].text() if found else None


def _settings_after(layout: Layout, target: JobTarget, request: RecoveryRequest, before: dict,
                    source: dict | None, rebuilt: state_store.Formats | None) -> dict:
    after = dict(before, sink_epoch=sinkstate.next_epoch(layout, target.job))
    if request.watermark_delay is not None:
        after["watermark_delay"] = overrides.validate(target.job, overrides.WATERMARK_DELAY, request.watermark_delay,
                                                      target.bounds)
    if request.mode == "repartition":
        after["shuffle_partitions"] = int(request.shuffle_partitions)
    if request.mode == "rebuild":
        after["shuffle_partitions"] = int(request.shuffle_partitions or target.shuffle_partitions)
        after["state_store"] = rebuilt.text() if rebuilt else None
    if request.mode == "switch-store":
        after["state_store"] = state_store.after_switch(target.checkpoint, request.to_store, target.state_conf).text()
    if source is not None:
        after["watermark_delay"] = source["settings"]["watermark_delay"]
        after["shuffle_partitions"] = source["settings"]["shuffle_partitions"]
        after["state_store"] = source["settings"].get("state_store", after.get("state_store"))
    return after


def _steps(mode: str, request: RecoveryRequest, restart_mode: str, method: str, writer: bool = False
           ) -> tuple[Step, ...]:
    restart = ("start the job as a long-running run in its own process, as it ran before" if restart_mode ==
               "continuous" else "run the job once (bounded), as it ran before")
    steps = [Step(STOP, "ask the running query to stop and wait for its lease; past the timeout terminate its run "
                  "(the orchestrator's callback) or refuse; then hold the job's lease", False, True),
             Step(AUDIT_BEFORE, "deep audit of the stopped checkpoint (state reader): rows and partitions", False,
                  True),
             Step(ARCHIVE, f"{method} the checkpoint into the archive with a manifest (files, sizes, sha256, batch, "
                  "watermark, settings, sink version and epoch, audit); verify it before anything changes",
                  method == "rename", True),
             Step(ADJUST, "record the new settings and a new sink epoch in the override store (history kept)",
                  True, True)]
    if mode == "restore":
        steps.insert(0, Step(VERIFY_SOURCE, f"verify archive {request.archive_id} against its manifest", False, True))
        steps.append(Step(RESTORE_CHECKPOINT, f"copy archive {request.archive_id}'s checkpoint into place "
                          "(verified)", True, True))
    if mode == "repartition" and writer:
        steps.append(Step(REPARTITION, f"re-place every store's rows of the latest committed batch into "
                          f"{request.shuffle_partitions} partitions by Spark's partitioning, through the store's own "
                          "API at the same version (StateOps' writer: Spark's offline repartition reads RocksDB state "
                          "only), record the count in the offset log; rows per operator and store must equal the "
                          "audit before", True, True))
    elif mode == "repartition":
        steps.append(Step(REPARTITION, f"repartition the state offline to {request.shuffle_partitions} partitions "
                          "(Spark's checkpoint manager writes one new batch)", True, False))
    if mode == "switch-store":
        steps.append(Step(SWITCH_STORE, f"rewrite the state of the latest committed batch, every operator and store, "
                          f"into the {request.to_store} store through its own StateStore API (same version, no input "
                          "replayed), swap the state files, record the store in the offset log; the deep audit's rows "
                          "per operator and partition must equal the audit before", True, True))
    if mode == "migrate":
        steps.append(Step(MIGRATE, "rewrite the state of the latest committed batch into the new query's (each "
                          "change as classified above, no input read), its schema files and operator metadata as "
                          "Spark plans the new query, swap it in, and check that Spark's planning of the restart "
                          "accepts it", True, True))
    if mode == "rewind":
        steps.append(Step(REWIND_CUT, f"cut the checkpoint back to batch {request.to_batch}: later offsets, commits, "
                          f"source log entries and state versions above {request.to_batch + 1} leave it (the "
                          "archive keeps them)", True, True))
    if mode == "rebuild":
        steps.append(Step(FRESH_CHECKPOINT, "start from an empty checkpoint (the old one is in the archive)", True,
                          True))
    if mode != "rebuild":
        steps.append(Step(ALIGN_SINK, "restore the sink table to the last version holding no batch the restart will "
                          "run again (Delta restore: later versions stay in its log)", True, True))
    steps += [Step(RESTART, restart, True, restart_mode == "bounded"),
              Step(VERIFY, "K batches without error, watermark advancing, state rows within bounds and "
                   "partitions as expected (deep audit), no duplicate keys in the sink; roll back on failure",
                   False, True)]
    return tuple(steps)


def _notes(mode: str, request: RecoveryRequest, target: JobTarget, latest: int, cover: coverage.Coverage | None,
           store_notes: list[str]) -> tuple[str, ...]:
    notes = []
    if mode == "adjust":
        notes.append("the watermark only moves forward: a longer delay admits later rows from the restart on, but "
                     "cannot bring back rows already dropped or state already evicted (that is what rebuild is for)")
    if mode == "restart":
        notes.append("no setting changes: the query restarts from its checkpoint with the settings in force")
    if mode == "migrate":
        notes.append(f"the state of batch {latest} is rewritten for the job's query now; the restart reads only "
                     "input that arrived after it (the offsets stay, the sink's batch ids go on), and the archive "
                     "keeps the old state: `restore` gives the old query its old state")
    if mode == "switch-store":
        notes.append(f"the state of batch {latest} moves to the {request.to_store} store; the restart reads only input "
                     "that arrived after it (the offsets stay), and the archive keeps the old store's files")
        if target.state_store not in (None, request.to_store):
            notes.append(f"the job's state_store is {target.state_store}: a later rebuild's new checkpoint takes it "
                         f"again (set jobs.{target.job}.state_store = \"{request.to_store}\" to keep the switch)")
    if mode == "repartition" and repartition.writer_repartition(target.checkpoint):
        notes.append("the in-memory store's state is re-placed by StateOps' writer at the same batch (no input read); "
                     "state-metadata keeps reporting the old partition count, so the runbook counts partitions from "
                     "the state files")
    elif mode == "repartition":
        notes.append("Spark's offline repartition is experimental (PySpark 4.2); state-metadata keeps reporting the "
                     "old partition count, so the runbook counts partitions from the state files")
    if mode == "rewind":
        notes.append(f"batches {request.to_batch + 1}..{latest} run again under a new sink epoch, after the sink is "
                     "restored to the version before their writes")
    if mode == "rebuild" and cover is not None:
        notes.append(cover.describe())
    notes.extend(store_notes)
    if mode == "restore":
        notes.append("the archived settings come back and the input that arrived after the archive is processed "
                     "again")
    notes.append(NOTE_LATE_ROWS)
    return tuple(notes)


def check_migration(job: str, migration: dict | None) -> None:
    """Refuse a migration that would not carry every change (one line naming the change, why, and the fix)."""
    from stateops.migration.classify import Migration

    if migration is None:
        raise RecoveryRefused(f"{job}: mode migrate needs the job's query planned against its state (the Spark "
                              "side's plan_migration); nothing was changed")
    why = Migration.from_dict(migration).refusal()
    if why is not None:
        raise MigrationRefused(f"{job}: cannot migrate the state: {why}; nothing was changed", migration)


def build_plan(layout: Layout, target: JobTarget, request: RecoveryRequest, *, runbook_id: str | None = None,
               settings: RecoverySettings, control: ControlSettings, now: datetime | None = None,
               migration: dict | None = None) -> RecoveryPlan:
    """The plan for `request`, or a one-line refusal. Writes nothing. `migration`: for mode migrate, the changes
    classified (stateops.migration.classify.Migration.to_dict(), made by the Spark side)."""
    _check_values(target, request)
    check_confirmation(request)
    runbook_id = runbook_id or archive.new_runbook_id(target.job, now)
    if not can_lock(target.archive_root):  # the journal's lock and entries: flock or S3's conditional writes
        raise RecoveryRefused(f"{target.job}: archive_dir {target.archive_root} is not a local or POSIX path or S3; "
                              "the runbook's journal needs file locks or S3's conditional writes. Fix: set "
                              "archive_dir to a path under STATEOPS_HOME")
    directory = target.roots.confine(archive.runbook_dir(target.archive_root, runbook_id), job=target.job)
    target.roots.confine(target.checkpoint, job=target.job)
    checkpoint, latest = _open_checkpoint(target)
    check_concurrency(layout, target, runbook_id)
    source = _source_archive(target, request) if request.mode == "restore" else None
    partitions = checkpoint.state_partitions(latest)
    current = max(partitions.values(), default=None)
    before = _settings_before(layout, target, checkpoint, latest)
    cover = None
    if request.mode == "adjust" and parse_seconds(overrides.validate(
            target.job, overrides.WATERMARK_DELAY, request.watermark_delay, target.bounds)) == \
            parse_seconds(target.watermark_delay):  # "600 seconds" is "10 minutes"
        raise RequestRefused(f"{target.job}: the watermark delay is already {safe(target.watermark_delay)}; nothing "
                             "to adjust. Fix: pass another {watermark_delay}, or use mode restart for a guarded "
                             "restart with the settings in force")
    if request.mode == "repartition" and current == request.shuffle_partitions:
        raise RequestRefused(f"{target.job}: the state already has {current} partitions. Fix: pass another "
                             "{shuffle_partitions}")
    check_store(target.job, target.checkpoint, request.mode)
    if request.mode == "switch-store":
        check_switch(target, request.to_store)
    if request.mode == "migrate":
        check_migration(target.job, migration)
    if request.mode == "rewind":
        problems = rewind.rewind_problems(checkpoint, request.to_batch)
        if problems:
            raise RecoveryRefused(f"{target.job}: cannot rewind to batch {request.to_batch}: {problems[0]}")
        if target.kafka is not None:  # the restart reads each partition from the offset offsets/N recorded
            coverage.kafka_replay(target, kafka_offsets.recorded(checkpoint.source_offsets(request.to_batch)),
                                  f"rewind to batch {request.to_batch}",
                                  "choose a later batch whose offsets Kafka still holds, or restore an archive "
                                  f"(stateops archives list {target.job})")
    if request.mode == "rebuild":
        if target.output_mode == "append" and not target.row_key:
            raise RecoveryRefused(f"{target.job}: a rebuild replays input into an append sink without an idempotent "
                                  "key, which would duplicate rows. Fix: declare the job's idempotent_key")
        cover = coverage.assess(layout, checkpoint, target)
    # the new checkpoint's store and formats, read once (the old checkpoint's state files: one listing)
    rebuilt, store_notes = (state_store.after_rebuild(target.checkpoint, target.state_store, target.state_conf)
                            if request.mode == "rebuild" else (None, []))
    lease = current_lease(layout, target.job)
    running = None
    if lease is not None:
        running = {**asdict(lease), "stale": lease.stale_reason(control) is not None}
    restart_mode = lease.mode if lease is not None and lease.mode in ("bounded", "continuous") else "bounded"
    method = ("rename" if request.mode in ("rebuild", "restore")
              and copies.same_filesystem(target.checkpoint, target.archive_root) else "copy")
    restore_bytes = source["total_bytes"] if source else 0
    room = _room(target, copies.tree_size(target.checkpoint), method, restore_bytes, settings, directory)
    return RecoveryPlan(
        runbook_id=runbook_id, job=target.job, mode=request.mode, request=request.to_dict(),
        actor=request.actor or default_actor(), reason=request.reason.strip() or f"stateops recover {request.mode}",
        created_at=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        checkpoint=target.checkpoint, query_id=checkpoint.query_id(), latest_committed_batch=latest,
        watermark=checkpoint.watermark(latest).isoformat() if checkpoint.watermark(latest) else None,
        state_partitions=current, sink_table=target.sink_table, running=running, restart_mode=restart_mode,
        archive={"id": runbook_id, "path": directory, "method": method, **room},
        settings_before=before, settings_after=_settings_after(layout, target, request, before, source, rebuilt),
        steps=_steps(request.mode, request, restart_mode, method,
                     request.mode == "repartition" and repartition.writer_repartition(target.checkpoint)),
        notes=_notes(request.mode, request, target, latest, cover, store_notes), dry_run=request.dry_run,
        restart=_state_load(layout, target, request.mode), migration=migration)


def _state_load(layout: Layout, target: JobTarget, mode: str) -> dict[str, Any] | None:
    """What the restart loads, for the modes that restart on the checkpoint's own state (not a rebuild's new one)."""
    cost = None if mode == "rebuild" else progress.next_start(target.checkpoint, layout, target.job)
    return cost.to_dict() if cost else None


def unfinished(layout: Layout, target: JobTarget, request: RecoveryRequest) -> RecoveryPlan | None:
    """The plan of this job's runbook that a crash interrupted, when `request` asks for the same thing (running
    it again resumes it); None otherwise."""
    lock = maintenance.current(layout, target.job)
    if lock is None:
        return None
    directory = archive.runbook_dir(target.archive_root, lock.runbook_id)
    stored = archive.read_json(posixpath.join(directory, archive.PLAN))
    if stored is None or exists(posixpath.join(directory, archive.REPORT)):
        return None
    plan = RecoveryPlan.from_dict(stored)
    same = RecoveryRequest(**{k: v for k, v in plan.request.items()}).parameters() == request.parameters()
    return plan if same and not running(directory) else None
