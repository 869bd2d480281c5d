"""The runbook's forward steps (verify the source archive, stop, audit, archive, adjust, repartition, store switch,
rewind cut, fresh or restored checkpoint, sink alignment, restart, verify) and what the rollback does with the same hands:
setting overrides, putting an archived checkpoint back,
aligning the sink, launching the job.

Apart from executor.py so that what each step does reads apart from the order in which the executor runs,
journals and resumes them; rollback.py undoes them with the primitives here, observation.py judges the
restarted run. A step returns the details its journal `done` entry keeps (what later steps and a resumed
attempt read back) and raises StepFailed when it cannot complete (RecoveryRefused before anything changed).
"""
from __future__ import annotations

import posixpath
from dataclasses import asdict
from functools import partial
from typing import Any, Callable

from stateops import control, sinkstate
from stateops.checkpoints import rewind, state_store
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import current_lease, overrides
from stateops.control import stop as stops
from stateops.clock import now_iso
from stateops.errors import OperationFailed, StateOpsError, error_line
from stateops.storage import copies, exists, read_text, write_text

from stateops.recovery import coverage, observation, store_switch, verify
from stateops.checkpoints import archive
from stateops.recovery.attempt import Attempt
from stateops.migration import apply as migration_apply
from stateops.migration import debt
from stateops.migration import repartition
from stateops.migration.classify import Migration
from stateops.recovery.model import (ADJUST, ALIGN_SINK, ARCHIVE, AUDIT_BEFORE, FRESH_CHECKPOINT, MIGRATE,
                                     REPARTITION, RESTART, RESTORE_CHECKPOINT, REWIND_CUT, ROLLBACK_SINK, STOP,
                                     SWITCH_STORE, VERIFY, VERIFY_SOURCE, RecoveryRefused)


