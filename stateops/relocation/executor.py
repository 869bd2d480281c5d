"""A home move, acted: a runbook on the runbook engine (stateops.runbooks), journaled in the new home's
`ops/_move/<id>/` and resumable (run it again: what is done is skipped, a file copied and verified is not copied
again), one process at a time; a move whose lock is taken over stops before its next write (a journal entry, a
copied file, a rewritten table), in one line. Its steps, a table of handlers:

  lock     every job's maintenance lock, in the old home and the new one (refused, before anything, when a job runs
           and `stop` was not asked; asked: the run is stopped first and its lease awaited)
  copy     every planned file through the storage layer, checksummed as read and verified by reading the copy back;
           the files that name the old home are written rewritten (the file source's logs, ops/ JSON records)
  rewrite  the ops tables' path columns in the copy (a Delta update), archive manifests' sums of rewritten files, and
           one `home_move` row in the new home's actions
  verify   each checkpoint restarts at the new home reading only new files (every landing file there is in its file
           source's log, under the new home's name, none under the old); every Delta table has the old one's
           version and rows (ops tables whose paths were rewritten: one version more); the deep audits agree
           (`audit`, the Spark side: stateops.jobs.runtime.relocation)
  mark     MOVED.json in the old home (stateops.relocation.marker): from now on it refuses every command
  unlock   the maintenance locks released (a control folder the move created in the old home removed with it)

The old home is never changed otherwise: the locks are journaled in the move's own journal, not in its actions table,
and nothing is copied back. Until the user deletes it, it is the rollback; a move stopped half-way leaves the old home
working (its locks held: run the move again to finish it, or release them with `stateops jobs unlock`).
"""
from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from deltalake import DeltaTable

from stateops import actions
from stateops.control import current_lease, maintenance, request_stop, wait_released
from stateops.clock import now_iso
from stateops.control.settings import ControlSettings
from stateops.delta import open_table, scan
from stateops.errors import OperationFailed
from stateops.faults import fault_point
from stateops.layout import Layout
from stateops.checkpoints.archive import CHECKPOINT, MANIFEST
from stateops.checkpoints.source_log import SOURCE_LOG, checkpoint_of, logged_paths, spark_form
from stateops.runbooks import Journal, Step, StepEvent, run_steps
from stateops.storage import exists, files_under, names, read_text, write_text
from stateops.storage.aws import storage_options
from stateops.storage.copies import copy_file, digest, remove_tree

from stateops.relocation import marker
from stateops.relocation.plan import MovePlan, MoveRefused, Rewrite, running_refusal
from stateops.relocation.rewrite import (JSON_COLUMNS, PATH_COLUMNS, json_column_update, pairs, path_column_update,
                                         rewrite_source_log, rewrite_text, sql_text)

LOCK, COPY, REWRITE, VERIFY, MARK, UNLOCK = "lock", "copy", "rewrite", "verify", "mark", "unlock"
PLAN = "plan"       # the journal's first entry: what the move was planned as
HOME = "_home"      # how the move's journal and its row in `actions` name what it acts on: the whole home


class MoveFailed(OperationFailed):
    """A step of the move failed (exit code 1); run the move again to resume it."""


@dataclass
class Progress:
    """What the copy has done so far, for the terminal (`report`) and the journal."""

    files: int
    bytes: int
    done_files: int = 0
    done_bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done_bytes / elapsed if elapsed > 0 else 0.0

    @property
    def seconds_left(self) -> float | None:
        return (self.bytes - self.done_bytes) / self.rate if self.rate else None


