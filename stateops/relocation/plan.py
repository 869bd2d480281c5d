"""The plan of a home move, as data: what is copied (files and bytes per job and root), what is rewritten because it
names the old home, what is left behind and why, how long the copy takes at the rate measured now, and why the move
would be refused. Making it reads the old home and lists the destination; it writes nothing anywhere.

What a move copies: every file of the home but (LEFT_BEHIND, by stateops.layout's parts)
  dagster/                  the Dagster instance (SQLite on local disk: it cannot live in a bucket; keep DAGSTER_HOME)
  ops/<job>/control/        the control records (lease, stop request, maintenance lock: transient, per home)
  ops/_retention/locks/     retention's locks (transient)
  ops/_move/                a move's own journal (it lives in the destination)
  *.crc, into a bucket      Hadoop's checksum sidecars of local files (S3A reads none); a rewritten file's own
                            sidecar is left behind everywhere (it would not match)
What it rewrites in the copy: the file source's logs in checkpoints and in archived checkpoints (rewrite.SOURCE_LOG),
the JSON files under ops/ (archive manifests, runbook journals), and the ops tables' path columns (rewrite.PATH_COLUMNS,
rewrite.JSON_COLUMNS).
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from stateops.errors import StateOpsError
from stateops.layout import Layout, Part, part_of
from stateops.storage import LOCAL, S3, files_under, is_url, kind, read_bytes

from stateops.checkpoints.source_log import SOURCE_LOG
from stateops.relocation.rewrite import JSON_COLUMNS, PATH_COLUMNS

RATE_SAMPLE_BYTES = 16 << 20  # read this much of the largest files to measure the copy rate


class MoveRefused(StateOpsError):
    """The move cannot be made as asked: nothing was done (exit code 2)."""


class Rewrite(str, Enum):
    """What the move rewrites in the copy because it names the old home (the value: how the plan reports it)."""

    SOURCE_LOGS = "file source logs"
    JSON_RECORDS = "JSON records"
    OPS_TABLE_COLUMNS = "ops table columns"


# The parts of a home a move leaves behind, and why.
LEFT_BEHIND = {
    Part.DAGSTER: "the Dagster instance (dagster/): SQLite on local disk; keep DAGSTER_HOME where it is",
    Part.CONTROL: "control records (lease, stop request, maintenance lock): per home, made by the next run",
    Part.RETENTION_LOCKS: "locks and journals of this home's own operations",
    Part.MOVES: "locks and journals of this home's own operations",
    Part.MOVED_MARK: "the mark of an earlier move",
}
# Where a file source's log is rewritten: in checkpoints, and in the checkpoints archived by runbooks.
SOURCE_LOG_PARTS = (Part.CHECKPOINT, Part.DEADLETTER_CHECKPOINT, Part.ARCHIVES)
# Where JSON records are rewritten: the ops folders (archive manifests, runbook journals), not the ops tables.
RECORD_PARTS = (Part.OPS, Part.ARCHIVES)


def running_refusal(running: list[str]) -> str:
    """Why a move does not start (or go on) while jobs run, and what to do."""
    return (f"{', '.join(running)} {'is' if len(running) == 1 else 'are'} running: a home moves with its jobs "
            "stopped. Fix: add --stop (each run stops after its batch in flight), or stop "
            f"{'it' if len(running) == 1 else 'them'}: stateops jobs stop {running[0]} --wait 120; then run the move "
            "again")


@dataclass(frozen=True)
class PartSize:
    """One root of the home as the plan reports it: e.g. ("checkpoint", "user_activity")."""

    root: str
    name: str
    files: int
    bytes: int


@dataclass
class MovePlan:
    move_id: str
    old: str
    new: str
    files: list[tuple[str, int]]                 # (path relative to the home, size): what is copied
    rewrites: dict[Rewrite, list[str]]           # kind -> relative paths rewritten in the copy
    tables: list[str]                            # Delta tables (relative), whose versions and rows are compared
    skipped: list[tuple[str, int, str]]          # (relative path, size, why)
    running: list[str]                           # jobs holding a live lease now
    refusals: list[str]
    rate_bytes_per_second: float | None
    parts: list[PartSize] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def estimate_seconds(self) -> float | None:
        return self.bytes / self.rate_bytes_per_second if self.rate_bytes_per_second else None

    def to_json(self) -> dict[str, Any]:
        return {"move_id": self.move_id, "from": self.old, "to": self.new, "files": len(self.files),
                "bytes": self.bytes, "parts": [asdict(p) for p in self.parts],
                "rewrites": self.rewrite_counts(), "tables": self.tables,
                "skipped": [{"path": p, "bytes": s, "why": w} for p, s, w in self.skipped],
                "running": self.running, "refusals": self.refusals,
                "rate_bytes_per_second": self.rate_bytes_per_second, "estimate_seconds": self.estimate_seconds}

    def rewrite_counts(self) -> dict[str, int]:
        return {kind_.value: len(paths) for kind_, paths in self.rewrites.items()}

    def rewritten(self, *kinds: Rewrite) -> set[str]:
        """The relative paths rewritten as one of `kinds` (every kind when none is named)."""
        return {rel for kind_ in kinds or tuple(Rewrite) for rel in self.rewrites.get(kind_, [])}

    def render(self) -> str:
        """The plan for a terminal."""
        lines = [f"move {self.move_id}: {self.old} -> {self.new}",
                 f"  copy {len(self.files):,} files, {_mib(self.bytes)}"
                 + (f", about {self.estimate_seconds:.0f} s at {_mib(self.rate_bytes_per_second)}/s (read rate "
                    "measured now)" if self.estimate_seconds is not None else "")]
        for part in self.parts:
            lines.append(f"    {part.root:22} {part.name:24} {part.files:7,} files {_mib(part.bytes):>12}")
        lines.append("  rewrite in the copy (they name the old home): " + (", ".join(
            f"{count} {what}" for what, count in self.rewrite_counts().items() if count) or "nothing"))
        left = {}
        for _path, size, why in self.skipped:
            files, total = left.get(why, (0, 0))
            left[why] = (files + 1, total + size)
        for why, (files, total) in left.items():
            lines.append(f"  not copied: {files} files, {_mib(total)}: {why}")
        if self.running:
            lines.append(f"  running now: {', '.join(self.running)} (stopped first with --stop)")
        for refusal in self.refusals:
            lines.append(f"  REFUSED: {refusal}")
        return "\n".join(lines)


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


def move_id(old: str, new: str) -> str:
    """One id per (old, new): the same move asked again resumes it."""
    return hashlib.sha256(f"{old.rstrip('/')}\n{new.rstrip('/')}".encode()).hexdigest()[:12]


def left_behind(rel: str, to_bucket: bool, rewritten: set[str]) -> str | None:
    """Why the move leaves the file `rel` (relative to the home) behind, None when it copies it."""
    why = LEFT_BEHIND.get(part_of(rel)[0])
    if why:
        return why
    parts = rel.split("/")
    name = parts[-1]
    if name.endswith(".crc") and name.startswith("."):
        if to_bucket:
            return "Hadoop's checksum sidecars (S3A reads none)"
        sidecar_of = posixpath.join(*parts[:-1], name[1:-len(".crc")]) if len(parts) > 1 else name[1:-4]
        if sidecar_of in rewritten:
            return "Hadoop's checksum sidecars of rewritten files (they would not match)"
    return None


def _root(rel: str) -> tuple[str, str]:
    """(root, name) a file belongs to, for the plan's report."""
    part, name = part_of(rel)
    return part.value, name


