"""The planner: an inventory, the policies and the jobs' control state in, a Plan out (pure data).

Checkpoints of configured jobs (the job's query, and a dead-letter query not yet retired): batches F..latest stay
restorable, where F keeps at least Spark's minBatchesToRetain batches, the job's `rewind_batches`, and
every batch planned within `rewind_within` (never below what is still there); every file no restart from
those batches needs is history (restart.history). While anything holds the job's lease (even a stale one:
its holder may be frozen, not dead) only provably unreferenced files are planned: no temp files. While a
runbook holds the job's maintenance lock, the job's checkpoints and archives are left alone.

Archives: the newest `keep_archives` and those younger than `keep_archives_for` stay, and so do archives
whose runbook has not finished or is running now, and the newest archive that verifies against its
manifest (none is deleted when none verifies). Orphan checkpoints idle for `orphan_idle` are archived or
deleted. Ops and dead-letter tables: vacuum, log cleanup, row retention, compaction (stateops.retention.tables).
"""
from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Mapping

from stateops.control import current_lease, maintenance
from stateops.durations import parse_seconds
from stateops.checkpoints import restart
from stateops.retention import tables
from stateops.retention.inventory import ArchiveEntry, CheckpointEntry, Inventory, TableEntry
from stateops.retention.model import (ARCHIVE_RETENTION, ARCHIVE_TREE, CHECKPOINT_HISTORY, CLEANUP_LOG, COMPACT,
                                      DEADLETTER_RETENTION, DELETE_FILES, DELETE_TREE, DROP_ROWS, OPS_COMPACT,
                                      OPS_LOG_CLEANUP, OPS_VACUUM, ORPHAN_CHECKPOINT, PROGRESS_HORIZON,
                                      ROLLUP_ROWS, TEMP_FILES, UNREFERENCED_FILES, VACUUM, Item, Plan)
from stateops.retention.policy import JobPolicy
from stateops.retention.scope import Scope
from stateops.roots import Roots

DEADLETTER_TIME = "recorded_at"   # when a dead letter was written (rows without it are kept)


def orphan_name(path: str) -> str:
    """A name for an orphan's archive that differs between a job's checkpoint and its dead-letter checkpoint
    (`checkpoints/x` and `checkpoints/_deadletter/x`: one name would make the second archive overwrite the
    first)."""
    parent, name = posixpath.split(path.rstrip("/"))
    return f"deadletter-{name}" if posixpath.basename(parent) == "_deadletter" else name


@dataclass(frozen=True)
class JobControl:
    """A job's control state when planning: who holds its lease (any record: live or stale) and its lock."""

    lease: str | None = None        # the holder, described; None: no lease record
    maintenance: str | None = None  # the runbook holding the maintenance lock, described


def promised_floor(files: restart.CheckpointFiles, policy: JobPolicy, min_batches: int, now: datetime,
                   oldest: int | None) -> tuple[int, str]:
    """The oldest batch that must stay restorable, and why."""
    latest = files.latest
    keep = max(min_batches, policy.rewind_batches, 1)
    floor = latest - keep + 1
    why = [f"Spark's minBatchesToRetain {min_batches}"]
    if policy.rewind_batches:
        why.append(f"rewind_batches {policy.rewind_batches}")
    within = parse_seconds(policy.rewind_within) or 0
    if within:
        cutoff = (now - timedelta(seconds=within)).timestamp() * 1000
        recent = [b for b in files.commits if files.timestamps.get(b, -1) >= cutoff]
        if recent:
            floor = min(floor, recent[0])
        why.append(f"rewind_within {policy.rewind_within}")
    if oldest is not None and floor < oldest:
        floor = oldest
        why.append(f"batch {oldest} is the oldest still there")
    return max(floor, 0), ", ".join(why)


