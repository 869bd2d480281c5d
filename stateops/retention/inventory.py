"""The inventory: everything under the roots, from one listing per root (no JVM).

Per checkpoint: its job (or none: an orphan), kind (job, deadletter, orphan), bytes, files, state store
provider, operators, latest committed batch, the oldest batch still restorable, last modified, its
archives. Per archive (`<archive root>/<id>/` with the runbook's manifest.json): job, bytes, files,
created, latest batch, finished. Per Delta table (sinks, dead letters, ops tables, others): version,
log versions, files, bytes (on disk, with files the table no longer uses), small files, log size.
"""
from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from stateops.checkpoints.operators import describe
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.delta import open_table
from stateops.errors import StateOpsError
from stateops.storage import can_lock, exists
from stateops.runbooks import running
from stateops.checkpoints import restart, state_store
from stateops.checkpoints.archive import MANIFEST, REPORT
from stateops.checkpoints.listing import Tree, read_many
from stateops.retention.scope import Scope
from stateops.timefmt import iso_seconds



class MissingRootError(StateOpsError):
    """A root retention should look after is not there (a typo in STATEOPS_HOME, an unmounted volume)."""


def _iso(seconds: float | None) -> str | None:
    return iso_seconds(datetime.fromtimestamp(seconds, tz=timezone.utc)) if seconds else None


def _under(path: str, root: str) -> str | None:
    """`path` relative to `root`, or None when it is not under it (textually)."""
    root = root.rstrip("/")
    if path.rstrip("/") == root:
        return ""
    return path[len(root) + 1:].rstrip("/") if path.startswith(root + "/") else None


@dataclass
class CheckpointEntry:
    path: str
    job: str | None
    kind: str                                   # job | deadletter | orphan
    tree: Tree
    files: restart.CheckpointFiles | None       # None: not a Structured Streaming checkpoint
    restorable: list[int] = field(default_factory=list)
    operators: list[dict[str, Any]] = field(default_factory=list)
    archives: list[str] = field(default_factory=list)

    @property
    def latest(self) -> int | None:
        return self.files.latest if self.files else None

    def summary(self) -> dict[str, Any]:
        provider = self.files.provider() if self.files else None
        return {"path": self.path, "job": self.job, "kind": self.kind, "bytes": self.tree.bytes(),
                "files": len(self.tree), "provider": state_store.store_name(provider) if provider else None,
                "operators": self.operators, "latest_committed_batch": self.latest,
                "oldest_restorable_batch": self.restorable[0] if self.restorable else None,
                "restorable_batches": len(self.restorable),
                "last_modified": _iso(self.tree.last_modified()), "archives": self.archives,
                "is_checkpoint": self.files is not None}


@dataclass
class ArchiveEntry:
    job: str | None
    archive_id: str
    path: str
    tree: Tree
    manifest: dict[str, Any] | None
    running: bool = False             # a runbook process holds its lock now

    @property
    def finished(self) -> bool:
        """The runbook that made it wrote its report (an archive without one may still be resumed)."""
        return REPORT in self.tree

    @property
    def in_use(self) -> bool:
        """A runbook may still need it: it is running now, or has not finished (a crashed one resumes)."""
        return self.running or not self.finished

    @property
    def created(self) -> float:
        stamp = (self.manifest or {}).get("created_at")
        if stamp:
            try:
                return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                pass
        return self.tree.last_modified() or 0.0

    def summary(self) -> dict[str, Any]:
        manifest = self.manifest or {}
        return {"job": self.job, "archive_id": self.archive_id, "path": self.path, "bytes": self.tree.bytes(),
                "files": len(self.tree), "created_at": _iso(self.created), "has_manifest": self.manifest is not None,
                "source": manifest.get("source"), "latest_committed_batch": manifest.get("latest_committed_batch"),
                "finished": self.finished, "runbook_running": self.running}