class StepFailed(OperationFailed):
    """A step could not complete; after the archive this triggers the rollback. `details` are journaled."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.details = details or {}


def handlers(attempt: Attempt) -> dict[str, Callable[[], dict[str, Any]]]:
    """The forward steps by name, each acting on `attempt`."""
    return {name: partial(step, attempt) for name, step in (
        (VERIFY_SOURCE, _verify_source), (STOP, stop), (AUDIT_BEFORE, _audit_before), (ARCHIVE, _archive),
        (ADJUST, _adjust), (REPARTITION, _repartition), (SWITCH_STORE, _switch_store), (MIGRATE, _migrate),
        (REWIND_CUT, _rewind_cut),
        (FRESH_CHECKPOINT, _fresh_checkpoint), (RESTORE_CHECKPOINT, _restore_checkpoint),
        (ALIGN_SINK, _align_sink), (RESTART, launch), (VERIFY, _verify))}


def completed(attempt: Attempt, name: str) -> bool:
    """An interrupted step that is not idempotent: did it complete? Half-done raises (rollback)."""
    if name == REPARTITION and repartition.writer_repartition(attempt.archived):
        return False  # the writer's repartition resumes itself (stateops.migration.apply)
    if name == REPARTITION:
        checkpoint = Checkpoint.open(attempt.target.checkpoint)
        kept = attempt.manifest()
        committed, offsets = checkpoint.committed_batches(), checkpoint.offset_batches()
        if committed[-1] > kept["latest_committed_batch"] and checkpoint.shuffle_partitions(
                committed[-1]) == attempt.plan.settings_after["shuffle_partitions"]:
            return True
        if offsets[-1] > kept["latest_offsets_batch"]:
            raise StepFailed("the offline repartition was interrupted half-way (a new batch is planned but not "
                             "committed)")
        return False
    if name == RESTART:  # a long-running restart: launched if a run of this runbook holds the lease
        holder = attempt.restarted_run()
        return holder is not None and holder.stale_reason(attempt.control_settings) is None
    return False


# --- stop --------------------------------------------------------------------------------------------------

def _verify_source(attempt: Attempt) -> dict[str, Any]:
    source = attempt.plan.request["archive_id"]
    problems = archive.verify(attempt.target.archive_root, source)
    if problems:
        raise RecoveryRefused(f"{attempt.target.job}: archive {source} does not verify against its manifest "
                              f"({problems[0]}); nothing was changed")
    return {"archive_id": source}


def stop(attempt: Attempt, why: str | None = None) -> dict[str, Any]:
    """Stop whoever runs the job now, then hold its lease."""
    plan = attempt.plan
    details = _stop_holder(attempt, f"runbook {plan.runbook_id} ({plan.mode}): {why or plan.reason}")
    attempt.hold_lease()
    return details


def _stop_holder(attempt: Attempt, reason: str) -> dict[str, Any]:
    """Stop whoever runs the job now: stop request, wait; past the timeout terminate or refuse."""
    layout, job, plan = attempt.layout, attempt.target.job, attempt.plan
    settings, control_settings = attempt.settings, attempt.control_settings
    holder = current_lease(layout, job)
    if holder is None or holder.stale_reason(control_settings) is not None or (
            attempt.lease is not None and holder.lease_id == attempt.lease.lease.lease_id):
        return {"how": "nothing was running" if holder is None else "no live holder",
                "previous": asdict(holder) if holder else None}
    request = stops.request_stop(layout, job, actor=plan.actor, reason=reason, settings=control_settings)
    if request is None or control.wait_released(layout, job, request.lease_id, settings.stop_timeout_seconds,
                                                settings=control_settings):
        return {"how": "stopped by a stop request", "previous": asdict(holder)}
    if attempt.terminate is None or not attempt.terminate(holder):
        stops.withdraw(layout, job, request, actor=plan.actor,
                       reason=f"runbook {plan.runbook_id} refused: the query did not stop")
        raise RecoveryRefused(
            f"{job}: the running query ({holder.describe()}) did not stop within "
            f"{settings.stop_timeout_seconds:g} s and could not be terminated; nothing was changed. Fix: "
            f"stop it (stateops jobs stop {job} --wait 300) and run the runbook again, or raise "
            "STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS")
    dead = control.wait_released(layout, job, holder.lease_id,
                                 control_settings.lease_timeout_seconds + settings.stop_timeout_seconds,
                                 settings=control_settings)
    if not dead:
        raise RecoveryRefused(f"{job}: the run {holder.run_id} was terminated but still holds its "
                              "lease; nothing was changed. Fix: make sure it ended, then run the runbook again")
    return {"how": "terminated after the stop timeout", "previous": asdict(holder)}


# --- audit and archive ---------------------------------------------------------------------------------------

def _audit_before(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    return {"audit": attempt.runtime.audit(attempt.target.checkpoint)}


def _new_manifest(attempt: Attempt, files: list[copies.FileEntry]) -> dict[str, Any]:
    layout, target, plan = attempt.layout, attempt.target, attempt.plan
    checkpoint = Checkpoint.open(target.checkpoint)
    latest = checkpoint.latest_committed_batch()
    state = sinkstate.sink_state(layout, target.job)
    app = sinkstate.app_id(target.job, checkpoint.query_id(), state.epoch)
    watermark = checkpoint.watermark(latest)
    forced = overrides.in_force(layout, target.job)
    return {
        "archive_id": plan.runbook_id, "runbook_id": plan.runbook_id, "job": target.job,
        "created_at": now_iso(), "actor": plan.actor, "reason": plan.reason, "mode": plan.mode,
        "method": plan.archive["method"], "source": target.checkpoint, "query_id": checkpoint.query_id(),
        "latest_committed_batch": latest, "latest_offsets_batch": checkpoint.offset_batches()[-1],
        "watermark": watermark.isoformat() if watermark else None,
        "settings": {**plan.settings_before, "sink_epoch": state.epoch},
        "overrides": {name: change.value for name, change in forced.items()},
        "sink": {"table": target.sink_table, "version": sinkstate.table_version(target.sink_table),
                 "epoch": state.epoch, "app_id": app,
                 "transaction_version": sinkstate.transaction_version(target.sink_table, app)},
        "audit_before": attempt.journal.details(AUDIT_BEFORE).get("audit"),
        # what the archived state means (the checkpoint's query's record, stateops.jobs.runtime.compatibility): put
        # back with it, so that a restored state is judged by its own query's record
        "state_meaning": _read_or_none(layout.state_meaning(target.job)),
        "total_bytes": sum(f.size for f in files), "files": [asdict(f) for f in files],
    }


def _read_or_none(path: str) -> str | None:
    try:
        return read_text(path)
    except FileNotFoundError:
        return None


def _archive(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    target, archived = attempt.target, attempt.archived
    target.roots.confine(attempt.directory, job=target.job)
    path = posixpath.join(attempt.directory, archive.MANIFEST)
    found = archive.read_json(path)
    source = target.roots.confine(target.checkpoint, job=target.job)
    if found is None or copies.verify_tree(archived, found["files"]) and copies.tree_size(source):
        copies.remove_tree(archived)
        if attempt.plan.archive["method"] == "rename":
            found = _new_manifest(attempt, copies.listing(source))
            archive.write_json(path, found)
            copies.move_tree(source, archived)
        else:
            partial_copy = archived + ".partial"
            copies.remove_tree(partial_copy)
            try:
                files = copies.copy_tree(source, partial_copy)
            except OSError as err:  # out of space or quota: give the room back; the source was only read
                copies.remove_tree(partial_copy)
                raise StepFailed(f"the copy to {partial_copy} failed ({err.strerror or err}): the checkpoint is "
                                 "untouched; point the job's archive_dir to a filesystem with room") from err
            found = _new_manifest(attempt, files)
            copies.move_tree(partial_copy, archived)
            archive.write_json(path, found)
    problems = copies.verify_tree(archived, found["files"])
    if problems:
        raise StepFailed(f"the archive does not verify against its manifest: {problems[0]}")
    return {"path": attempt.directory, "method": found["method"], "files": len(found["files"]),
            "bytes": found["total_bytes"], "latest_committed_batch": found["latest_committed_batch"],
            "sink_version": found["sink"]["version"]}


# --- settings ------------------------------------------------------------------------------------------------

def set_override(attempt: Attempt, setting: str, value: str | None) -> dict[str, Any] | None:
    """Put `setting` to `value` (None clears it) unless it already is; the change, if any."""
    layout, target, plan = attempt.layout, attempt.target, attempt.plan
    forced = overrides.in_force(layout, target.job).get(setting)
    if (forced.value if forced else None) == value:
        return None
    why = f"runbook {plan.runbook_id} ({plan.mode}): {plan.reason}"
    if value is None:
        change = overrides.clear_override(layout, target.job, setting, reason=why, actor=plan.actor,
                                          runbook_id=plan.runbook_id)
    else:
        change = overrides.set_override(layout, target.job, setting, value, bounds=target.bounds,
                                        reason=why, actor=plan.actor, runbook_id=plan.runbook_id)
    return {"setting": setting, "value": value, "previous": change.previous if change else None}


def _adjust(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    plan = attempt.plan
    after, before = plan.settings_after, plan.settings_before
    epoch = after["sink_epoch"]
    wanted: dict[str, str | None] = {}
    if plan.mode == "restore":
        kept = archive.manifest(attempt.target.archive_root, plan.request["archive_id"])["overrides"]
        wanted = {s: kept.get(s) for s in overrides.SETTINGS}
    else:
        for setting in overrides.SETTINGS:
            if after.get(setting) != before.get(setting):
                wanted[setting] = str(after[setting])
    wanted[overrides.SINK_EPOCH] = str(epoch)
    wanted[overrides.SINK_REPLAY] = _replay(attempt, epoch) if plan.mode == "rebuild" else None
    if plan.mode == "rebuild":  # the new checkpoint's store and formats (the runner reads them at its start)
        wanted[overrides.STATE_FORMATS] = state_store.after_rebuild(
            attempt.archived, attempt.target.state_store, attempt.target.state_conf)[0].to_json()
    if plan.mode == "switch-store":  # the switched checkpoint's (RocksDB's changelog: its files cannot say yet)
        wanted[overrides.STATE_FORMATS] = state_store.after_switch(
            attempt.archived, plan.request["to_store"], attempt.target.state_conf).to_json()
    changes = [c for c in (set_override(attempt, s, v) for s, v in wanted.items()) if c]
    return {"changes": changes, "sink_epoch": epoch}


def _replay(attempt: Attempt, epoch: int) -> str:
    """A rebuild's sink rules: the write floor (incomplete input) and the insert-if-absent horizon."""
    target = attempt.target
    cover = coverage.assess(attempt.layout, Checkpoint(attempt.archived), target)
    horizon = (sinkstate.max_time(target.sink_table, target.output_time_column)
               if target.output_mode == "append" else None)
    if target.output_mode == "append" and horizon is None and sinkstate.table_version(
            target.sink_table) is not None:
        horizon = 2 ** 62  # no time column to bound repeats by: every row is inserted only if absent
    return sinkstate.replay_value(epoch, cover.write_floor_ms, horizon)