class Planner:
    def __init__(self, inventory: Inventory, controls: Mapping[str, JobControl], now: datetime,
                 verify: Callable[[ArchiveEntry], list[str]]):
        self.inventory, self.scope = inventory, inventory.scope
        self.controls, self.now, self.verify = controls, now, verify
        self.items: list[Item] = []
        self.kept: list[dict] = []
        self.skipped: list[dict] = []

    def _add(self, **fields) -> None:
        self.items.append(Item(item_id=f"r{len(self.items) + 1:04d}", **fields))

    def _skip(self, target: str, job: str | None, reason: str) -> None:
        self.skipped.append({"target": target, "job": job, "reason": reason})

    def _files(self, entry: CheckpointEntry | TableEntry, rule: str, action: str, rels, reason: str, *,
               base: str = "", details: dict | None = None) -> None:
        tree = entry.tree.sub(base) if base else entry.tree
        paths = tuple((f"{base}/{rel}" if base else rel, tree.files[rel].size) for rel in rels if rel in tree.files)
        if paths:
            self._add(rule=rule, action=action, job=entry.job, target=entry.path, bytes=sum(s for _, s in paths),
                      files=len(paths), reason=reason, paths=paths, details=details or {})

    # --- checkpoints ----------------------------------------------------------------------------------

    def checkpoint(self, entry: CheckpointEntry) -> None:
        control = self.controls.get(entry.job, JobControl())
        if control.maintenance:
            self._skip(entry.path, entry.job, f"under maintenance: {control.maintenance}")
            return
        policy = self.scope.policies.for_job(entry.job)
        if entry.files is None or entry.latest is None:
            self._skip(entry.path, entry.job, "no committed batch yet")
            return
        if not policy.checkpoint_history:
            self._skip(entry.path, entry.job, "checkpoint_history = false")
            return
        oldest = entry.restorable[0] if entry.restorable else None
        floor, why = promised_floor(entry.files, policy, self.scope.min_batches_to_retain, self.now, oldest)
        found = restart.history(entry.files, floor, live=control.lease is not None)
        for problem in found.problems:
            self._skip(entry.path, entry.job, problem)
        self.kept.append({"target": entry.path, "job": entry.job, "floor": found.floor, "latest": entry.latest,
                          "reason": f"batches {found.floor}..{entry.latest} stay restorable ({why})"})
        where = f"{entry.kind} checkpoint {entry.path}"
        details = {"floor": found.floor, "latest": entry.latest, "live": control.lease is not None}
        self._files(entry, CHECKPOINT_HISTORY, DELETE_FILES, found.state + found.logs,
                    f"{where}: state versions and logs before what batch {found.floor} needs", details=details)
        self._files(entry, UNREFERENCED_FILES, DELETE_FILES, found.unreferenced,
                    f"{where}: immutable files no kept snapshot names", details=details)
        if control.lease is None:
            self._files(entry, TEMP_FILES, DELETE_FILES, found.temp,
                        f"{where}: temp files of interrupted writes, checksums of missing files", details=details)
        elif found.temp:
            self._skip(entry.path, entry.job, f"{len(found.temp)} temp file(s) kept: the lease is held by "
                                              f"{control.lease}")

    def orphan(self, entry: CheckpointEntry) -> None:
        policies = self.scope.policies
        if entry.files is None:
            self._skip(entry.path, None, "not a checkpoint (no metadata or offsets/): left alone")
            return
        idle = self.now.timestamp() - (entry.tree.last_modified() or 0)
        limit = parse_seconds(policies.orphan_idle)
        if idle < limit or policies.orphan_action == "keep":
            why = "orphan_action = keep" if policies.orphan_action == "keep" else \
                f"idle {idle / 86400:.1f} days, less than orphan_idle {policies.orphan_idle}"
            self._skip(entry.path, None, f"orphan checkpoint kept: {why}")
            return
        reason = (f"checkpoint of no configured job, idle {idle / 86400:.1f} days (orphan_idle "
                  f"{policies.orphan_idle})")
        details = {"last_modified": entry.tree.last_modified(), "bytes_moved": 0, "files_moved": 0}
        if policies.orphan_action == "delete":
            self._add(rule=ORPHAN_CHECKPOINT, action=DELETE_TREE, job=None, target=entry.path,
                      bytes=entry.tree.bytes(), files=len(entry.tree), reason=f"{reason}: deleted", details=details)
            return
        archive_id = f"orphan-{orphan_name(entry.path)}-{self.now.strftime('%Y%m%dT%H%M%SZ')}"
        details.update(bytes_moved=entry.tree.bytes(), files_moved=len(entry.tree), archive_id=archive_id,
                       destination=posixpath.join(self.scope.orphan_archive_root, archive_id))
        self._add(rule=ORPHAN_CHECKPOINT, action=ARCHIVE_TREE, job=None, target=entry.path, bytes=0, files=0,
                  reason=f"{reason}: archived to {details['destination']} (frees nothing until that archive "
                         "expires)", details=details)

    # --- archives ---------------------------------------------------------------------------------------

    def archives(self, job: str | None, entries: list[ArchiveEntry]) -> None:
        control = self.controls.get(job, JobControl()) if job else JobControl()
        if control.maintenance:
            for entry in entries:
                self._skip(entry.path, job, f"under maintenance: {control.maintenance}")
            return
        policy = self.scope.policies.for_job(job) if job else self.scope.policies.default
        archives = sorted((e for e in entries if e.manifest is not None), key=lambda e: e.created, reverse=True)
        young = self.now.timestamp() - parse_seconds(policy.keep_archives_for)
        candidates = [e for i, e in enumerate(archives)
                      if i >= policy.keep_archives and e.created < young and not e.in_use]
        if not candidates:
            return
        protected = next((e for e in archives if not self.verify(e)), None)
        if protected is None:
            self._skip(archives[0].path, job, "no archive of this job verifies against its manifest: none is "
                                              "deleted (the last verified one is never deleted)")
            return
        self.kept.append({"target": protected.path, "job": job,
                          "reason": "the newest archive that verifies against its manifest"})
        for entry in candidates:
            if entry is protected:
                continue
            age = (self.now.timestamp() - entry.created) / 86400
            self._add(rule=ARCHIVE_RETENTION, action=DELETE_TREE, job=job, target=entry.path,
                      bytes=entry.tree.bytes(), files=len(entry.tree),
                      reason=f"archive {entry.archive_id} of {job or 'an orphan checkpoint'}, {age:.1f} days old, "
                             f"beyond the newest {policy.keep_archives} and older than {policy.keep_archives_for}",
                      details={"archive_id": entry.archive_id, "created": entry.created,
                               "protected": protected.archive_id})

    # --- tables -------------------------------------------------------------------------------------------

    def table(self, entry: TableEntry) -> None:
        ops = self.scope.policies.ops_tables
        if entry.kind not in ("ops", "deadletter"):
            return
        job = entry.job
        if job and self.controls.get(job, JobControl()).maintenance:
            self._skip(entry.path, job, f"under maintenance: {self.controls[job].maintenance}")
            return
        name = f"{entry.kind} table {entry.name}"
        vac = tables.vacuum_candidates(entry.path, ops.vacuum_after)
        self._files(entry, OPS_VACUUM, VACUUM, vac, f"{name}: files no version within {ops.vacuum_after} uses",
                    details={"vacuum_after": ops.vacuum_after})
        log = entry.log()
        expired = tables.log_candidates(entry.path, {rel: e.mtime for rel, e in log.files.items()},
                                        ops.log_retention, self.now)
        self._files(entry, OPS_LOG_CLEANUP, CLEANUP_LOG, expired,
                    f"{name}: log entries older than {ops.log_retention} before a checkpoint",
                    base="_delta_log", details={"log_retention": ops.log_retention})
        if entry.kind == "ops" and tables.is_progress(entry.name) and ops.progress_old_rows != "keep":
            cutoff = tables.progress_cutoff(ops.progress_horizon, self.now)
            rows = tables.rows_before(entry.path, "timestamp", cutoff)
            if rows:
                rollup = ops.progress_old_rows == "rollup"
                self._add(rule=PROGRESS_HORIZON, action=ROLLUP_ROWS if rollup else DROP_ROWS, job=None,
                          target=entry.path, bytes=0, files=0,
                          reason=f"{rows:,} progress rows before {cutoff.isoformat()} "
                                 + ("rolled up per query and hour into progress_rollup" if rollup else "dropped")
                                 + " (their files go at a later vacuum)",
                          details={"rows": rows, "cutoff": cutoff.isoformat(), "column": "timestamp"})
        if entry.kind == "deadletter":
            keep = self.scope.policies.for_job(job).deadletter_seconds()
            if keep is not None:
                cutoff = self.now - timedelta(seconds=keep)
                rows = tables.rows_before(entry.path, DEADLETTER_TIME, cutoff)
                if rows:
                    self._add(rule=DEADLETTER_RETENTION, action=DROP_ROWS, job=job, target=entry.path, bytes=0,
                              files=0, reason=f"{rows:,} dead letters recorded before {cutoff.isoformat()} "
                                              "(their files go at a later vacuum)",
                              details={"rows": rows, "cutoff": cutoff.isoformat(), "column": DEADLETTER_TIME})
        small = [rel for rel, size in entry.active.items() if size < ops.small_file_bytes]
        if ops.compact and len(small) >= max(ops.compact_min_files, 2):
            self._add(rule=OPS_COMPACT, action=COMPACT, job=job, target=entry.path, bytes=0, files=0,
                      reason=f"{name}: {len(small)} small files compacted, log checkpointed (the replaced "
                             f"files go at a vacuum after {ops.vacuum_after})",
                      details={"small_files": len(small)})

    def plan(self) -> Plan:
        inventory = self.inventory
        for entry in inventory.checkpoints:
            if entry.kind == "orphan":
                self.orphan(entry)
            else:
                self.checkpoint(entry)
        groups: dict[str | None, list[ArchiveEntry]] = {}
        for archive in inventory.archives:
            groups.setdefault(archive.job, []).append(archive)
        for job, entries in groups.items():
            self.archives(job, entries)
        for table in inventory.tables:
            self.table(table)
        return Plan(plan_id=uuid.uuid4().hex[:12], created_at=self.now.isoformat(timespec="seconds"),
                    home=self.scope.layout.home, roots=tuple(self.scope.roots.roots), items=tuple(self.items),
                    kept=tuple(self.kept), skipped=tuple(self.skipped))


