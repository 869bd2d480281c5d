"""State audits as assets, two per streaming job, in group `state_audits` (`<group>_audits` for a job in a group
of its own: audit_group):

    <job>_state_audit       deep audit (Spark's state reader), hourly: exact rows per partition, eviction
    <job>_state_audit_fast  fast audit (state files + progress rows), on demand (the sensors compute it in
                            process each tick): binds no Spark resource at all, so its runs never start a JVM

Each materialization records the report in the `audits`/`findings` ops tables and shows it: markdown
tables of operators and findings, counts per severity, numbers per operator/store (which Dagster plots
over the materializations), and two charts saved as PNG files next to the audit
(`ops/<job>/audits/<audit_id>/`), linked by path: images inside the event log would cost ~180 KB per audit.
A job without a committed batch fails the run with one line ("job X has no checkpoint yet ..."); the
schedules skip such ticks instead.
"""
# No `from __future__ import annotations`: Dagster reads the asset function's annotations as types.

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, MaterializeResult, MetadataValue, asset

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.definition.targets import AuditTarget, resolve_audit

from stateops.dagster.groups import DEFAULT_GROUP, asset_group
from stateops.audit import AuditReport, fast_audit, load_history, record
from stateops.extras import MissingExtra
from stateops.audit.render import findings_markdown, operators_markdown, save_charts, severity_counts, store_label
from stateops.jobs.definition.environment import Environment
from stateops.layout import Layout
from stateops.redaction import redact

from stateops.dagster.catalog import catalog_for
from stateops.dagster.failure import redacted_step, redacted
from stateops.dagster.resources import PathsResource, SparkResource

GROUP = "state_audits"


def audit_group(spec: JobSpec) -> str:
    """The audits of a job in its own group (stateops.dagster.groups.asset_group) go to `<group>_audits`, the others to
    state_audits: next to their team's jobs, not in one list of every job's audits."""
    group = asset_group(spec)
    return GROUP if group == DEFAULT_GROUP else f"{group}_audits"


def deep_audit_key(spec: JobSpec) -> AssetKey:
    return AssetKey(f"{spec.name}_state_audit")


def fast_audit_key(spec: JobSpec) -> AssetKey:
    return AssetKey(f"{spec.name}_state_audit_fast")


def audit_target(spec: JobSpec, environment: Environment) -> AuditTarget:
    """The job's checkpoint, thresholds and join bound, resolved as `stateops audit JOB` does (its `${env:NAME}`
    references too)."""
    return resolve_audit(spec.name, catalog_for(environment).resolved())


def _rows_total(report: AuditReport) -> int | None:
    """The state's rows over the stores that have a count; None when none has (a fast audit of a join's
    stores, or of state stores that do not count rows: stateops.progress.rows_untracked), not 0."""
    counts = [op.rows_total for op in report.operators if op.rows_total is not None]
    return sum(counts) if counts else None


def audit_metadata(report: AuditReport, audit_id: str, layout: Layout, job: str) -> dict[str, object]:
    """What the UI shows for one audit: numbers (plotted over time by Dagster), tables, links to its charts."""
    history = load_history(layout, report.checkpoint, report.query_id)  # includes the audit just recorded
    counts = severity_counts(report.findings)
    skews = [op.skew_ratio for op in report.operators if op.skew_ratio is not None]
    try:
        charts, no_charts = save_charts(report, history, layout.audit_charts(job, audit_id)), None
    except MissingExtra as err:  # the audit stands without its pictures
        charts, no_charts = {}, {"charts": MetadataValue.md(f"_{err}_")}
    per_store = {}
    for op in report.operators:
        label = store_label(op.operator_id, op.operator_name, op.store_name).replace(" ", "_")
        if op.rows_total is not None:
            per_store[f"rows/{label}"] = op.rows_total
        per_store[f"bytes/{label}"] = op.bytes_total
    return {
        "audit_kind": report.kind,
        "audit_id": audit_id,
        "checkpoint": MetadataValue.path(report.checkpoint),
        "batch_id": report.batch_id,
        "watermark": report.watermark.isoformat() if report.watermark else None,
        "audit_seconds": report.duration_seconds,
        "findings/error": counts["error"],
        "findings/warn": counts["warn"],
        "findings/info": counts["info"],
        "finding_codes": ", ".join(sorted({f.code for f in report.findings})) or "none",
        "state_rows_total": _rows_total(report),
        "state_bytes_total": sum(op.bytes_total for op in report.operators),
        "max_skew_ratio": max(skews) if skews else None,
        **per_store,
        "operators": MetadataValue.md(operators_markdown(report)),
        "findings": MetadataValue.md(findings_markdown(report.findings)),
        **{f"chart/{name}": MetadataValue.path(path) for name, path in charts.items()},
        **(no_charts or {}),
    }


def _audit_and_record(context: AssetExecutionContext, spec: JobSpec, paths: PathsResource,
                      run_audit) -> MaterializeResult:
    """Resolve the job's checkpoint and thresholds, audit, record in the ops tables, report as metadata."""
    layout = paths.layout
    with redacted_step():
        target = audit_target(spec, paths.environment())
        report = run_audit(target, layout)
    audit_id = record(layout, report)
    context.log.info(redact(f"{report.kind} audit {audit_id} of {target.checkpoint}: batch {report.batch_id}, "
                            f"{len(report.findings)} finding(s)"))
    return MaterializeResult(metadata=redacted(audit_metadata(report, audit_id, layout, spec.name)))


def build_deep_audit_asset(spec: JobSpec) -> AssetsDefinition:
    key = deep_audit_key(spec)

    @asset(key=key, group_name=audit_group(spec), deps=[AssetKey(spec.output_asset)], kinds={"spark"},
           description=f"Deep state audit of {spec.name} (Spark's state reader): exact rows per partition, "
                       "skew, growth, eviction; recorded in the audits/findings ops tables.")
    def _deep(context: AssetExecutionContext, spark: SparkResource, paths: PathsResource) -> MaterializeResult:
        from stateops.audit import deep_audit

        return _audit_and_record(context, spec, paths, lambda target, layout: deep_audit(
            spark.spark_session, target.checkpoint, thresholds=target.thresholds, layout=layout, job=spec.name,
            join_bound=target.join_bound))

    return _deep


def build_fast_audit_asset(spec: JobSpec) -> AssetsDefinition:
    key = fast_audit_key(spec)

    @asset(key=key, group_name=audit_group(spec), deps=[AssetKey(spec.output_asset)], kinds={"python"},
           description=f"Fast state audit of {spec.name} (no JVM): state files per partition and the latest "
                       "progress rows; bytes skew and growth; recorded in the audits/findings ops tables.")
    def _fast(context: AssetExecutionContext, paths: PathsResource) -> MaterializeResult:
        return _audit_and_record(context, spec, paths, lambda target, layout: fast_audit(
            target.checkpoint, thresholds=target.thresholds, layout=layout, job=spec.name))

    return _fast

