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
"""
from __future__ import annotations

import posixpath
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Callable

from stateops import control
from stateops import progress as progress_table
from stateops.checkpoint import Checkpoint
from stateops.control import current_lease, maintenance, overrides
from stateops.control import stop as stops
from stateops.control.holder import HeldLease
from stateops.control.process import alive
from stateops.control.records import now_iso
from stateops.control.settings import ControlSettings
from stateops.delta import read_table
from stateops.durations import parse_seconds
from stateops.errors import OperationFailed, StateOpsError
from stateops.faults import fault_point
from stateops.fs import exists
from stateops.layout import Layout

from stateops.recovery import archive, coverage, sinkstate, surgery, verify
from stateops.recovery.journal import Journal
from stateops.recovery.model import (ADJUST, ALIGN_SINK, ARCHIVE, AUDIT_BEFORE, FINISH, FRESH_CHECKPOINT, REPARTITION,
                                     RESTART, RESTORE_CHECKPOINT, REWIND_CUT, ROLLBACK_STEPS, STOP, VERIFY,
                                     VERIFY_SOURCE, RecoveryEvent, RecoveryPlan, RecoveryRefused, RecoveryReport)
from stateops.recovery.runtime import Runtime, Terminate
from stateops.recovery.settings import RecoverySettings
from stateops.recovery.target import JobTarget

RUNBOOK = "runbook"
ROLLBACK = "rollback"


class StepFailed(OperationFailed):
    """A step could not complete; after the archive this triggers the rollback. `details` are journaled."""

    def __init__(self, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.details = details or {}


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    if isinstance(err, StateOpsError) and text:
        return text[0]
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _ms(value: Any) -> int | None:
    if value is None:
        return None
    return int(value.timestamp() * 1000)


class Executor:
    def __init__(self, layout: Layout, target: JobTarget, plan: RecoveryPlan, runtime: Runtime, *,
                 settings: RecoverySettings | None = None, on_event: Callable[[RecoveryEvent], None] | None = None,
                 terminate: Terminate | None = None):
        self.layout, self.target, self.plan, self.runtime = layout, target, plan, runtime
        self.settings = settings or RecoverySettings.from_env()
        self.control_settings = ControlSettings.from_env()
        self.terminate = terminate
        self.directory = plan.archive["path"]
        self.archived = posixpath.join(self.directory, archive.CHECKPOINT)
        self.journal = Journal(layout, target.job, plan.runbook_id, self.directory, plan.actor, on_event)
        self.lease: HeldLease | None = None
        self.handlers = {VERIFY_SOURCE: self._verify_source, STOP: self._stop, AUDIT_BEFORE: self._audit_before,
                         ARCHIVE: self._archive, ADJUST: self._adjust, REPARTITION: self._repartition,
                         REWIND_CUT: self._rewind_cut, FRESH_CHECKPOINT: self._fresh_checkpoint,
                         RESTORE_CHECKPOINT: self._restore_checkpoint, ALIGN_SINK: self._align_sink,
                         RESTART: self._restart, VERIFY: self._verify}

    # --- the run -----------------------------------------------------------------------------------------

    def run(self) -> RecoveryReport:
        with self.journal.held():
            started = self._intent()
            outcome, error, rollback = "succeeded", None, None
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
                        error = _one_line(err)
                        self.journal.record(ROLLBACK, "started", {"reason": error})
                if self.journal.phase(ROLLBACK) is not None:
                    error = error or self.journal.details(ROLLBACK, "started").get("reason")
                    outcome, rollback = self._rollback()
            except RecoveryRefused as err:
                self._refused(err)
                raise
            finally:
                self._release_lease()
            return self._finish(outcome, error, rollback, started)

    def _intent(self) -> str:
        if self.journal.phase(RUNBOOK) is None:
            archive.write_json(posixpath.join(self.directory, archive.PLAN), self.plan.to_dict())
            self.journal.record(RUNBOOK, "started", {"plan": self.plan.to_dict()})
        maintenance.acquire(self.layout, self.target.job, runbook_id=self.plan.runbook_id, actor=self.plan.actor,
                            reason=f"runbook {self.plan.mode}: {self.plan.reason}")
        return next(e["at"] for e in self.journal.entries if e["step"] == RUNBOOK)

    def _step(self, name: str, idempotent: bool = True) -> dict[str, Any]:
        phase = self.journal.phase(name)
        if phase == "done":
            self.journal.replayed(name)
            return self.journal.details(name)
        if phase == "started" and not idempotent and self._complete(name):
            details = self.journal.record(name, "done", {"detected": "completed before the interruption"})
            return details.details
        self.journal.record(name, "started", self._intent_details(name))
        try:
            details = self.handlers[name]() if name in self.handlers else self._rollback_handlers()[name]()
        except Exception as err:
            self.journal.record(name, "failed", {"error": _one_line(err), **getattr(err, "details", {})})
            raise
        fault_point("runbook.before_done", job=self.target.job, step=name)
        return self.journal.record(name, "done", details).details

    def _intent_details(self, name: str) -> dict[str, Any]:
        if name in (ALIGN_SINK, "rollback_sink"):
            return {"target_version": self._align_target(rollback=name != ALIGN_SINK)}
        return {}

    def _refused(self, err: RecoveryRefused) -> None:
        """A refusal changed nothing: journal it and release the lock."""
        self.journal.record(RUNBOOK, "refused", {"error": str(err)})
        maintenance.release(self.layout, self.target.job, runbook_id=self.plan.runbook_id, actor=self.plan.actor)

    def _finish(self, outcome: str, error: str | None, rollback: dict | None, started: str) -> RecoveryReport:
        report = RecoveryReport(
            runbook_id=self.plan.runbook_id, job=self.target.job, mode=self.plan.mode, outcome=outcome,
            plan=self.plan.to_dict(), archive_path=self.directory,
            audit_before=self.journal.details(AUDIT_BEFORE).get("audit"),
            audit_after=self.journal.details(VERIFY).get("audit_after") or self.journal.details(
                "rollback_verify").get("audit_after"),
            verification=self.journal.details(VERIFY).get("verification") or self.journal.details(
                VERIFY, "failed").get("verification"),
            rollback=rollback, error=error, notes=list(self.plan.notes), started_at=started, finished_at=now_iso())
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

    # --- the lease ---------------------------------------------------------------------------------------

    def _hold_lease(self) -> None:
        """Hold the job's lease while files change (takes over the stale lease of a crashed attempt)."""
        if self.lease is None or self.lease.lost is not None:
            self.lease = control.acquire(self.layout, self.target.job, run_id=f"runbook-{self.plan.runbook_id}",
                                         runbook_id=self.plan.runbook_id, actor=self.plan.actor, mode=RUNBOOK,
                                         settings=self.control_settings)
        self.lease.ensure_held()

    def _release_lease(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def _stop_holder(self, reason: str) -> dict[str, Any]:
        """Stop whoever runs the job now: stop request, wait; past the timeout terminate or refuse."""
        holder = current_lease(self.layout, self.target.job)
        if holder is None or holder.stale_reason(self.control_settings) is not None or (
                self.lease is not None and holder.lease_id == self.lease.lease.lease_id):
            return {"how": "nothing was running" if holder is None else "no live holder",
                    "previous": asdict(holder) if holder else None}
        request = stops.request_stop(self.layout, self.target.job, actor=self.plan.actor, reason=reason,
                                     settings=self.control_settings)
        if request is None or control.wait_released(self.layout, self.target.job, request.lease_id,
                                                    self.settings.stop_timeout_seconds,
                                                    settings=self.control_settings):
            return {"how": "stopped by a stop request", "previous": asdict(holder)}
        if self.terminate is None or not self.terminate(holder):
            stops.withdraw(self.layout, self.target.job, request, actor=self.plan.actor,
                           reason=f"runbook {self.plan.runbook_id} refused: the query did not stop")
            raise RecoveryRefused(
                f"{self.target.job}: the running query ({holder.describe()}) did not stop within "
                f"{self.settings.stop_timeout_seconds:g} s and could not be terminated; nothing was changed. Fix: "
                f"stop it (stateops jobs stop {self.target.job} --wait 300) and run the runbook again, or raise "
                "STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS")
        dead = control.wait_released(self.layout, self.target.job, holder.lease_id,
                                     self.control_settings.lease_timeout_seconds + self.settings.stop_timeout_seconds,
                                     settings=self.control_settings)
        if not dead:
            raise RecoveryRefused(f"{self.target.job}: the run {holder.run_id} was terminated but still holds its "
                                  "lease; nothing was changed. Fix: make sure it ended, then run the runbook again")
        return {"how": "terminated after the stop timeout", "previous": asdict(holder)}

    # --- steps -------------------------------------------------------------------------------------------

    def _verify_source(self) -> dict[str, Any]:
        source = self.plan.request["archive_id"]
        problems = archive.verify(self.target.archive_root, source)
        if problems:
            raise RecoveryRefused(f"{self.target.job}: archive {source} does not verify against its manifest "
                                  f"({problems[0]}); nothing was changed")
        return {"archive_id": source}

    def _stop(self, why: str | None = None) -> dict[str, Any]:
        details = self._stop_holder(f"runbook {self.plan.runbook_id} ({self.plan.mode}): {why or self.plan.reason}")
        self._hold_lease()
        return details

    def _audit_before(self) -> dict[str, Any]:
        self._hold_lease()
        return {"audit": self.runtime.audit(self.target.checkpoint)}

    def _manifest(self, files: list[archive.FileEntry]) -> dict[str, Any]:
        checkpoint = Checkpoint.open(self.target.checkpoint)
        latest = checkpoint.latest_committed_batch()
        state = sinkstate.sink_state(self.layout, self.target.job)
        app = sinkstate.app_id(self.target.job, checkpoint.query_id(), state.epoch)
        watermark = checkpoint.watermark(latest)
        forced = overrides.in_force(self.layout, self.target.job)
        return {
            "archive_id": self.plan.runbook_id, "runbook_id": self.plan.runbook_id, "job": self.target.job,
            "created_at": now_iso(), "actor": self.plan.actor, "reason": self.plan.reason, "mode": self.plan.mode,
            "method": self.plan.archive["method"], "source": self.target.checkpoint, "query_id": checkpoint.query_id(),
            "latest_committed_batch": latest, "latest_offsets_batch": checkpoint.offset_batches()[-1],
            "watermark": watermark.isoformat() if watermark else None,
            "settings": {**self.plan.settings_before, "sink_epoch": state.epoch},
            "overrides": {name: change.value for name, change in forced.items()},
            "sink": {"table": self.target.sink_table, "version": sinkstate.table_version(self.target.sink_table),
                     "epoch": state.epoch, "app_id": app,
                     "transaction_version": sinkstate.transaction_version(self.target.sink_table, app)},
            "audit_before": self.journal.details(AUDIT_BEFORE).get("audit"),
            "total_bytes": sum(f.size for f in files), "files": [asdict(f) for f in files],
        }

    def _archive(self) -> dict[str, Any]:
        self._hold_lease()
        self.target.roots.confine(self.directory, job=self.target.job)
        path = posixpath.join(self.directory, archive.MANIFEST)
        found = archive.read_json(path)
        source = self.target.roots.confine(self.target.checkpoint, job=self.target.job)
        if found is None or archive.verify_tree(self.archived, found["files"]) and archive.tree_size(source):
            archive.remove_tree(self.archived)
            if self.plan.archive["method"] == "rename":
                found = self._manifest(archive.listing(source))
                archive.write_json(path, found)
                archive.move_tree(source, self.archived)
            else:
                partial = self.archived + ".partial"
                archive.remove_tree(partial)
                try:
                    files = archive.copy_tree(source, partial)
                except OSError as err:  # out of space or quota: give the room back; the source was only read
                    archive.remove_tree(partial)
                    raise StepFailed(f"the copy to {partial} failed ({err.strerror or err}): the checkpoint is "
                                     "untouched; point the job's archive_dir to a filesystem with room") from err
                found = self._manifest(files)
                archive.move_tree(partial, self.archived)
                archive.write_json(path, found)
        problems = archive.verify_tree(self.archived, found["files"])
        if problems:
            raise StepFailed(f"the archive does not verify against its manifest: {problems[0]}")
        return {"path": self.directory, "method": found["method"], "files": len(found["files"]),
                "bytes": found["total_bytes"], "latest_committed_batch": found["latest_committed_batch"],
                "sink_version": found["sink"]["version"]}

    def manifest(self) -> dict[str, Any]:
        return archive.read_json(posixpath.join(self.directory, archive.MANIFEST))

    def _set(self, setting: str, value: str | None) -> dict[str, Any] | None:
        """Put `setting` to `value` (None clears it) unless it already is; the change, if any."""
        forced = overrides.in_force(self.layout, self.target.job).get(setting)
        if (forced.value if forced else None) == value:
            return None
        why = f"runbook {self.plan.runbook_id} ({self.plan.mode}): {self.plan.reason}"
        if value is None:
            change = overrides.clear_override(self.layout, self.target.job, setting, reason=why, actor=self.plan.actor,
                                              runbook_id=self.plan.runbook_id)
        else:
            change = overrides.set_override(self.layout, self.target.job, setting, value, bounds=self.target.bounds,
                                            reason=why, actor=self.plan.actor, runbook_id=self.plan.runbook_id)
        return {"setting": setting, "value": value, "previous": change.previous if change else None}

    def _adjust(self) -> dict[str, Any]:
        self._hold_lease()
        after, before = self.plan.settings_after, self.plan.settings_before
        epoch = after["sink_epoch"]
        wanted: dict[str, str | None] = {}
        if self.plan.mode == "restore":
            kept = archive.manifest(self.target.archive_root, self.plan.request["archive_id"])["overrides"]
            wanted = {s: kept.get(s) for s in overrides.SETTINGS}
        else:
            for setting in overrides.SETTINGS:
                if after.get(setting) != before.get(setting):
                    wanted[setting] = str(after[setting])
        wanted[overrides.SINK_EPOCH] = str(epoch)
        wanted[overrides.SINK_REPLAY] = self._replay(epoch) if self.plan.mode == "rebuild" else None
        changes = [c for c in (self._set(s, v) for s, v in wanted.items()) if c]
        return {"changes": changes, "sink_epoch": epoch}

    def _replay(self, epoch: int) -> str:
        """A rebuild's sink rules: the write floor (incomplete input) and the insert-if-absent horizon."""
        cover = coverage.assess(self.layout, Checkpoint(self.archived), self.target)
        horizon = (sinkstate.max_time(self.target.sink_table, self.target.output_time_column)
                   if self.target.output_mode == "append" else None)
        if self.target.output_mode == "append" and horizon is None and sinkstate.table_version(
                self.target.sink_table) is not None:
            horizon = 2 ** 62  # no time column to bound repeats by: every row is inserted only if absent
        return sinkstate.replay_value(epoch, cover.write_floor_ms, horizon)

    def _complete(self, name: str) -> bool:
        """An interrupted step that is not idempotent: did it complete? Half-done raises (rollback)."""
        if name == REPARTITION:
            checkpoint = Checkpoint.open(self.target.checkpoint)
            kept = self.manifest()
            committed, offsets = checkpoint.committed_batches(), checkpoint.offset_batches()
            if committed[-1] > kept["latest_committed_batch"] and checkpoint.shuffle_partitions(
                    committed[-1]) == self.plan.settings_after["shuffle_partitions"]:
                return True
            if offsets[-1] > kept["latest_offsets_batch"]:
                raise StepFailed("the offline repartition was interrupted half-way (a new batch is planned but not "
                                 "committed)")
            return False
        if name == RESTART:  # a long-running restart: launched if a run of this runbook holds the lease
            holder = current_lease(self.layout, self.target.job)
            return (holder is not None and holder.runbook_id == self.plan.runbook_id and holder.mode != RUNBOOK
                    and holder.stale_reason(self.control_settings) is None)
        return False

    def _repartition(self) -> dict[str, Any]:
        self._hold_lease()
        partitions = self.plan.settings_after["shuffle_partitions"]
        self.runtime.repartition(self.target.checkpoint, partitions)
        checkpoint = Checkpoint.open(self.target.checkpoint)
        batch = checkpoint.latest_committed_batch()
        return {"batch": batch, "partitions": partitions, "audit": self.runtime.audit(self.target.checkpoint, batch)}

    def _rewind_cut(self) -> dict[str, Any]:
        self._hold_lease()
        to_batch = self.plan.request["to_batch"]
        counts = surgery.rewind(self.target.roots.confine(self.target.checkpoint, job=self.target.job), to_batch,
                                self.archived)
        return {**counts, "to_batch": to_batch}

    def _fresh_checkpoint(self) -> dict[str, Any]:
        self._hold_lease()
        archive.remove_tree(self.target.roots.confine(self.target.checkpoint, job=self.target.job))
        return {"checkpoint": self.target.checkpoint}

    def _restore_checkpoint(self) -> dict[str, Any]:
        self._hold_lease()
        source = self.plan.request["archive_id"]
        self._put_back(source)
        return {"archive_id": source}

    def _put_back(self, runbook_id: str, failed_to: str | None = None) -> None:
        """Put archive `runbook_id`'s checkpoint in place; what is there now moves to `failed_to` (or is removed:
        the runbook's own archive holds it)."""
        checkpoint = self.target.roots.confine(self.target.checkpoint, job=self.target.job)
        kept = archive.manifest(self.target.archive_root, runbook_id)
        if exists(checkpoint):
            if not archive.verify_tree(checkpoint, kept["files"]):
                return  # already in place
            if failed_to:
                archive.move_tree(checkpoint, failed_to)
            else:
                archive.remove_tree(checkpoint)
        archive.copy_checkpoint_back(self.target.archive_root, runbook_id, checkpoint)

    def _align_target(self, rollback: bool) -> int | None:
        uri = self.target.sink_table
        latest = sinkstate.table_version(uri)
        if latest is None:
            return None
        if self.journal.phase("rollback_sink" if rollback else ALIGN_SINK) == "started":
            return self.journal.details("rollback_sink" if rollback else ALIGN_SINK, "started").get("target_version")
        if rollback or self.plan.mode == "restore":
            kept = self.manifest() if rollback else archive.manifest(self.target.archive_root,
                                                                    self.plan.request["archive_id"])
            if kept["sink"]["version"] is None:
                return -1
            prefix = sinkstate.checkpoint_app_prefix(self.target.job, kept["query_id"])
            return sinkstate.aligned_version(uri, prefix, kept["latest_committed_batch"], kept["sink"]["version"])
        checkpoint = Checkpoint.open(self.target.checkpoint)
        prefix = sinkstate.checkpoint_app_prefix(self.target.job, checkpoint.query_id())
        return sinkstate.aligned_version(uri, prefix, checkpoint.latest_committed_batch(), latest)

    def _align(self, target_version: int | None) -> dict[str, Any]:
        self._hold_lease()
        if target_version is None:
            return {"restored": False, "reason": "no sink table yet"}
        if target_version < 0:
            return {"restored": False, "reason": "the sink table did not exist when the archive was taken",
                    "note": "rows written since stay"}
        return sinkstate.restore(self.target.sink_table, target_version)

    def _align_sink(self) -> dict[str, Any]:
        return self._align(self.journal.details(ALIGN_SINK, "started").get("target_version"))

    def _start_state(self) -> dict[str, Any]:
        """Where the restart begins: its checkpoint's latest batch and watermark (empty for a fresh one)."""
        try:
            checkpoint = Checkpoint.open(self.target.checkpoint)
            latest = checkpoint.latest_committed_batch()
        except StateOpsError:
            return {"latest_committed_batch": None, "watermark_ms": 0}
        return {"latest_committed_batch": latest, "watermark_ms": _next_watermark(checkpoint, latest)}

    def _launch(self) -> dict[str, Any]:
        start = self._start_state()
        self._release_lease()
        if self.plan.restart_mode == "continuous":
            return {**start, "how": "continuous", **self.runtime.launch_continuous(self.plan.runbook_id,
                                                                                   self.plan.running)}
        try:
            result = self.runtime.run_bounded(self.plan.runbook_id)
        except Exception as err:  # noqa: BLE001
            raise StepFailed(f"the restart failed: {_one_line(err)}") from err
        return {**start, "how": "bounded", **result}

    def _restart(self) -> dict[str, Any]:
        return self._launch()

    def _observe(self, restart: dict[str, Any]) -> dict[str, Any]:
        """How the restarted run went: error, run id, its progress rows, caught up (it read every available
        input; `reading` says what was seen), timed out. A long-running restart is watched until it completed
        K batches with input or caught up (a quiet stream), or the verification timeout."""
        if restart["how"] == "bounded":
            return {"error": None, "run_id": restart["run_id"], "progress": self._progress(restart["run_id"]),
                    "caught_up": True, "reading": None, "timed_out": False}
        deadline = time.monotonic() + self.settings.verify_timeout_seconds
        run_id = None
        while True:
            holder = current_lease(self.layout, self.target.job)
            ours = holder is not None and holder.runbook_id == self.plan.runbook_id and holder.mode != RUNBOOK
            live = ours and holder.stale_reason(self.control_settings) is None
            if live:
                run_id = holder.run_id
            elif run_id is not None or ours or (restart.get("pid") and not alive(restart["pid"], None)):
                return {"error": f"the restarted run ended{_log_tail(restart)}", "run_id": run_id,
                        "progress": self._progress(run_id) if run_id else [], "caught_up": False, "reading": None,
                        "timed_out": False}
            rows = self._progress(run_id) if run_id else []
            with_input = [r for r in rows if r["input_rows"]]
            caught, reading = False, None
            if run_id:
                caught, reading = verify.caught_up(observe_reading(self.layout, self.target, run_id, live,
                                                                   restart.get("latest_committed_batch")))
            done = len(with_input) >= self.settings.verify_batches or caught
            if done or time.monotonic() > deadline:
                error = None if run_id else (f"the restarted run did not start within "
                                             f"{self.settings.verify_timeout_seconds:g} s{_log_tail(restart)}")
                return {"error": error, "run_id": run_id, "progress": rows, "caught_up": caught, "reading": reading,
                        "timed_out": not done}
            time.sleep(self.settings.poll_seconds)

    def _progress(self, run_id: str) -> list[dict[str, Any]]:
        table = read_table(self.layout.ops_table(progress_table.TABLE), filters=[("stateops_run_id", "=", run_id)])
        rows = [] if table is None else [r for r in table.to_pylist() if r["query_name"] == self.target.job]
        return [{"batch_id": r["batch_id"], "input_rows": r["input_rows"],
                 "event_time_max_ms": _ms(r.get("event_time_max")), "watermark_ms": _ms(r["watermark"])}
                for r in sorted(rows, key=lambda r: r["batch_id"])]

    def _progress_through(self, run_id: str, batch: int, started_after: int | None) -> list[dict[str, Any]]:
        """The run's progress rows up to `batch`, once the row of `batch` is recorded (the listener appends it
        just after the commit); batches up to `started_after` ran before the restart."""
        deadline = time.monotonic() + self.settings.verify_timeout_seconds
        while True:
            rows = self._progress(run_id)
            if (started_after is not None and batch <= started_after) or any(
                    r["batch_id"] >= batch for r in rows) or time.monotonic() > deadline:
                return [r for r in rows if r["batch_id"] <= batch]
            time.sleep(self.settings.poll_seconds)

    def _verification(self, restart_step: str, start_audit: dict | None, expected_partitions: int | None,
                      first_batch: int | None) -> dict[str, Any]:
        restart = self.journal.details(restart_step)
        seen = self._observe(restart)
        error, progress = seen["error"], seen["progress"]
        checkpoint = Checkpoint.open(self.target.checkpoint)
        audited = checkpoint.latest_committed_batch()
        audit_after = None
        if error is None:
            # A long-running restart goes on while this looks: audit one committed batch and judge it by the
            # progress of exactly the batches up to it (a later batch's input would be missing from the bound).
            audit_after = self.runtime.audit(self.target.checkpoint, audited)
            if seen["run_id"]:
                progress = self._progress_through(seen["run_id"], audited, restart.get("latest_committed_batch"))
        end = _next_watermark(checkpoint, audited)
        delay = parse_seconds(overrides.validate(self.target.job, overrides.WATERMARK_DELAY,
                                                 self.plan.settings_after["watermark_delay"], self.target.bounds))
        result = verify.evaluate(
            error=error, progress=progress, batches_wanted=self.settings.verify_batches, caught_up=seen["caught_up"],
            reading=seen["reading"],
            start_watermark_ms=restart["watermark_ms"], end_watermark_ms=end, delay_ms=delay * 1000,
            single_watermark=self.target.inputs == 1, first_batch=first_batch, audit_start=start_audit,
            audit_after=audit_after, expected_partitions=expected_partitions,
            duplicates=sinkstate.duplicate_keys(self.target.sink_table, self.target.row_key),
            timed_out=seen["timed_out"])
        result.update(run_id=seen["run_id"], progress=progress, caught_up=seen["caught_up"],
                      timed_out=seen["timed_out"])
        return {"verification": result, "audit_after": audit_after}

    def _verify(self) -> dict[str, Any]:
        mode, before = self.plan.mode, self.journal.details(AUDIT_BEFORE).get("audit")
        start = {"adjust": before, "repartition": self.journal.details(REPARTITION).get("audit"),
                 "rewind": None, "rebuild": None,
                 "restore": (archive.manifest(self.target.archive_root, self.plan.request.get("archive_id") or "")
                             or {}).get("audit_before")}[mode]
        if mode == "rewind":  # the state the replay starts from (still retained: the cut kept version N+1)
            start = self.runtime.audit(self.target.checkpoint, self.plan.request["to_batch"])
        partitions = (self.plan.settings_after["shuffle_partitions"] if mode in ("repartition", "rebuild")
                      else _partitions(start))
        first = self.plan.request["to_batch"] + 1 if mode == "rewind" else None
        details = self._verification(RESTART, start, partitions, first)
        if not details["verification"]["ok"]:
            raise StepFailed(f"verification failed: {verify.failures(details['verification'])}", details)
        return details

    # --- rollback ----------------------------------------------------------------------------------------

    def _rollback_handlers(self) -> dict[str, Callable[[], dict[str, Any]]]:
        return dict(zip(ROLLBACK_STEPS, (lambda: self._stop("rollback"), self._rb_checkpoint, self._rb_settings,
                                          self._rb_sink, self._rb_restart, self._rb_verify)))

    def _rollback(self) -> tuple[str, dict[str, Any]]:
        reason = self.journal.details(ROLLBACK, "started").get("reason")
        archived = self.journal.phase(ARCHIVE) == "done"
        steps = ROLLBACK_STEPS if archived else ("rollback_stop", "rollback_restart")
        if self.journal.phase(STOP) != "done" and not archived:
            self.journal.record(ROLLBACK, "done", {"reason": reason, "note": "nothing was stopped or changed"})
            return "rolled_back", {"reason": reason, "note": "nothing was stopped or changed"}
        try:
            for name in steps:
                if name == "rollback_restart" and self.journal.details(STOP).get("how") in (
                        "nothing was running", "no live holder") and not archived:
                    continue
                self._step(name)
        except Exception as err:  # noqa: BLE001
            self._release_lease()
            self.journal.record(ROLLBACK, "failed", {"error": _one_line(err)})
            return "failed", {"reason": reason, "error": _one_line(err)}
        self.journal.record(ROLLBACK, "done", {"reason": reason})
        return "rolled_back", {"reason": reason,
                               "verification": self.journal.details("rollback_verify").get("verification")}

    def _rb_checkpoint(self) -> dict[str, Any]:
        self._hold_lease()
        first = posixpath.join(self.directory, archive.FAILED)
        # an interrupted rollback may have moved the failed attempt already: a second one never overwrites it
        failed = posixpath.join(self.directory, f"{archive.FAILED}-{int(time.time())}") if archive.tree_size(
            first) else first
        self._put_back(self.plan.runbook_id, failed_to=failed)
        return {"failed_attempt": next((p for p in (first, failed) if archive.tree_size(p)), None)}

    def _rb_settings(self) -> dict[str, Any]:
        self._hold_lease()
        kept = self.manifest()["overrides"]
        epoch = sinkstate.next_epoch(self.layout, self.target.job)
        wanted = {s: kept.get(s) for s in overrides.SETTINGS}
        wanted.update({overrides.SINK_EPOCH: str(epoch), overrides.SINK_REPLAY: None})
        changes = [c for c in (self._set(s, v) for s, v in wanted.items()) if c]
        return {"changes": changes, "sink_epoch": epoch}

    def _rb_sink(self) -> dict[str, Any]:
        return self._align(self.journal.details("rollback_sink", "started").get("target_version"))

    def _rb_restart(self) -> dict[str, Any]:
        if self.journal.phase("rollback_restart") == "started" and self.plan.restart_mode == "continuous":
            holder = current_lease(self.layout, self.target.job)
            if holder is not None and holder.runbook_id == self.plan.runbook_id and holder.mode != RUNBOOK:
                return {**self._start_state(), "how": "continuous", "note": "launched before the interruption"}
        return self._launch()

    def _rb_verify(self) -> dict[str, Any]:
        kept = self.manifest() or {}
        details = self._verification("rollback_restart", kept.get("audit_before"), _partitions(
            kept.get("audit_before")), None)
        if not details["verification"]["ok"]:
            raise StepFailed(f"the query did not run healthily after the rollback either: "
                             f"{verify.failures(details['verification'])}", details)
        return details


def observe_reading(layout: Layout, target: JobTarget, run_id: str, running: bool,
                    start_batch: int | None) -> verify.Reading:
    """What run `run_id` of the job has read so far, for verify.caught_up: the checkpoint's batches, the
    stateful query's latest idle report (written by the run: stateops.progress.record_idle) and the available
    input the checkpoint has not read. The checkpoint is read first: input landing meanwhile counts as unread.
    running: the run holds the job's live lease; start_batch: the checkpoint's latest batch when it started."""
    try:
        checkpoint: Checkpoint | None = Checkpoint.open(target.checkpoint)
        committed, planned = checkpoint.committed_batches(), checkpoint.offset_batches()
    except StateOpsError:  # a fresh checkpoint before its first batch
        checkpoint, committed, planned = None, [], []
    idle = progress_table.idle_report(layout, target.job, run_id, target.job) or {}
    return verify.Reading(running=running, start_batch=start_batch, committed=committed[-1] if committed else None,
                          planned=planned[-1] if planned else None, idle_at=idle.get("idle_at"),
                          idle_after=idle.get("after_batch"), unread=_unread(target, checkpoint))


def _unread(target: JobTarget, checkpoint: Checkpoint | None) -> tuple[str, ...] | None:
    """The available input `checkpoint` has not read: file sources, the landed files its source logs do not
    name. None for a source that cannot tell (Kafka: its progress rows' sources[].latestOffset against
    endOffset would plug in here)."""
    if not target.landing:
        return None
    read = {coverage.plain(p) for files in (checkpoint.source_files() if checkpoint else {}).values()
            for p, _ in files}
    landed = set().union(*(coverage.landing_files(folder) for folder in target.landing))
    return tuple(sorted(landed - read))


def _partitions(audit: dict | None) -> int | None:
    counts = {op["num_partitions"] for op in (audit or {}).get("operators", [])}
    return counts.pop() if len(counts) == 1 else None


def _next_watermark(checkpoint: Checkpoint, batch: int) -> int:
    """The watermark after `batch` (commits/<batch>'s nextBatchWatermarkMs), 0 before any."""
    return coverage.next_watermark(checkpoint, batch)


def _log_tail(restart: dict[str, Any]) -> str:
    path = restart.get("log")
    if not path:
        return ""
    try:
        with open(path, errors="replace") as handle:
            lines = [line.strip() for line in handle.read().splitlines() if line.strip()]
    except OSError:
        return ""
    return f" (log {path}: {lines[-1][:300]})" if lines else f" (log {path})"


def execute(layout: Layout, target: JobTarget, plan: RecoveryPlan, runtime: Runtime, *,
            settings: RecoverySettings | None = None, on_event: Callable[[RecoveryEvent], None] | None = None,
            terminate: Terminate | None = None) -> RecoveryReport:
    """Apply a confirmed plan (or resume it): see the module doc."""
    return Executor(layout, target, plan, runtime, settings=settings, on_event=on_event, terminate=terminate).run()


def planned_report(plan: RecoveryPlan) -> RecoveryReport:
    """The report of a dry run: the plan, nothing done."""
    return RecoveryReport(runbook_id=plan.runbook_id, job=plan.job, mode=plan.mode, outcome="planned",
                          plan=plan.to_dict(), notes=list(plan.notes),
                          started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