class Move:
    """The move of `plan` for the jobs `jobs` (the names the catalog knows)."""

    def __init__(self, plan: MovePlan, jobs: list[str], *, settings: ControlSettings, actor: str, stop: bool,
                 report: Callable[[str, dict[str, Any]], None],
                 audit: Callable[[Layout, Layout], list[str]] | None = None):
        self.plan, self.jobs, self.settings, self.actor, self.stop = plan, jobs, settings, actor, stop
        self.report, self.audit = report, audit
        self.old, self.new = Layout(plan.old), Layout(plan.new)
        self.mapping = pairs(plan.old, plan.new)
        self.directory = self.new.move_dir(plan.move_id)
        self.runbook_id = f"move-{plan.move_id}"
        self.journal = Journal(self.directory, kind="move", runbook_id=self.runbook_id, job=HOME,
                               title=f"the move {plan.move_id}", report=self._tell,
                               fix=f"let that process end, then run the move again to resume it ({self.directory})")
        self.steps = (Step(LOCK, self._lock, intent=self._lock_intent), Step(COPY, self._copy), Step(REWRITE, self._rewrite),
                      Step(VERIFY, self._verify), Step(MARK, self._mark), Step(UNLOCK, self._unlock))

    def _tell(self, event: StepEvent) -> None:
        self.report(event.step, {"phase": event.phase, **event.details})

    def run(self) -> dict[str, Any]:
        """Every step not done yet, in order; the move's summary."""
        done = marker.moved(self.plan.old)
        if done is not None and done.move_id != self.plan.move_id:
            raise MoveRefused(f"{self.plan.old} was moved to {done.to} already (move {done.move_id})")
        with self.journal.held({"actor": self.actor}):
            if not self.journal.entries:
                self.journal.record(PLAN, "done", {"files": len(self.plan.files), "bytes": self.plan.bytes,
                                                   "rewrites": self.plan.rewrite_counts()})
            run_steps(self.journal, self.steps)
        return {"move_id": self.plan.move_id, "from": self.plan.old, "to": self.plan.new,
                "files": len(self.plan.files), "bytes": self.plan.bytes}

    def _lock_intent(self) -> dict[str, Any]:
        """The control folders the lock step makes in the old home (the unlock removes them: the old home as it
        was), as the first attempt at the step found them missing."""
        earlier = self.journal.details(LOCK, "started")
        if "created_control" in earlier:
            return earlier
        return {"created_control": [self.old.control_dir(job) for job in self.jobs
                                    if not exists(self.old.control_dir(job))]}

    def _lock(self) -> dict[str, Any]:
        """Every job's maintenance lock in both homes (a running job stopped first when asked)."""
        for job in self.jobs:
            holder = current_lease(self.old, job)
            if holder is not None and holder.stale_reason(self.settings) is None:
                if not self.stop:
                    raise MoveRefused(running_refusal([job]))
                request_stop(self.old, job, actor=self.actor, reason=f"home move {self.plan.move_id}",
                             settings=self.settings)
                if not wait_released(self.old, job, holder.lease_id, self.settings.stop_grace_seconds + 120,
                                     settings=self.settings):
                    raise MoveFailed(f"job {job} did not stop; nothing was copied. Fix: check the run "
                                     f"({holder.describe()}), then run the move again")
            self.journal.ensure_held(LOCK)
            for layout in (self.old, self.new):
                maintenance.acquire(layout, job, runbook_id=self.runbook_id, actor=self.actor,
                                    reason=f"home move {self.plan.old} -> {self.plan.new}", journal=False)
        return {"jobs": self.jobs, **self.journal.details(LOCK, "started")}

    def _copy(self) -> dict[str, Any]:
        progress = Progress(len(self.plan.files), self.plan.bytes)
        rewritten = self.plan.rewritten(Rewrite.SOURCE_LOGS, Rewrite.JSON_RECORDS)
        last = 0.0
        for rel, size in self.plan.files:
            source, dest = posixpath.join(self.plan.old, rel), posixpath.join(self.plan.new, rel)
            self.journal.ensure_held(COPY)
            if rel in rewritten:
                self._write_rewritten(rel, source, dest)
            else:
                expected = digest(dest)
                if expected is None or expected != digest(source):
                    sums = copy_file(source, dest)
                    if digest(dest) != sums:
                        raise MoveFailed(f"the copy of {rel} does not match its source's sum; nothing was marked. Fix: "
                                         "run the move again (it copies that file again)")
            progress.done_files += 1
            progress.done_bytes += size
            fault_point("move.copied", file=progress.done_files)
            if time.monotonic() - last > 0.5 or progress.done_files == progress.files:
                last = time.monotonic()
                self.report(COPY, {"phase": "progress", "files": progress.done_files, "of_files": progress.files,
                                     "bytes": progress.done_bytes, "of_bytes": progress.bytes,
                                     "bytes_per_second": round(progress.rate),
                                     "seconds_left": None if progress.seconds_left is None else
                                     round(progress.seconds_left, 1)})
        return {"files": progress.done_files, "bytes": progress.done_bytes}

    def _write_rewritten(self, rel: str, source: str, dest: str) -> None:
        text = read_text(source)
        if SOURCE_LOG.search(rel):
            text = self._source_log(text)
        elif rel.endswith(".jsonl"):
            text = "\n".join(rewrite_text(line, self.mapping) if line.strip() else line for line in text.split("\n"))
        else:
            text = rewrite_text(text, self.mapping)
        write_text(dest, text)

    def _source_log(self, text: str) -> str:
        """The file source's log rewritten; another source's log (Kafka's initial offsets) is left as it is."""
        try:
            return rewrite_source_log(text, self.mapping)[0]
        except (ValueError, KeyError, TypeError):
            return text

    def _rewrite(self) -> dict[str, Any]:
        updated = {}
        for table in self.plan.rewrites.get(Rewrite.OPS_TABLE_COLUMNS, []):
            name = table.split("/")[-1]
            uri = posixpath.join(self.plan.new, table)
            found = open_table(uri)
            if found is None:
                continue
            if name in PATH_COLUMNS:
                column = PATH_COLUMNS[name]
                values = scan(found, [column]).column(column).unique().to_pylist()
                expression = path_column_update(column, values, self.mapping)
            else:
                column = JSON_COLUMNS[name]
                expression = json_column_update(column, self.mapping)
            if expression is None:
                continue
            olds = " OR ".join(f"strpos({column}, {sql_text(old)}) > 0" for old, _new in self.mapping)
            self.journal.ensure_held(REWRITE)
            result = DeltaTable(uri, storage_options=storage_options(uri)).update(updates={column: expression},
                                                                                   predicate=olds)
            updated[table] = result.get("num_updated_rows", 0)
        sums = self._archive_sums()
        return {"ops_tables": updated, "archive_manifests": sums}

    def _archive_sums(self) -> int:
        """Archive manifests whose checkpoint copy holds a rewritten file source log: their sums updated."""
        changed = 0
        logs = [rel for rel in self.plan.rewrites.get(Rewrite.SOURCE_LOGS, []) if "/archives/" in rel]
        by_manifest: dict[str, list[str]] = {}
        for rel in logs:
            head, _, inside = rel.partition(f"/{CHECKPOINT}/")
            by_manifest.setdefault(f"{head}/{MANIFEST}", []).append(inside)
        for manifest_rel, inside in by_manifest.items():
            path = posixpath.join(self.plan.new, manifest_rel)
            try:
                found = json.loads(read_text(path))
            except FileNotFoundError:
                continue
            entries = {entry["path"]: entry for entry in found.get("files", [])}
            for rel in inside:
                if rel in entries:
                    size, sha = digest(posixpath.join(self.plan.new, manifest_rel.rsplit("/", 1)[0], CHECKPOINT,
                                                      rel))
                    entries[rel].update(size=size, sha256=sha)
            self.journal.ensure_held(REWRITE)
            write_text(path, json.dumps(found, indent=1, sort_keys=True))
            changed += 1
        return changed

    def _verify(self) -> dict[str, Any]:
        problems = self._restart_problems() + self._table_problems()
        if self.audit is not None:
            problems += self.audit(self.old, self.new)
        if problems:
            raise MoveFailed(f"the copy at {self.plan.new} does not verify ({len(problems)} problems: "
                             f"{'; '.join(problems[:3])}); the old home was not marked and stays in use. Fix: see the "
                             f"journal {self.directory}, then run the move again")
        return {"checked": "restart, tables" + (", deep audits" if self.audit else "")}

    def _restart_problems(self) -> list[str]:
        """Each checkpoint restarts at the new home reading only files that are new: every landing file its file
        source log had read at the old home is in its log at the new home under the new home's name (else Spark
        would read it again), and no log names the old home any more."""
        problems = []
        old_logs, new_logs = _source_logs(self.plan.old), _source_logs(self.plan.new)
        old_forms = [old for old, _ in self.mapping]
        for checkpoint, recorded in sorted(new_logs.items()):
            stale = sorted(p for p in recorded if any(p.startswith(form + "/") for form in old_forms))
            if stale:
                problems.append(f"{checkpoint}: its file source log still names the old home ({stale[0]})")
            read_before = old_logs.get(checkpoint, set())
            for source in sorted(_names(posixpath.join(self.plan.old, "landing"), folders=True)):
                for name in _names(posixpath.join(self.plan.old, "landing", source)):
                    was = spark_form(posixpath.join(self.plan.old, "landing", source, name))
                    now = spark_form(posixpath.join(self.plan.new, "landing", source, name))
                    if was in read_before and now not in recorded:
                        problems.append(f"{checkpoint}: its next batch would read {now} again")
        return problems

    def _table_problems(self) -> list[str]:
        problems = []
        rewritten = set(self.plan.rewrites.get(Rewrite.OPS_TABLE_COLUMNS, []))
        for table in self.plan.tables:
            old, new = open_table(posixpath.join(self.plan.old, table)), open_table(posixpath.join(self.plan.new, table))
            if old is None or new is None:
                problems.append(f"{table}: {'missing at the new home' if new is None else 'unreadable'}")
                continue
            extra = 1 if table in rewritten and new.version() > old.version() else 0
            if new.version() != old.version() + extra or new.count() != old.count():
                problems.append(f"{table}: version {new.version()} and {new.count()} rows, the old home's "
                                f"{old.version()} and {old.count()}")
        return problems

    def _mark(self) -> None:
        """The old home's marker, then the move in the new home's actions (after the verification, which compares
        the copied ops tables with the old home's: this record is the move's own)."""
        self.journal.ensure_held(MARK)
        marker.mark(self.plan.old, self.plan.new, self.plan.move_id, now_iso())
        actions.record(self.new, HOME, "home_move", "done", actor=self.actor, runbook_id=self.runbook_id,
                       details={"from": self.plan.old, "to": self.plan.new, "move_id": self.plan.move_id,
                                "files": len(self.plan.files), "bytes": self.plan.bytes})

    def _unlock(self) -> dict[str, Any]:
        created = self.journal.details(LOCK).get("created_control", [])
        for job in self.jobs:
            self.journal.ensure_held(UNLOCK)
            for layout in (self.old, self.new):
                maintenance.release(layout, job, runbook_id=self.runbook_id, actor=self.actor, journal=False)
        for control in created:  # the old home as it was: no control folder where none was
            remove_tree(control)
        return {"jobs": self.jobs}


def _names(folder: str, folders: bool = False) -> list[str]:
    """The names of the files (or the folders) in `folder`."""
    return sorted(names(folder, folders=folders) or [])


def _source_logs(home: str) -> dict[str, set[str]]:
    """checkpoint (relative to the home) -> every path its file source logs name."""
    recorded: dict[str, set[str]] = {}
    for rel in files_under(posixpath.join(home, "checkpoints")):
        checkpoint = checkpoint_of(posixpath.join("checkpoints", rel))
        if checkpoint is not None:
            text = read_text(posixpath.join(home.rstrip("/"), "checkpoints", rel))
            recorded.setdefault(checkpoint, set()).update(logged_paths(text))
    return recorded