@dataclass
class TableEntry:
    path: str
    name: str
    kind: str                         # sink | deadletter | ops | other
    job: str | None
    tree: Tree
    version: int | None
    active: dict[str, int]            # relative data file path -> bytes, in the current version
    small_file_bytes: int

    def log(self) -> Tree:
        return self.tree.sub("_delta_log")

    def summary(self) -> dict[str, Any]:
        log = self.log()
        return {"path": self.path, "name": self.name, "kind": self.kind, "job": self.job, "version": self.version,
                "log_versions": sum(1 for rel in log.files if rel.endswith(".json") and rel[:-5].isdigit()),
                "files": len(self.active), "active_bytes": sum(self.active.values()), "bytes": self.tree.bytes(),
                "small_files": sum(1 for size in self.active.values() if size < self.small_file_bytes),
                "log_files": len(log), "log_bytes": log.bytes()}


@dataclass
class Inventory:
    scope: Scope
    generated_at: datetime
    checkpoints: list[CheckpointEntry]
    archives: list[ArchiveEntry]
    tables: list[TableEntry]
    home_bytes: int
    home_files: int

    def to_dict(self) -> dict[str, Any]:
        checkpoints = [c.summary() for c in self.checkpoints]
        archives = [a.summary() for a in self.archives]
        tables = [t.summary() for t in self.tables]
        under_home = [x for x in checkpoints + archives + tables if _under(x["path"], self.scope.layout.home)
                      is not None]
        return {
            "home": self.scope.layout.home, "roots": list(self.scope.roots.roots),
            "generated_at": self.generated_at.isoformat(timespec="seconds"),
            "totals": {"bytes": self.home_bytes + sum(c["bytes"] for c in checkpoints if c not in under_home),
                       "files": self.home_files + sum(c["files"] for c in checkpoints if c not in under_home),
                       "checkpoints_bytes": sum(c["bytes"] for c in checkpoints),
                       "archives_bytes": sum(a["bytes"] for a in archives),
                       "tables_bytes": sum(t["bytes"] for t in tables if t["kind"] != "ops"),
                       "ops_tables_bytes": sum(t["bytes"] for t in tables if t["kind"] == "ops")},
            "checkpoints": checkpoints, "archives": archives, "tables": tables,
        }


def _tree(home: Tree, path: str) -> Tree:
    """The files under `path`: cut from the home's listing when it lies under the home, else listed."""
    rel = _under(path, home.root)
    return home.sub(rel) if rel is not None else Tree.list(path)


def _check_roots(scope: Scope) -> None:
    home = scope.layout.home
    if not exists(home):
        raise MissingRootError(f"the StateOps home {home} does not exist. Fix: check STATEOPS_HOME (or --home); "
                               "retention only looks after an existing home")
    for area in scope.jobs.values():
        if _under(area.checkpoint, home) is None:
            parent = posixpath.dirname(area.checkpoint.rstrip("/"))
            if not exists(parent):
                raise MissingRootError(
                    f"{area.job}'s checkpoint root {parent} does not exist (is the volume or bucket there?). "
                    f"Fix: mount or create it, or correct jobs.{area.job}.checkpoint in the config file")


def checkpoint_entry(path: str, tree: Tree, job: str | None, kind: str) -> CheckpointEntry:
    """Parse one checkpoint's listing: logs, stores, restorable batches, operators."""
    if not restart.is_checkpoint(tree):
        return CheckpointEntry(path, job, kind, tree, None)
    files = restart.parse(tree, read_many)
    if files.commits:
        restart.load_references(files, read_many, lambda store: store.base(files.commits[0] + 1))
    operators = []
    for op in sorted({s.operator for s in files.stores}):
        try:
            meta = describe(Checkpoint(path), op)
        except (OSError, ValueError):
            meta = None
        operators.append({"operator_id": op, "operator_name": meta.operator_name if meta else None,
                          "stores": sorted({s.name for s in files.stores if s.operator == op}),
                          "partitions": len({s.partition for s in files.stores if s.operator == op})})
    return CheckpointEntry(path, job, kind, tree, files, files.restorable_batches(), operators)


