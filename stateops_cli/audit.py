"""`stateops audit TARGET [--batch-id N] [--fast] [--json]`: the audit for scripts and other orchestrators.

TARGET is a job name from the catalog or a checkpoint path. `--json` prints exactly the contract of
`stateops.audit.AuditReport.to_json()`. Exit codes: 0 no error findings, 1 error findings, 2 usage errors
(unknown target, missing/empty/non-checkpoint path, uncommitted batch), as one line without a traceback.
Thresholds: `[audit]` and `[audit.jobs.<job>]` in the STATEOPS_CONFIG file (see stateops.audit.thresholds).
A job's stream-stream join is judged by the job's own time bound (its spec's `join`), also when TARGET is
the job's checkpoint path.
Every audit is appended to the `audits` and `findings` ops tables unless --no-record.
"""
from __future__ import annotations

import json
import sys

import click

from stateops.audit import AuditReport, fast_audit, record
from stateops.sizes import human_bytes
from stateops.timefmt import human_duration
from stateops.errors import StateOpsError

from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.targets import resolve_audit


def _cell(value) -> str:
    return "-" if value is None else str(value)


def render(report: AuditReport) -> str:
    """Human-readable report: one line per operator/store, then findings with their fixes."""
    lag = report.watermark_lag_seconds
    lines = [f"{report.kind.capitalize()} audit of {report.checkpoint}" + (f" (job {report.job})" if report.job else ""),
             f"batch {report.batch_id}, watermark {report.watermark.isoformat() if report.watermark else 'none'}"
             + (f" ({human_duration(lag)} behind {report.measured_against})" if lag is not None else "")
             + (f", provider {report.provider.rsplit('.', 1)[-1]}" if report.provider else "")
             + (f", {report.duration_seconds:.1f} s" if report.duration_seconds is not None else "")]
    header = ("op", "operator", "store", "kind", "rows", "skew", "bytes", "estimated", "behind wm", "unmatched",
              "batches")
    table = [header]
    for op in report.operators:
        table.append((str(op.operator_id), op.operator_name, op.store_name, op.kind, _cell(op.rows_total),
                      f"{op.skew_ratio:g} ({op.skew_basis})" if op.skew_ratio is not None else "-",
                      human_bytes(op.bytes_total),
                      human_bytes(op.estimated_bytes) if op.estimated_bytes is not None else "-",
                      _cell(op.rows_behind_watermark), _cell(op.unmatched_rows),
                      f"{_cell(op.min_batch_id)}..{_cell(op.max_batch_id)}"))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for op in report.operators:
        if op.top_keys:
            top = op.top_keys[0]
            lines.append(f"largest value in op {op.operator_id}/{op.store_name}: {json.dumps(op.contract()['top_keys'][0]['key'])}"
                         f" ({top['value_bytes']} B, partition {top['partition_id']})")
    if not report.findings:
        lines.append("No findings.")
    for f in report.findings:
        where = "" if f.operator_id is None else f" [op {f.operator_id}{'/' + f.store_name if f.store_name else ''}]"
        lines.append(f"{f.severity.upper():5} {f.code}{where}: {f.message}")
        lines.append(f"      fix: {f.recommendation}")
    return "\n".join(lines)


@click.command("audit")
@click.argument("target")
@click.option("--batch-id", type=click.IntRange(min=0), default=None,
              help="Audit this committed batch instead of the latest (deep audit only).")
@click.option("--fast", is_flag=True, help="No Spark: state files and progress rows only (seconds).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON contract.")
@click.option("--no-record", is_flag=True, help="Do not append to the audits/findings ops tables.")
@click.pass_context
def audit(ctx: click.Context, target: str, batch_id: int | None, fast: bool, as_json: bool, no_record: bool) -> None:
    """Audit the state of a job (by name) or of a checkpoint path: exit 1 on error findings."""
    obj: Environment = ctx.obj
    if fast and batch_id is not None:
        raise StateOpsError("--batch-id needs the deep audit (the fast audit reads the latest state only); "
                            "drop --fast")
    layout, resolved = obj.layout, resolve_audit(target, obj.catalog)
    if fast:
        report = fast_audit(resolved.checkpoint, thresholds=resolved.thresholds, layout=layout, job=resolved.job)
    else:
        from stateops.jobs.runtime.session import get_session
        from stateops.audit import deep_audit

        report = deep_audit(get_session(obj.spark), resolved.checkpoint, batch_id=batch_id,
                            thresholds=resolved.thresholds, layout=layout, job=resolved.job,
                            join_bound=resolved.join_bound)
    if not no_record:
        record(layout, report)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(render(report))
    sys.stdout.flush()
    ctx.exit(1 if report.has_errors else 0)
