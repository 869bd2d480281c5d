"""Per-job overrides of the watermark delay and the shuffle partitions, with their full history; and the
runbook's sink settings (the sink epoch and a rebuild's replay rules: stateops.sinkstate).

The `overrides` ops table (Delta, append-only) keeps every change: value (None = cleared), previous value,
reason, actor, time, runbook id. The value in force is the latest row per (job, setting). Values are
validated at write: a watermark delay must lie within the job's [watermark_min, watermark_max]; shuffle
partitions must be a positive integer (they only take effect on a new checkpoint: Spark keeps a
checkpoint's own value). Changes are serialized by the job's control lock, so `previous` is exact.
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from stateops.delta import append_rows, read_table
from stateops.durations import parse_seconds
from stateops.errors import ConfigError
from stateops.layout import Layout

from stateops.control.store import ControlStore

TABLE = "overrides"
WATERMARK_DELAY = "watermark_delay"
SHUFFLE_PARTITIONS = "shuffle_partitions"
SETTINGS = (WATERMARK_DELAY, SHUFFLE_PARTITIONS)
SINK_EPOCH = "sink_epoch"    # part of the sink's Delta transaction app id; every runbook restart takes a new one
SINK_REPLAY = "sink_replay"  # JSON: a rebuild's write floor and insert-if-absent horizon, for one epoch
# JSON: the state store and formats of the checkpoint a rebuild replaced, for the new one
# (stateops.checkpoints.state_store)
STATE_FORMATS = "state_formats"
# JSON: an adopted job's checkpoint (query id) and the newest of its batches the table held (stateops.adoption)
ADOPTION = "adoption"
RUNBOOK_SETTINGS = (SINK_EPOCH, SINK_REPLAY, STATE_FORMATS, ADOPTION)  # written by runbooks only, never by `jobs override`

SCHEMA = pa.schema([
    ("change_id", pa.string()),
    ("changed_at", pa.timestamp("us", tz="UTC")),
    ("job", pa.string()),
    ("setting", pa.string()),
    ("value", pa.string()),
    ("previous", pa.string()),
    ("reason", pa.string()),
    ("actor", pa.string()),
    ("runbook_id", pa.string()),
])


@dataclass(frozen=True)
class WatermarkBounds:
    """The job's allowed watermark delays (its watermark_min and watermark_max)."""

    low: str
    high: str


@dataclass(frozen=True)
class Override:
    change_id: str
    changed_at: datetime
    job: str
    setting: str
    value: str | None
    previous: str | None
    reason: str
    actor: str
    runbook_id: str | None

    def contract(self) -> dict[str, Any]:
        return {"value": self.value, "previous": self.previous, "reason": self.reason, "actor": self.actor,
                "changed_at": self.changed_at.isoformat(), "runbook_id": self.runbook_id,
                "change_id": self.change_id}


def validate(job: str, setting: str, value: Any, bounds: WatermarkBounds) -> str:
    """The value as stored (text), or ConfigError naming the setting, the problem and the fix."""
    if setting == WATERMARK_DELAY:
        seconds = parse_seconds(value)
        if seconds is None:
            raise ConfigError(setting, f"{value!r} is not an interval",
                              'write a number and a unit, e.g. "20 minutes"')
        low, high = parse_seconds(bounds.low), parse_seconds(bounds.high)
        if not low <= seconds <= high:
            raise ConfigError(setting, f"{value!r} is outside {job}'s bounds [{bounds.low}, {bounds.high}]",
                              "choose a delay within the bounds, or widen watermark_min/watermark_max "
                              "in the config file deliberately")
        return value.strip()
    if setting == SHUFFLE_PARTITIONS:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = 0
        if number < 1:
            raise ConfigError(setting, f"{value!r} is not a positive integer",
                              "use a positive integer, e.g. 8 (it applies to a new checkpoint only)")
        return str(number)
    if setting == SINK_EPOCH:
        if not str(value).isdigit():
            raise ConfigError(setting, f"{value!r} is not a non-negative integer", "runbooks count epochs 0, 1, 2, ...")
        return str(int(value))
    if setting in (SINK_REPLAY, STATE_FORMATS, ADOPTION):
        return str(value)
    raise ConfigError("setting", f"{setting!r} cannot be overridden", f"use one of {SETTINGS}")


def history(layout: Layout, job: str | None = None) -> list[Override]:
    """Every change, oldest first."""
    table = read_table(layout.ops_table(TABLE), filters=[("job", "=", job)] if job else None)
    rows = [] if table is None else table.to_pylist()
    return [Override(**row) for row in sorted(rows, key=lambda r: r["changed_at"])]


def _in_force(changes: list[Override]) -> dict[str, Override]:
    """Setting -> the latest of `changes` (oldest first), unless it cleared the setting."""
    latest: dict[str, Override] = {}
    for change in changes:
        latest[change.setting] = change
    return {setting: change for setting, change in latest.items() if change.value is not None}


def in_force(layout: Layout, job: str) -> dict[str, Override]:
    """Setting -> the override in force (the latest change, unless it cleared the setting)."""
    return _in_force(history(layout, job))


def in_force_by_job(layout: Layout) -> dict[str, dict[str, Override]]:
    """Job -> in_force for every job with an override, from one read of the table: a sensor tick or `jobs
    status` over every job reads it once, not once per job (each read scans the whole table)."""
    by_job: dict[str, list[Override]] = {}
    for change in history(layout):
        by_job.setdefault(change.job, []).append(change)
    return {job: forced for job, changes in by_job.items() if (forced := _in_force(changes))}


def _change(layout: Layout, job: str, setting: str, value: str | None, *, reason: str, actor: str,
            runbook_id: str | None) -> Override | None:
    if not reason or not reason.strip():
        raise ConfigError("reason", "is required for every override change", "say why, e.g. --reason 'late data'")
    with ControlStore(layout, job).critical():
        before = in_force(layout, job).get(setting)
        if value is None and before is None:
            return None
        change = Override(change_id=uuid.uuid4().hex, changed_at=datetime.now(timezone.utc), job=job,
                          setting=setting, value=value, previous=before.value if before else None,
                          reason=reason.strip(), actor=actor, runbook_id=runbook_id)
        append_rows(layout.ops_table(TABLE), pa.Table.from_pylist([asdict(change)], schema=SCHEMA))
    return change


def set_override(layout: Layout, job: str, setting: str, value: Any, *, bounds: WatermarkBounds, reason: str,
                 actor: str, runbook_id: str | None = None) -> Override:
    """Record a new value in force for `setting`, validated against the job's bounds."""
    return _change(layout, job, setting, validate(job, setting, value, bounds), reason=reason, actor=actor,
                   runbook_id=runbook_id)


def clear_override(layout: Layout, job: str, setting: str, *, reason: str, actor: str,
                   runbook_id: str | None = None) -> Override | None:
    """Clear `setting` (back to the config file or spec default); None when no override was in force."""
    if setting not in SETTINGS + RUNBOOK_SETTINGS:
        raise ConfigError("setting", f"{setting!r} cannot be overridden", f"use one of {SETTINGS}")
    return _change(layout, job, setting, None, reason=reason, actor=actor, runbook_id=runbook_id)
