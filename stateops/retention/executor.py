"""The executor: applies a plan item by item, each re-checked just before it acts, each journaled.

Holds every root's retention lock for the whole run (one run per root), and plans afresh under it unless the
caller has just planned. Per item:
- confined again by the roots guard (a saved plan may have been edited);
- admitted only as the fresh plan has it, narrowed to what the item asked for (admission.py): a plan file
  is a request, so nothing is done that the plan command would not plan now;
- re-checked against the files as they are now: checkpoint files are deleted only if a fresh look at
  the checkpoint (its listing, the job's lease and maintenance lock now, the policy's floor from the
  latest batch now) still finds them unneeded and unchanged in size; an archive only if it is unchanged,
  finished, and the newest verified archive is still there and verifies; an orphan only if it is still
  no job's, still idle, unchanged; nothing of a job a runbook holds under maintenance;
- journaled in the `actions` ops table before (`started`, with the plan's paths, bytes and rule) and
  after (`done`, `partial`, `refused` or `failed`, with what was really freed), with the run id.
Bytes freed are measured: the sizes, from a listing taken just before, of the files that are gone after.
"""
from __future__ import annotations

import posixpath
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from stateops import actions
from stateops.durations import parse_seconds
from stateops.errors import StateOpsError, first_line
from stateops.storage import remove_all
from stateops.storage.copies import remove_tree
from stateops.checkpoints import restart
from stateops.retention import lock, tables
from stateops.retention.admission import Admission
from stateops.retention.inventory import ArchiveEntry, archive_root, archives_in, checkpoint_entry
from stateops.checkpoints.listing import Tree
from stateops.retention.model import (ARCHIVE_RETENTION, ARCHIVE_TREE, CHECKPOINT_HISTORY, CLEANUP_LOG, COMPACT,
                                      DELETE_FILES, DELETE_TREE, DROP_ROWS, ROLLUP_ROWS, TEMP_FILES,
                                      UNREFERENCED_FILES, VACUUM, ApplyReport, Item, ItemResult, Plan)
from stateops.retention.planner import JobControl, promised_floor, read_controls
from stateops.retention.scope import Scope

ACTION = "retention"


class Refused(StateOpsError):
    """The item may not act now (one line: why)."""


def _gone(before: Tree, after: Tree) -> tuple[int, int]:
    removed = [rel for rel in before.files if rel not in after.files]
    return sum(before.files[rel].size for rel in removed), len(removed)


def _written(before: Tree, after: Tree) -> int:
    return sum(e.size for rel, e in after.files.items() if rel not in before.files)