def confine(plan: Plan, roots: Roots) -> None:
    """Every path an item would touch passes the roots guard (OutsideRootsError otherwise): the folders of
    the files it deletes (a symlinked folder resolves where it points; deleting a file that is itself a
    symlink removes the link only), the trees it deletes or archives, the tables it maintains."""
    for item in plan.items:
        for folder in sorted({posixpath.dirname(f"{item.target}/{rel}") for rel, _ in item.paths} | {item.target}):
            roots.confine(folder, job=item.job)
        if item.details.get("destination"):
            roots.confine(item.details["destination"], job=None)


def make_plan(inventory: Inventory, controls: Mapping[str, JobControl], verify: Callable[[ArchiveEntry], list[str]],
              now: datetime | None = None) -> Plan:
    plan = Planner(inventory, controls, now or datetime.now(timezone.utc), verify).plan()
    confine(plan, inventory.scope.roots)
    return plan


def read_controls(scope: Scope, jobs=None) -> dict[str, JobControl]:
    """Each job's lease holder (any record) and maintenance lock, from the control records (no lock taken)."""
    out = {}
    for job in scope.jobs if jobs is None else jobs:
        lease = current_lease(scope.layout, job)
        lock = maintenance.current(scope.layout, job)
        out[job] = JobControl(lease=lease.describe() if lease else None, maintenance=lock.describe() if lock else None)
    return out