# --- the checkpoint ------------------------------------------------------------------------------------------

def _repartition(attempt: Attempt) -> dict[str, Any]:
    """Spark's offline repartition (one new batch), or where it does not serve (the in-memory store) the migration's
    writer: the same rows re-placed at the same batch (stateops.migration.repartition), whose audit must count the
    rows per operator and store the audit before did."""
    attempt.hold_lease()
    partitions = attempt.plan.settings_after["shuffle_partitions"]
    target = attempt.target
    if not repartition.writer_repartition(attempt.archived):
        attempt.runtime.repartition(target.checkpoint, partitions)
        checkpoint = Checkpoint.open(target.checkpoint)
        batch = checkpoint.latest_committed_batch()
        return {"batch": batch, "partitions": partitions, "audit": attempt.runtime.audit(target.checkpoint, batch)}
    checkpoint = target.roots.confine(target.checkpoint, job=target.job)
    moved = repartition.plan(attempt.archived, partitions)
    batch = moved.position.batch
    done = migration_apply.apply(checkpoint, moved, attempt.plan.runbook_id, attempt.runtime.rewrite_state,
                                 repartition.kept_schema_files(attempt.archived), partitions)
    recorded = repartition.record(checkpoint, batch, partitions)
    audit = attempt.runtime.audit(checkpoint, batch)
    details = {**done, "batch": batch, "partitions": partitions, "offsets_rewritten": recorded, "audit": audit,
               "how": "the StateOps writer (Spark's offline repartition reads RocksDB state only)"}
    lost = _rows_changed(attempt.journal.details(AUDIT_BEFORE).get("audit"), audit)
    if lost:
        raise StepFailed(f"the repartitioned state differs from the state before: {lost}", details)
    return details