def _rewrite_kind(rel: str) -> Rewrite | None:
    part = part_of(rel)[0]
    if SOURCE_LOG.search(rel) and part in SOURCE_LOG_PARTS:
        return Rewrite.SOURCE_LOGS
    if part in RECORD_PARTS and rel.endswith((".json", ".jsonl")) and "_delta_log" not in rel.split("/"):
        return Rewrite.JSON_RECORDS
    return None


def _tables(files: list[str]) -> list[str]:
    found = {rel.split("/_delta_log/")[0] for rel in files if "/_delta_log/" in rel}
    return sorted(found)


def _read_rate(paths: list[tuple[str, int]]) -> float | None:
    """Bytes per second reading up to RATE_SAMPLE_BYTES of the largest files (a read only)."""
    budget, read, started = RATE_SAMPLE_BYTES, 0, time.perf_counter()
    for path, _size in sorted(paths, key=lambda item: -item[1]):
        if budget <= 0:
            break
        chunk = read_bytes(path, min(budget, 4 << 20))
        read += len(chunk)
        budget -= len(chunk)
    elapsed = time.perf_counter() - started
    return read / elapsed if read and elapsed > 0 else None


def _destination_in_use(old: str, new: str) -> str | None:
    """Why `new` cannot receive the home: it holds files, and none of them is this move's own (its journal, its
    lock: a move stopped half-way is resumed)."""
    files = list(files_under(new))
    ours = posixpath.relpath(Layout(new).move_dir(move_id(old, new)), new) + "/"
    if files and not any(path.startswith(ours) for path in files):
        return (f"{new} holds {len(files)} files already: a home moves into an empty folder or prefix. Fix: choose "
                "another, or empty it")
    return None


