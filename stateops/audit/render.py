"""An audit as pictures and tables: markdown for operators and findings, PNG charts. No Dagster, no JVM.

    operators_markdown(report)       one row per operator/store: rows, bytes, skew, partitions
    findings_markdown(findings)      code, severity, where, message, fix (Finding objects or findings-table rows)
    severity_counts(findings)        {"error": n, "warn": n, "info": n}
    partition_chart(report)          PNG: rows per partition as bars, one panel per store (bytes if no rows)
    history_chart(history_rows)      PNG: state rows and bytes over time, one line per store (`audits` rows)
    save_charts(report, history, folder)  both charts as PNG files in `folder` (next to the audit): {name: path}

Every chart is stateops.charts.PNG_SIZE pixels whatever the data, rendered with matplotlib's Agg backend (no display).
Charts are files, never data inside the Dagster event log: an embedded pair of charts made every audit's
events ~180 KB (a year of hourly audits: 1.6 GB in the instance); linked files leave a few KB.
"""
from __future__ import annotations

import posixpath
import statistics
from typing import Any, Iterable, Mapping, Sequence

from stateops.audit.model import SEVERITIES, AuditReport, Finding, OperatorAudit
from stateops.charts import bytes_axis, figure, png
from stateops.sizes import human_bytes
from stateops.storage import write_bytes



def _cell(value: Any) -> str:
    """A markdown table cell: '-' for missing, pipes escaped, one line."""
    if value is None or value == "":
        return "-"
    return str(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _spread(per_partition: Mapping[int, int]) -> str:
    """min / median / max (partition of the max) over every partition, empty ones included."""
    if not per_partition:
        return "-"
    hottest = max(per_partition, key=lambda p: (per_partition[p], -p))
    values = list(per_partition.values())
    return (f"{min(values):,} / {statistics.median(values):,g} / {per_partition[hottest]:,} "
            f"(p{hottest})")


def store_label(operator_id: int, operator_name: str, store_name: str) -> str:
    return f"op {operator_id} {operator_name}/{store_name}"


def operators_markdown(report: AuditReport) -> str:
    """One row per operator and store, with the numbers an operator pages on."""
    if not report.operators:
        return "_No stateful operators in this checkpoint._"
    header = ("op", "operator", "store", "kind", "partitions", "rows", "rows per partition (min / median / max)",
              "bytes", "bytes per partition (min / median / max)", "skew (max/mean)", "behind watermark",
              "batches")
    rows = []
    for op in report.operators:
        skew = f"{op.skew_ratio:g} ({op.skew_basis})" if op.skew_ratio is not None else "-"
        bytes_spread = ("-" if not op.bytes_per_partition else
                        " / ".join(human_bytes(v) for v in (min(op.bytes_per_partition.values()),
                                                            statistics.median(op.bytes_per_partition.values()),
                                                            max(op.bytes_per_partition.values()))))
        rows.append((op.operator_id, op.operator_name, op.store_name, op.kind, op.num_partitions,
                     _int(op.rows_total), _spread(op.rows_per_partition),
                     f"{human_bytes(op.bytes_total)} ({op.bytes_total:,} B)", bytes_spread, skew,
                     _int(op.rows_behind_watermark), f"{_cell(op.min_batch_id)}..{_cell(op.max_batch_id)}"))
    return _table(header, rows)


def _as_dict(finding: Finding | Mapping[str, Any]) -> Mapping[str, Any]:
    return finding.contract() if isinstance(finding, Finding) else finding


def findings_markdown(findings: Iterable[Finding | Mapping[str, Any]]) -> str:
    """Worst first: severity, code, operator/store, message with its numbers, recommendation."""
    order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    items = sorted((_as_dict(f) for f in findings), key=lambda f: (order.get(f["severity"], 9), f["code"]))
    if not items:
        return "_No findings._"
    rows = []
    for f in items:
        where = "-" if f.get("operator_id") is None else (
            f"op {f['operator_id']}" + (f"/{f['store_name']}" if f.get("store_name") else ""))
        rows.append((f["severity"].upper(), f["code"], where, f["message"], f["recommendation"]))
    return _table(("severity", "code", "where", "message", "recommendation"), rows)


def severity_counts(findings: Iterable[Finding | Mapping[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in reversed(SEVERITIES)}
    for f in findings:
        counts[_as_dict(f)["severity"]] += 1
    return counts


def partition_chart(report: AuditReport) -> bytes | None:
    """Bars per partition, one panel per operator/store: rows (deep), or bytes on disk (fast: no rows)."""
    stores: list[OperatorAudit] = [op for op in report.operators if op.rows_per_partition or op.bytes_per_partition]
    if not stores:
        return None
    fig, axes = figure(len(stores))
    for ax, op in zip(axes, stores):
        by_rows = bool(op.rows_per_partition)
        data = op.rows_per_partition if by_rows else op.bytes_per_partition
        parts = sorted(data)
        values = [data[p] or 0 for p in parts]
        top = max(values) if values else 0
        ax.bar(parts, values, color=["#d9534f" if v == top and top > 0 else "#4a7ab5" for v in values])
        ax.set_title(f"{store_label(op.operator_id, op.operator_name, op.store_name)}"
                     + (f"\nskew {op.skew_ratio:g}" if op.skew_ratio is not None else ""), fontsize=8)
        ax.set_xlabel("partition", fontsize=8)
        ax.set_ylabel("rows" if by_rows else "bytes on disk", fontsize=8)
        if not by_rows:
            bytes_axis(ax)
        if len(parts) <= 16:
            ax.set_xticks(parts)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{report.kind} audit, batch {report.batch_id}: state per partition", fontsize=9)
    return png(fig)


def history_chart(history: Sequence[Mapping[str, Any]]) -> bytes | None:
    """State rows and bytes over time per operator/store, from `audits` table rows (deep and fast)."""
    series: dict[str, list[Mapping[str, Any]]] = {}
    for row in sorted(history, key=lambda r: r["audited_at"]):
        series.setdefault(store_label(row["operator_id"], row["operator_name"], row["store_name"]), []).append(row)
    if not series:
        return None
    fig, (rows_ax, bytes_ax) = figure(2)
    for label, points in series.items():
        with_rows = [p for p in points if p.get("rows_total") is not None]
        if with_rows:
            rows_ax.plot([p["audited_at"] for p in with_rows], [p["rows_total"] for p in with_rows], marker="o",
                         markersize=3, label=label)
        bytes_ax.plot([p["audited_at"] for p in points], [p.get("bytes_total") or 0 for p in points], marker="o",
                      markersize=3, label=label)
    rows_ax.set_title("state rows", fontsize=9)
    bytes_ax.set_title("state bytes on disk", fontsize=9)
    bytes_axis(bytes_ax)
    for ax in (rows_ax, bytes_ax):
        ax.tick_params(labelsize=7)
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return png(fig)


def save_charts(report: AuditReport, history: Sequence[Mapping[str, Any]], folder: str) -> dict[str, str]:
    """Write the partition chart and the history chart as PNG files into `folder`; {chart name: path}."""
    charts = {"state_per_partition": partition_chart(report), "state_over_time": history_chart(history)}
    saved = {}
    for name, drawn in charts.items():
        if drawn is not None:
            path = posixpath.join(folder.rstrip("/"), f"{name}.png")
            write_bytes(path, drawn)
            saved[name] = path
    return saved
