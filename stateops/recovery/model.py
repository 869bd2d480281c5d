"""The runbook as data: what was asked (RecoveryRequest), what will be done (RecoveryPlan, printable and
JSON), and how it ended (RecoveryReport); what happened step by step is the runbook engine's StepEvent
(stateops.runbooks).

Everything here is plain data with `to_dict()`/`from_dict()`, so a plan can be shown in a terminal or a
Dagster UI, stored next to the archive, compared in tests, and read back to resume a runbook.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from stateops.errors import StateOpsError

MODES = ("adjust", "repartition", "rebuild", "rewind", "restore", "restart", "switch-store", "migrate")
OUTCOMES = ("planned", "succeeded", "rolled_back", "failed")

# Step names (also the journal's and the fault points' names).
VERIFY_SOURCE = "verify_source"
STOP = "stop"
AUDIT_BEFORE = "audit_before"
ARCHIVE = "archive"
ADJUST = "adjust"
REPARTITION = "repartition"
SWITCH_STORE = "switch_store"
MIGRATE = "migrate_state"
REWIND_CUT = "rewind_cut"
FRESH_CHECKPOINT = "fresh_checkpoint"
RESTORE_CHECKPOINT = "restore_checkpoint"
ALIGN_SINK = "align_sink"
RESTART = "restart"
VERIFY = "verify"
ROLLBACK_STOP = "rollback_stop"
ROLLBACK_CHECKPOINT = "rollback_checkpoint"
ROLLBACK_SETTINGS = "rollback_settings"
ROLLBACK_SINK = "rollback_sink"
ROLLBACK_RESTART = "rollback_restart"
ROLLBACK_VERIFY = "rollback_verify"
ROLLBACK_STEPS = (ROLLBACK_STOP, ROLLBACK_CHECKPOINT, ROLLBACK_SETTINGS, ROLLBACK_SINK, ROLLBACK_RESTART,
                  ROLLBACK_VERIFY)
FINISH = "finish"


class RecoveryRefused(StateOpsError):
    """The runbook will not act (unsafe, unconfirmed, or impossible); nothing was changed."""


class MigrationRefused(RecoveryRefused):
    """A migration that would not carry every change: the line names the first such change; `migration` holds them
    all, classified (`recover plan --mode migrate --json` shows them with the refusal)."""

    def __init__(self, message: str, migration: dict[str, Any]):
        super().__init__(message)
        self.migration = migration


@dataclass(frozen=True)
class Step:
    name: str
    action: str          # what it does, in one line
    destructive: bool    # changes the checkpoint, the sink or the settings
    idempotent: bool     # safe to apply again when a crash interrupted it


@dataclass(frozen=True)
class RecoveryPlan:
    runbook_id: str
    job: str
    mode: str
    request: dict[str, Any]
    actor: str
    reason: str
    created_at: str
    checkpoint: str
    query_id: str
    latest_committed_batch: int
    watermark: str | None
    state_partitions: int | None
    sink_table: str
    running: dict[str, Any] | None    # the job's lease when planned (None: nothing runs)
    restart_mode: str                 # bounded | continuous: how the query ran before
    archive: dict[str, Any]           # id, path, method (copy|rename), bytes, required_bytes, free_bytes
    settings_before: dict[str, Any]   # watermark_delay, shuffle_partitions, sink_epoch in force
    settings_after: dict[str, Any]
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    dry_run: bool = True
    # what the restart of the checkpoint as it stands loads, and its estimate (stateops.checkpoints.restart_cost);
    # None for a rebuild (a new checkpoint loads nothing) and in plans made before it was shown
    restart: dict[str, Any] | None = None
    # migrate: the changes classified and the rewrites that carry them (stateops.migration.classify.Migration)
    migration: dict[str, Any] | None = None

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["steps"] = [asdict(s) for s in self.steps]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RecoveryPlan":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["steps"] = tuple(Step(**s) for s in data["steps"])
        values["notes"] = tuple(data.get("notes", ()))
        return cls(**values)

    def render(self) -> str:
        """The plan as an operator reads it before confirming."""
        running = self.running
        holder = (f"run {running['run_id']} ({running.get('mode') or 'unknown mode'}, pid {running['pid']} on "
                  f"{running['host']}{', stale' if running.get('stale') else ''})" if running else "nothing runs")
        changes = [f"{name} {self.settings_before.get(name)} -> {value}"
                   for name, value in self.settings_after.items() if value != self.settings_before.get(name)]
        archive = self.archive
        lines = [
            f"Recovery plan {self.runbook_id}: {self.mode} {self.job}"
            + (" (dry run: nothing is changed)" if self.dry_run else ""),
            f"  checkpoint   {self.checkpoint} (query {self.query_id}, latest committed batch "
            f"{self.latest_committed_batch}, watermark {self.watermark or 'none'}, "
            f"{self.state_partitions if self.state_partitions is not None else '?'} state partitions)",
            f"  running      {holder}; restart {self.restart_mode}",
            *([f"  state load   {self.restart['summary']}"] if self.restart else []),
            f"  archive      {archive['path']} ({archive['method']}, {_size(archive['bytes'])}; needs "
            f"{_size(archive['required_bytes'])} free, {_size(archive['free_bytes'])} free)",
            f"  sink         {self.sink_table}",
            f"  changes      {'; '.join(changes) or 'none'}",
            "  steps:",
        ]
        if self.migration:
            lines.append(f"  migration    {self.migration['carried']}"
                         + (f" (complete from batch {self.migration['boundary']['batch']}, event time "
                            f"{self.migration['boundary']['complete_from_ms']} ms)" if self.migration['boundary']
                            else ""))
            lines += [f"    {c['carried']:10} {c['change']:17} {c['operator']}: {c['reason']}"
                      for c in self.migration["changes"]]
        lines += [f"    {i}. {s.name:18} {s.action}" for i, s in enumerate(self.steps, 1)]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def _size(count: int | None) -> str:
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


@dataclass
class RecoveryReport:
    """How a runbook ended: outcome, the plan, before/after audits, the verification, and a rollback's why."""

    runbook_id: str
    job: str
    mode: str
    outcome: str
    plan: dict[str, Any]
    archive_path: str | None = None
    audit_before: dict[str, Any] | None = None
    audit_after: dict[str, Any] | None = None
    verification: dict[str, Any] | None = None
    rollback: dict[str, Any] | None = None   # {reason, verification} when rolled back
    error: str | None = None                  # why it failed or rolled back, one line
    notes: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)   # the journal entries of this runbook
    started_at: str | None = None
    finished_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        text = {"planned": "planned (dry run)", "succeeded": "succeeded", "rolled_back": "ROLLED BACK",
                "failed": "FAILED"}[self.outcome]
        line = f"{self.job}: {self.mode} runbook {self.runbook_id} {text}"
        if self.error:
            line += f": {self.error}"
        return line
