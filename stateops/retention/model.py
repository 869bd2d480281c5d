"""A retention plan as data: every item with its rule, its files and bytes, and why; the totals per rule.
And what applying it did (ApplyReport). Both print as text and convert to and from JSON, so a plan can
be reviewed, stored, applied later (every item is re-checked before it acts) and compared in tests.

Bytes "freed" count only files an item deletes; moving a checkpoint into an archive frees nothing yet,
and rewriting a table (compaction, dropping rows) frees its old files only when a later vacuum removes
them, so those items count 0 and say so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from stateops.sizes import human_bytes as human

# Rules: why an item was chosen (stable names: the JSON contract and the `actions` journal use them).
CHECKPOINT_HISTORY = "checkpoint_history"      # state versions and logs no restart from a kept batch needs
UNREFERENCED_FILES = "unreferenced_files"      # RocksDB SSTs / archived logs no kept snapshot names
TEMP_FILES = "temp_files"                      # temp files of interrupted writes, checksums of missing files
ARCHIVE_RETENTION = "archive_retention"        # archives beyond keep_archives and keep_archives_for
ORPHAN_CHECKPOINT = "orphan_checkpoint"        # a checkpoint no configured job owns, idle for orphan_idle
OPS_VACUUM = "ops_vacuum"                      # table files no version in vacuum_after uses
OPS_LOG_CLEANUP = "ops_log_cleanup"            # Delta log entries older than log_retention, before a checkpoint
OPS_COMPACT = "ops_compact"                    # small files compacted, the log checkpointed
PROGRESS_HORIZON = "progress_horizon"          # progress rows older than progress_horizon: rolled up or dropped
DEADLETTER_RETENTION = "deadletter_retention"  # dead letters older than deadletter_keep
RULES = (CHECKPOINT_HISTORY, UNREFERENCED_FILES, TEMP_FILES, ARCHIVE_RETENTION, ORPHAN_CHECKPOINT, OPS_VACUUM,
         OPS_LOG_CLEANUP, OPS_COMPACT, PROGRESS_HORIZON, DEADLETTER_RETENTION)

# Actions: what the executor does with an item.
DELETE_FILES = "delete_files"      # `files` (relative to `target`)
DELETE_TREE = "delete_tree"        # the whole `target`
ARCHIVE_TREE = "archive_tree"      # copy `target` into details.destination, verify, then delete it
VACUUM = "vacuum"                  # delta-rs vacuum
CLEANUP_LOG = "cleanup_log"        # delta-rs create_checkpoint + cleanup_metadata
COMPACT = "compact"                # delta-rs optimize.compact + create_checkpoint
ROLLUP_ROWS = "rollup_rows"        # progress rows -> progress_rollup, then deleted
DROP_ROWS = "drop_rows"            # rows deleted by predicate


@dataclass(frozen=True)
class Item:
    item_id: str
    rule: str
    action: str
    job: str | None
    target: str                          # the checkpoint, archive or table the item acts on
    bytes: int                           # freed when applied
    files: int                           # removed when applied
    reason: str
    paths: tuple[tuple[str, int], ...] = ()  # (path relative to target, bytes) for delete_files
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["paths"] = [list(p) for p in self.paths]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Item":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["paths"] = tuple((str(p), int(s)) for p, s in data.get("paths", ()))
        return cls(**values)


@dataclass(frozen=True)
class Plan:
    plan_id: str
    created_at: str
    home: str
    roots: tuple[str, ...]
    items: tuple[Item, ...]
    kept: tuple[dict[str, Any], ...] = ()      # per checkpoint: the batches kept restorable and why
    skipped: tuple[dict[str, Any], ...] = ()   # targets left alone: {target, job, reason}

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    @property
    def files(self) -> int:
        return sum(i.files for i in self.items)

    def per_rule(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for item in self.items:
            entry = out.setdefault(item.rule, {"items": 0, "bytes": 0, "files": 0})
            entry["items"] += 1
            entry["bytes"] += item.bytes
            entry["files"] += item.files
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"plan_id": self.plan_id, "created_at": self.created_at, "home": self.home, "roots": list(self.roots),
                "bytes": self.bytes, "files": self.files, "per_rule": self.per_rule(),
                "items": [i.to_dict() for i in self.items], "kept": list(self.kept), "skipped": list(self.skipped)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        return cls(plan_id=data["plan_id"], created_at=data["created_at"], home=data["home"],
                   roots=tuple(data["roots"]), items=tuple(Item.from_dict(i) for i in data["items"]),
                   kept=tuple(data.get("kept", ())), skipped=tuple(data.get("skipped", ())))

    def render(self) -> str:
        lines = [f"Retention plan {self.plan_id} for {self.home}: {len(self.items)} item(s), frees "
                 f"{human(self.bytes)} in {self.files:,} file(s) (dry run: nothing is changed)"]
        for rule, totals in self.per_rule().items():
            lines.append(f"  {rule:22} {totals['items']:4} item(s) {human(totals['bytes']):>10} {totals['files']:7,} file(s)")
        for item in self.items:
            lines.append(f"  [{item.item_id}] {item.rule}: {item.reason} ({human(item.bytes)}, {item.files:,} file(s))")
        for kept in self.kept:
            lines.append(f"  keeps {kept['target']}: {kept['reason']}")
        for skipped in self.skipped:
            lines.append(f"  leaves {skipped['target']} alone: {skipped['reason']}")
        return "\n".join(lines)


@dataclass
class ItemResult:
    item_id: str
    rule: str
    target: str
    outcome: str                 # done | partial | refused | failed
    bytes: int = 0               # freed
    files: int = 0               # removed
    bytes_written: int = 0       # new files (compaction, rollups)
    reason: str | None = None    # refused, failed or partial: why, one line
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class ApplyReport:
    run_id: str
    plan_id: str
    started_at: str
    finished_at: str | None = None
    results: list[ItemResult] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.results)

    @property
    def files(self) -> int:
        return sum(r.files for r in self.results)

    @property
    def bytes_written(self) -> int:
        return sum(r.bytes_written for r in self.results)

    @property
    def ok(self) -> bool:
        return all(r.outcome == "done" for r in self.results)

    @property
    def refused(self) -> bool:
        """Some item was not allowed (outside the roots, not planned now, a held lease): nothing done for it."""
        return any(r.outcome == "refused" for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "plan_id": self.plan_id, "started_at": self.started_at,
                "finished_at": self.finished_at, "bytes_freed": self.bytes, "files_removed": self.files,
                "bytes_written": self.bytes_written, "ok": self.ok, "results": [asdict(r) for r in self.results]}

    def render(self) -> str:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.outcome] = counts.get(r.outcome, 0) + 1
        lines = [f"Retention run {self.run_id} (plan {self.plan_id}): freed {human(self.bytes)} in {self.files:,} "
                 f"file(s), wrote {human(self.bytes_written)}; "
                 + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))]
        lines += [f"  [{r.item_id}] {r.outcome}: {r.rule} {r.target}: {r.reason}" for r in self.results
                  if r.outcome != "done"]
        return "\n".join(lines)