def _rows_changed(before: dict | None, after: dict) -> str | None:
    """The first operator and store whose rows differ between two deep audits (their partitions may)."""
    def rows(audit: dict | None) -> dict[tuple[int, str], int]:
        return {(op["operator_id"], op["store_name"]): op["rows_total"] for op in (audit or {}).get("operators", [])}

    old, new = rows(before), rows(after)
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            return f"operator {key[0]} store {key[1]}: {old.get(key)} rows before, {new.get(key)} after"
    return None


def _switch_store(attempt: Attempt) -> dict[str, Any]:
    """Move the state to the other store (stateops.recovery.store_switch), then compare the deep audit of the same
    batch with the one before: rows per operator, store and partition must be equal."""
    attempt.hold_lease()
    target = attempt.target
    checkpoint = target.roots.confine(target.checkpoint, job=target.job)
    switch = store_switch.plan(attempt.archived, attempt.plan.request["to_store"])
    done = store_switch.apply(checkpoint, switch, attempt.runtime.write_store)
    audit = attempt.runtime.audit(checkpoint, switch.batch)
    details = {**done, "switch": switch.to_dict(), "audit": audit}
    differences = store_switch.differences(attempt.journal.details(AUDIT_BEFORE).get("audit"), audit)
    if differences:
        raise StepFailed(f"the switched state differs from the state before: {differences[0]}", details)
    return details


