"""The `storage` ops table: one row per retention plan or run (storage by kind, what the plan would free,
what a run freed), so storage over time can be charted (Dagster's retention asset) and audited."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from stateops.charts import bytes_axis, figure, png
from stateops.delta import append_rows, read_table
from stateops.layout import Layout
from stateops.retention.inventory import Inventory
from stateops.retention.model import ApplyReport, Plan

TABLE = "storage"
_TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("recorded_at", _TS), ("home", pa.string()), ("plan_id", pa.string()), ("run_id", pa.string()),
    ("applied", pa.bool_()), ("total_bytes", pa.int64()), ("total_files", pa.int64()),
    ("checkpoints_bytes", pa.int64()), ("archives_bytes", pa.int64()), ("tables_bytes", pa.int64()),
    ("ops_tables_bytes", pa.int64()), ("planned_bytes", pa.int64()), ("planned_files", pa.int64()),
    ("freed_bytes", pa.int64()), ("freed_files", pa.int64()), ("written_bytes", pa.int64()),
    ("per_rule_json", pa.string()),
])


def row(inventory: Inventory | None, plan: Plan, report: ApplyReport | None) -> dict[str, Any]:
    totals = inventory.to_dict()["totals"] if inventory is not None else {}
    return {
        "recorded_at": datetime.now(timezone.utc), "home": plan.home, "plan_id": plan.plan_id,
        "run_id": report.run_id if report else None, "applied": report is not None,
        "total_bytes": totals.get("bytes"), "total_files": totals.get("files"),
        "checkpoints_bytes": totals.get("checkpoints_bytes"), "archives_bytes": totals.get("archives_bytes"),
        "tables_bytes": totals.get("tables_bytes"), "ops_tables_bytes": totals.get("ops_tables_bytes"),
        "planned_bytes": plan.bytes, "planned_files": plan.files,
        "freed_bytes": report.bytes if report else None, "freed_files": report.files if report else None,
        "written_bytes": report.bytes_written if report else None,
        "per_rule_json": json.dumps(plan.per_rule(), sort_keys=True),
    }


def record(layout: Layout, inventory: Inventory | None, plan: Plan, report: ApplyReport | None = None) -> None:
    append_rows(layout.ops_table(TABLE), pa.Table.from_pylist([row(inventory, plan, report)], schema=SCHEMA))


def read(layout: Layout) -> list[dict[str, Any]]:
    """Rows oldest first."""
    table = read_table(layout.ops_table(TABLE))
    return [] if table is None else sorted(table.to_pylist(), key=lambda r: r["recorded_at"])


def storage_chart(rows: list[dict[str, Any]]) -> bytes | None:
    """Storage over time by kind (checkpoints, archives, tables, ops tables) from `storage` rows, as a PNG in
    StateOps' one chart style (stateops.charts, as the audits'); None without two points to draw."""
    points = [r for r in rows if r.get("total_bytes") is not None]
    if len(points) < 2:
        return None
    fig, (ax,) = figure(1)
    times = [r["recorded_at"] for r in points]
    for column, label in (("total_bytes", "total"), ("checkpoints_bytes", "checkpoints"),
                          ("archives_bytes", "archives"), ("tables_bytes", "tables"), ("ops_tables_bytes", "ops tables")):
        ax.plot(times, [r.get(column) or 0 for r in points], marker="o", markersize=3, label=label)
    ax.set_title("storage under the StateOps home", fontsize=9)
    bytes_axis(ax)
    ax.tick_params(labelsize=7)
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return png(fig)