class Executor:
    def __init__(self, scope: Scope, plan: Plan, *, actor: str, verify: Callable[[ArchiveEntry], list[str]],
                 archive: Callable[[str, str, dict[str, Any]], None], replan: Callable[[], Plan],
                 current: Plan | None = None, run_id: str | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        """`replan` makes the plan the planner would make now (called under the lock unless `current`, a plan
        the caller has just made, is given)."""
        self.scope, self.plan, self.actor, self.verify, self.archive = scope, plan, actor, verify, archive
        self.replan, self.current = replan, current
        self.run_id = run_id or uuid.uuid4().hex
        self.now = now

    # --- bookkeeping ----------------------------------------------------------------------------------

    def _journal(self, item: Item, phase: str, details: dict[str, Any]) -> None:
        actions.record(self.scope.layout, item.job, ACTION, phase, actor=self.actor, run_id=self.run_id,
                       details={"item_id": item.item_id, "rule": item.rule, "action": item.action,
                                "path": item.target, "plan_id": self.plan.plan_id, **details})

    def _control(self, item: Item) -> JobControl:
        """The job's lease and maintenance lock as they are now."""
        control = read_controls(self.scope, [item.job]).get(item.job, JobControl()) if item.job else JobControl()
        if control.maintenance:
            raise Refused(f"{item.job} is under maintenance ({control.maintenance}); retention leaves it alone")
        return control

    # --- items ------------------------------------------------------------------------------------------

    def _checkpoint_files(self, item: Item) -> ItemResult:
        control = self._control(item)
        if item.rule == TEMP_FILES and control.lease:
            raise Refused(f"{item.job}'s lease is held by {control.lease}; while a job holds its lease only "
                          "provably unreferenced files are removed, never temp files. Fix: retry when the run "
                          f"has ended (stateops jobs status {item.job})")
        tree = Tree.list(item.target)
        entry = checkpoint_entry(item.target, tree, item.job, "job")
        if entry.files is None or entry.latest is None:
            raise Refused(f"{item.target} is no longer a checkpoint with a committed batch")
        policy = self.scope.policies.for_job(item.job)
        oldest = entry.restorable[0] if entry.restorable else None
        floor, _ = promised_floor(entry.files, policy, self.scope.min_batches_to_retain, self.now(), oldest)
        found = restart.history(entry.files, floor, live=control.lease is not None)
        allowed = set({CHECKPOINT_HISTORY: found.state + found.logs, UNREFERENCED_FILES: found.unreferenced,
                       TEMP_FILES: found.temp}[item.rule])
        if found.problems and item.rule != TEMP_FILES:
            raise Refused(found.problems[0])
        planned = dict(item.paths)
        ok = [rel for rel, size in planned.items() if rel in allowed and rel in tree.files and tree.files[rel].size == size]
        before = tree
        remove_all([tree.path(rel) for rel in ok])
        freed, removed = _gone(before, Tree.list(item.target))
        kept = len(planned) - len(ok)
        return ItemResult(item.item_id, item.rule, item.target, "done" if not kept else "partial", freed, removed,
                          reason=None if not kept else f"{kept} planned file(s) kept: needed now, changed or gone "
                          f"(floor batch {found.floor}, latest {entry.latest})")

    def _unchanged(self, item: Item, tree: Tree) -> None:
        if not len(tree):
            raise Refused(f"{item.target} is gone")
        if tree.bytes() != item.bytes + item.details.get("bytes_moved", 0) or \
                len(tree) != item.files + item.details.get("files_moved", 0):
            raise Refused(f"{item.target} changed since the plan ({len(tree)} files, {tree.bytes()} bytes now)")

    def _archive_tree(self, item: Item) -> ItemResult:
        self._control(item)
        tree = Tree.list(item.target)
        self._unchanged(item, tree)
        if item.rule == ARCHIVE_RETENTION:
            root = archive_root(self.scope, item.job)
            current = {a.archive_id: a for a in archives_in(Tree.list(root), item.job)}
            mine = current.get(item.details["archive_id"])
            if mine is None or mine.in_use:
                raise Refused(f"archive {item.details['archive_id']} is not a finished archive now (its runbook "
                              "is running or has not ended)")
            keep = current.get(item.details["protected"])
            if keep is None or self.verify(keep):
                raise Refused(f"the newest verified archive {item.details['protected']} is gone or no longer "
                              "verifies; no other archive is deleted")
        else:
            owned = {p.rstrip("/") for a in self.scope.jobs.values() for p in (a.checkpoint, a.deadletter_checkpoint)}
            if item.target.rstrip("/") in owned:
                raise Refused(f"{item.target} belongs to a configured job now")
            idle = self.now().timestamp() - (tree.last_modified() or 0)
            if idle < parse_seconds(self.scope.policies.orphan_idle) or \
                    (tree.last_modified() or 0) > item.details["last_modified"]:
                raise Refused(f"{item.target} was modified since the plan")
        if item.action == ARCHIVE_TREE:
            self.archive(item.target, item.details["destination"], item.details)
        remove_tree(item.target)
        freed, removed = _gone(tree, Tree.list(item.target))
        if item.action == ARCHIVE_TREE:  # moved into the archive, not freed
            return ItemResult(item.item_id, item.rule, item.target, "done",
                              details={"destination": item.details["destination"], "bytes_moved": freed,
                                       "files_moved": removed})
        return ItemResult(item.item_id, item.rule, item.target, "done", freed, removed)

    def _table(self, item: Item) -> ItemResult:
        self._control(item)
        ops = self.scope.policies.ops_tables
        before = Tree.list(item.target)
        details: dict[str, Any] = {}
        if item.action == VACUUM:
            details["deleted"] = len(tables.vacuum(item.target, ops.vacuum_after))
        elif item.action == CLEANUP_LOG:
            tables.cleanup_log(item.target, ops.log_retention)
        elif item.action == COMPACT:
            details["metrics"] = {k: v for k, v in tables.compact(item.target).items()
                                  if k in ("numFilesAdded", "numFilesRemoved")}
        elif item.action == ROLLUP_ROWS:
            rollup = self.scope.layout.ops_table(tables.ROLLUP)
            self.scope.roots.confine(rollup, job=None)
            details.update(tables.rollup_progress(item.target, rollup,
                                                  datetime.fromisoformat(item.details["cutoff"])))
        elif item.action == DROP_ROWS:
            details["rows"] = tables.drop_rows(item.target, item.details["column"],
                                               datetime.fromisoformat(item.details["cutoff"]))
        after = Tree.list(item.target)
        freed, removed = _gone(before, after)
        return ItemResult(item.item_id, item.rule, item.target, "done", freed, removed, _written(before, after),
                          details=details)

    def _run(self, asked: Item, admission: Admission) -> ItemResult:
        for folder in sorted({posixpath.dirname(f"{asked.target}/{rel}") for rel, _ in asked.paths} | {asked.target}):
            self.scope.roots.confine(folder, job=asked.job)
        if asked.details.get("destination"):
            self.scope.roots.confine(asked.details["destination"], job=None)
        item = admission.admit(asked)
        if item.action == DELETE_FILES:
            return self._checkpoint_files(item)
        if item.action in (DELETE_TREE, ARCHIVE_TREE):
            return self._archive_tree(item)
        return self._table(item)

    def apply(self) -> ApplyReport:
        report = ApplyReport(self.run_id, self.plan.plan_id, datetime.now(timezone.utc).isoformat(timespec="seconds"))
        items = {item.item_id: item for item in self.plan.items}

        def stopped(item_id: str, line: str) -> None:  # a root's lock lost: the run stops before this item
            self._journal(items[item_id], "stopped", {"reason": line})

        with lock.hold(self.scope.layout, self.scope.roots_to_lock(), run_id=self.run_id, actor=self.actor,
                       on_lost=stopped) as held:
            admission = Admission(self.current or self.replan())
            for item in admission.order(self.plan.items):
                held.ensure_held(item.item_id)
                self._journal(item, "started", {"bytes": item.bytes, "files": item.files,
                                                "paths": [rel for rel, _ in item.paths][:1000]})
                try:
                    result = self._run(item, admission)
                except StateOpsError as err:  # Refused, the roots guard, ...
                    result = ItemResult(item.item_id, item.rule, item.target, "refused", reason=str(err))
                except Exception as err:  # noqa: BLE001 - one item failing does not stop the others
                    result = ItemResult(item.item_id, item.rule, item.target, "failed",
                                        reason=f"{type(err).__name__}: {first_line(err)}")
                self._journal(item, result.outcome, {"bytes": result.bytes, "files": result.files,
                                                     "bytes_written": result.bytes_written, "reason": result.reason,
                                                     **result.details})
                report.results.append(result)
        report.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return report