def _migrate(attempt: Attempt) -> dict[str, Any]:
    """Rewrite the state for the job's query (stateops.migration.apply), check that Spark's planning of the restart
    takes it, and audit the migrated batch (the verification's start)."""
    attempt.hold_lease()
    target = attempt.target
    checkpoint = target.roots.confine(target.checkpoint, job=target.job)
    migration = Migration.from_dict(attempt.plan.migration)
    partitions = Checkpoint.open(attempt.archived).shuffle_partitions(migration.position.batch)
    runtime = attempt.runtime
    try:
        done = migration_apply.apply(checkpoint, migration, attempt.plan.runbook_id, runtime.rewrite_state,
                                     runtime.migration_files, partitions)
        fit = runtime.adopt_migration()
    except StateOpsError as err:
        raise StepFailed(f"the migration failed: {error_line(err)}") from err
    debt.record(attempt.layout, target.job, runbook_id=attempt.plan.runbook_id, query_id=attempt.plan.query_id,
                migration=attempt.plan.migration, actor=attempt.plan.actor)
    return {**done, "fit": fit["line"], "boundary": migration.boundary,
            "audit": runtime.audit(checkpoint, migration.position.batch)}


def _rewind_cut(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    target = attempt.target
    to_batch = attempt.plan.request["to_batch"]
    counts = rewind.rewind(target.roots.confine(target.checkpoint, job=target.job), to_batch, attempt.archived)
    return {**counts, "to_batch": to_batch}


def _fresh_checkpoint(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    target = attempt.target
    copies.remove_tree(target.roots.confine(target.checkpoint, job=target.job))
    return {"checkpoint": target.checkpoint}


def _restore_checkpoint(attempt: Attempt) -> dict[str, Any]:
    attempt.hold_lease()
    source = attempt.plan.request["archive_id"]
    put_back(attempt, source)
    return {"archive_id": source}


def put_back(attempt: Attempt, runbook_id: str, failed_to: str | None = None) -> None:
    """Put archive `runbook_id`'s checkpoint in place; what is there now moves to `failed_to` (or is removed:
    the runbook's own archive holds it)."""
    target = attempt.target
    checkpoint = target.roots.confine(target.checkpoint, job=target.job)
    kept = archive.manifest(target.archive_root, runbook_id)
    if exists(checkpoint):
        if not copies.verify_tree(checkpoint, kept["files"]):
            return  # already in place
        if failed_to:
            copies.move_tree(checkpoint, failed_to)
        else:
            copies.remove_tree(checkpoint)
    archive.copy_checkpoint_back(target.archive_root, runbook_id, checkpoint)
    if kept.get("state_meaning") is not None:
        write_text(attempt.layout.state_meaning(target.job), kept["state_meaning"])


# --- the sink ------------------------------------------------------------------------------------------------

def align_target(attempt: Attempt, rollback: bool) -> int | None:
    """The sink version the sink step (ALIGN_SINK, or the rollback's when `rollback`) aligns to, journaled when
    it starts: the one an interrupted attempt journaled, else the version matching the checkpoint the job will
    run from. None: no sink table yet; -1: it did not exist when the archive was taken."""
    target, plan, journal = attempt.target, attempt.plan, attempt.journal
    uri = target.sink_table
    latest = sinkstate.table_version(uri)
    if latest is None:
        return None
    if journal.phase(ROLLBACK_SINK if rollback else ALIGN_SINK) == "started":
        return journal.details(ROLLBACK_SINK if rollback else ALIGN_SINK, "started").get("target_version")
    if rollback or plan.mode == "restore":
        kept = attempt.manifest() if rollback else archive.manifest(target.archive_root, plan.request["archive_id"])
        if kept["sink"]["version"] is None:
            return -1
        prefix = sinkstate.checkpoint_app_prefix(target.job, kept["query_id"])
        return sinkstate.aligned_version(uri, prefix, kept["latest_committed_batch"], kept["sink"]["version"])
    checkpoint = Checkpoint.open(target.checkpoint)
    prefix = sinkstate.checkpoint_app_prefix(target.job, checkpoint.query_id())
    return sinkstate.aligned_version(uri, prefix, checkpoint.latest_committed_batch(), latest)


def align(attempt: Attempt, target_version: int | None) -> dict[str, Any]:
    """Restore the sink table to `target_version` (from align_target)."""
    attempt.hold_lease()
    if target_version is None:
        return {"restored": False, "reason": "no sink table yet"}
    if target_version < 0:
        return {"restored": False, "reason": "the sink table did not exist when the archive was taken",
                "note": "rows written since stay"}
    return sinkstate.restore(attempt.target.sink_table, target_version)


def _align_sink(attempt: Attempt) -> dict[str, Any]:
    return align(attempt, attempt.journal.details(ALIGN_SINK, "started").get("target_version"))


# --- restart and verify --------------------------------------------------------------------------------------

def start_state(attempt: Attempt) -> dict[str, Any]:
    """Where the restart begins: its checkpoint's latest batch and watermark (empty for a fresh one)."""
    try:
        checkpoint = Checkpoint.open(attempt.target.checkpoint)
        latest = checkpoint.latest_committed_batch()
    except StateOpsError:
        return {"latest_committed_batch": None, "watermark_ms": 0}
    return {"latest_committed_batch": latest, "watermark_ms": checkpoint.next_watermark_ms(latest)}


def launch(attempt: Attempt) -> dict[str, Any]:
    """Restart the job (bounded: run it to the end of its input; continuous: start it and return) after letting
    go of the lease; where it starts and how it was started."""
    plan = attempt.plan
    start = start_state(attempt)
    attempt.release_lease()
    if plan.restart_mode == "continuous":
        return {**start, "how": "continuous", **attempt.runtime.launch_continuous(plan.runbook_id, plan.running)}
    try:
        result = attempt.runtime.run_bounded(plan.runbook_id)
    except Exception as err:  # noqa: BLE001
        raise StepFailed(f"the restart failed: {error_line(err)}") from err
    return {**start, "how": "bounded", **result}


def _verify(attempt: Attempt) -> dict[str, Any]:
    plan, journal = attempt.plan, attempt.journal
    mode, before = plan.mode, journal.details(AUDIT_BEFORE).get("audit")
    start = {"adjust": before, "restart": before, "repartition": journal.details(REPARTITION).get("audit"),
             "switch-store": journal.details(SWITCH_STORE).get("audit"),
             "migrate": journal.details(MIGRATE).get("audit"),
             "rewind": None, "rebuild": None,
             "restore": (archive.manifest(attempt.target.archive_root, plan.request.get("archive_id") or "")
                         or {}).get("audit_before")}[mode]
    if mode == "rewind":  # the state the replay starts from (still retained: the cut kept version N+1)
        start = attempt.runtime.audit(attempt.target.checkpoint, plan.request["to_batch"])
    partitions = (plan.settings_after["shuffle_partitions"] if mode in ("repartition", "rebuild")
                  else observation.audited_partitions(start))
    first = plan.request["to_batch"] + 1 if mode == "rewind" else None
    details = observation.verification(attempt.view(), journal.details(RESTART), start, partitions, first)
    if not details["verification"]["ok"]:
        raise StepFailed(f"verification failed: {verify.failures(details['verification'])}", details)
    return details