def make_plan(layout: Layout, new: str, running: list[str], outside: list[str], stop: bool = False) -> MovePlan:
    """The plan of moving `layout`'s home to `new` (see the module doc). `running`: jobs holding a live lease (a
    refusal unless `stop`); `outside`: jobs whose configured checkpoint or archives lie outside the home (the move
    cannot take them)."""
    old = layout.home.rstrip("/")
    new = new.rstrip("/") if is_url(new) else os.path.abspath(new)
    refusals = []
    if kind(new) not in (LOCAL, S3):
        refusals.append(f"{new}: a home lives on a local or POSIX path or on S3 (s3://, s3a://)")
    elif kind(old) == kind(new) and ((new + "/").startswith(old + "/") or (old + "/").startswith(new + "/")):
        refusals.append(f"{new} and {old} overlap: the new home must lie outside the old one, and around it")
    else:
        refusals += [why for why in (_destination_in_use(old, new),) if why]
    if running and not stop:
        refusals.append(running_refusal(running))
    refusals += [f"job {job}: its checkpoint or archives are configured outside the home; a home move takes "
                 "the home only. Fix: move them into the home first, or leave the job's setting pointing there"
                 for job in outside]
    everything = sorted((rel, int(info.get("size") or 0), posixpath.join(old, rel))
                        for rel, info in files_under(old).items())
    rewrites: dict[Rewrite, list[str]] = {Rewrite.SOURCE_LOGS: [], Rewrite.JSON_RECORDS: []}
    for rel, _size, _path in everything:
        found = _rewrite_kind(rel)
        if found:
            rewrites[found].append(rel)
    rewritten = {rel for rels in rewrites.values() for rel in rels}
    to_bucket = kind(new) == S3
    files, skipped, parts = [], [], {}
    for rel, size, _path in everything:
        why = left_behind(rel, to_bucket, rewritten)
        if why:
            skipped.append((rel, size, why))
            continue
        files.append((rel, size))
        key = _root(rel)
        count, total = parts.get(key, (0, 0))
        parts[key] = (count + 1, total + size)
    copied = {rel for rel, _ in files}
    rewrites = {kind_: [rel for rel in rels if rel in copied] for kind_, rels in rewrites.items()}
    tables = _tables([rel for rel, _ in files])
    rewrites[Rewrite.OPS_TABLE_COLUMNS] = [table for table in tables if part_of(f"{table}/_delta_log") in
                                           {(Part.OPS_TABLE, name) for name in {**PATH_COLUMNS, **JSON_COLUMNS}}]
    plan = MovePlan(move_id(old, new), old, new, files, rewrites, tables, skipped, running, refusals,
                    _read_rate([(path, size) for _rel, size, path in everything]),
                    [PartSize(root, name, count, total) for (root, name), (count, total) in sorted(parts.items())])
    return plan
