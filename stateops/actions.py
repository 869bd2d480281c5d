"""The `actions` ops table: an append-only journal of what the control plane, runbooks and retention did.

One row per action and phase (e.g. `lease_takeover`/`done`, `maintenance_lock`/`acquired`, a runbook step
`archive`/`started` then `archive`/`done`), with who acted, the run ids involved and the details as JSON.
A Delta table (delta-rs), so sensors and the UI read it with pyarrow alone.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any, Mapping

import pyarrow as pa

from stateops.delta import append_rows, read_table
from stateops.layout import Layout

TABLE = "actions"
STATE_CHECK = "state_check"  # a run refused before its queries started (stateops.jobs.runtime.compatibility)
QUERY_RETRY = "query_retry"  # a run's queries started again after a transient failure (stateops.jobs.runtime.runner)

SCHEMA = pa.schema([
    ("action_id", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("job", pa.string()),
    ("action", pa.string()),
    ("phase", pa.string()),
    ("actor", pa.string()),
    ("run_id", pa.string()),
    ("dagster_run_id", pa.string()),
    ("runbook_id", pa.string()),
    ("details_json", pa.string()),
])


def record(layout: Layout, job: str, action: str, phase: str, *, actor: str,
           details: Mapping[str, Any] | None = None, run_id: str | None = None,
           dagster_run_id: str | None = None, runbook_id: str | None = None) -> str:
    """Append one row; returns its action id."""
    action_id = uuid.uuid4().hex
    row = {"action_id": action_id, "at": datetime.now(timezone.utc), "job": job, "action": action,
           "phase": phase, "actor": actor, "run_id": run_id, "dagster_run_id": dagster_run_id,
           "runbook_id": runbook_id, "details_json": json.dumps(dict(details or {}), sort_keys=True, default=str)}
    append_rows(layout.ops_table(TABLE), pa.Table.from_pylist([row], schema=SCHEMA))
    return action_id


def read(layout: Layout, job: str | None = None, action: str | None = None) -> list[dict[str, Any]]:
    """Rows oldest first, each with `details` parsed from `details_json`."""
    filters = [(column, "=", value) for column, value in (("job", job), ("action", action)) if value]
    table = read_table(layout.ops_table(TABLE), filters=filters or None)
    rows = [] if table is None else table.to_pylist()
    return sorted(({**row, "details": json.loads(row["details_json"])} for row in rows), key=lambda r: r["at"])