def _checkpoints(scope: Scope, home: Tree) -> list[CheckpointEntry]:
    layout = scope.layout
    owned: dict[str, tuple[str, str]] = {}
    for area in scope.jobs.values():
        owned[area.checkpoint.rstrip("/")] = (area.job, "job")
        owned[area.deadletter_checkpoint.rstrip("/")] = (area.job, "deadletter")
    paths = set(owned)
    for name in home.children("checkpoints"):
        if name == "_deadletter":
            paths |= {layout.deadletter_checkpoint(n).rstrip("/") for n in home.children("checkpoints/_deadletter")}
        else:
            paths.add(layout.checkpoint(name).rstrip("/"))
    entries = []
    for path in sorted(paths):
        tree = _tree(home, path)
        if not len(tree):
            continue
        job, kind = owned.get(path, (None, "orphan"))
        entries.append(checkpoint_entry(path, tree, job, kind))
    return entries


def runbook_running(path: str) -> bool:
    """A runbook process holds the archive's `.runbook.lock` now (journal.running: a flock on local disk, a live
    lock object on S3, one HEAD per archive). Runbooks archive nowhere else (their preflight refuses other object
    stores), so none runs in an archive there."""
    return can_lock(path) and running(path)


def archives_in(tree: Tree, job: str | None) -> list[ArchiveEntry]:
    """The archives in one archive root's listing: each folder `<id>/` (runbook records included), with the
    facts from its manifest (never guessed from names) and whether its runbook is running now."""
    ids = sorted(name for name in tree.children() if len(tree.sub(name)))
    manifests = read_many([tree.path(f"{i}/{MANIFEST}") for i in ids if f"{i}/{MANIFEST}" in tree])
    entries = []
    for archive_id in ids:
        raw = manifests.get(tree.path(f"{archive_id}/{MANIFEST}"))
        try:
            manifest = json.loads(raw) if raw else None
        except ValueError:
            manifest = None
        entries.append(ArchiveEntry(job, archive_id, tree.path(archive_id), tree.sub(archive_id), manifest,
                                    runbook_running(tree.path(archive_id))))
    return entries


def archive_root(scope: Scope, job: str | None) -> str:
    return scope.jobs[job].archive_root if job else scope.orphan_archive_root


def _archives(scope: Scope, home: Tree) -> list[ArchiveEntry]:
    return [entry for job in [*scope.jobs, None] for entry in archives_in(_tree(home, archive_root(scope, job)), job)]


def _tables(scope: Scope, home: Tree) -> list[TableEntry]:
    layout = scope.layout
    known: dict[str, tuple[str, str | None]] = {}
    for area in scope.jobs.values():
        known[area.sink_table.rstrip("/")] = ("sink", area.job)
        known[area.deadletter_table.rstrip("/")] = ("deadletter", area.job)
    candidates = {layout.table(n).rstrip("/") for n in home.children("tables")}
    candidates |= {layout.ops_table(n).rstrip("/") for n in home.children("ops/tables")}
    candidates |= set(known)
    small = scope.policies.ops_tables.small_file_bytes
    entries = []
    for path in sorted(candidates):
        tree = _tree(home, path)
        if not any(rel.startswith("_delta_log/") for rel in tree.files):
            continue
        kind, job = known.get(path, ("ops" if _under(path, layout.ops_table("")) is not None else "other", None))
        table = open_table(path)
        active: dict[str, int] = {}
        if table is not None:
            actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
            active = dict(zip(actions["path"], actions["size_bytes"]))
        entries.append(TableEntry(path, posixpath.basename(path), kind, job, tree,
                                  table.version() if table is not None else None, active, small))
    return entries


def take(scope: Scope) -> Inventory:
    """List the roots and read what retention needs to know (small files only; no JVM)."""
    _check_roots(scope)
    home = Tree.list(scope.layout.home)
    checkpoints = _checkpoints(scope, home)
    archives = _archives(scope, home)
    by_job: dict[str, list[str]] = {}
    for archive in archives:
        if archive.job:
            by_job.setdefault(archive.job, []).append(archive.archive_id)
    for entry in checkpoints:
        if entry.kind == "job":
            entry.archives = sorted(by_job.get(entry.job, []))
    return Inventory(scope, datetime.now(timezone.utc), checkpoints, archives, _tables(scope, home),
                     home.bytes(), len(home))
