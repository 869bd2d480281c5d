"""Asset checks on each streaming job's asset (key = its sink table): state skew, growth and eviction, and
whether the job's query still fits its checkpoint's state (`state_compatible`).

A check does not audit: it reads the latest *deep* audit recorded for the job's checkpoint (and its
current query) from the `audits`/`findings` ops tables, so it is cheap (no JVM) and says exactly which
audit it reflects (id, time, age, batch in its metadata). Deep, because the fast audit cannot see
eviction or rows per partition. The checks run after the deep audit asset in `<job>_deep_audit` (the
job's own `<job>_job` run leaves them out: it audits nothing); a materialization from the asset page runs them
too, where they restate the latest deep audit, whose age their metadata and description give.

Severity: an error finding of the check's codes -> failed, ERROR; a warn finding -> failed, WARN;
otherwise passed. No deep audit recorded yet (or no checkpoint) -> failed, WARN: unknown is not healthy.

`state_compatible` is `stateops jobs check JOB`: the job's query as it is now, planned against a copy of its
checkpoint's schema files (Spark's own rules, and key columns by name: stateops.jobs.runtime.compatibility).
It needs Spark, so it runs in the deep audit job (which starts one anyway), hourly, and from the asset's Checks
tab after a change to the job; a run refused for it fails in one line naming the rebuild. Refused -> failed,
ERROR; the check could not decide -> failed, WARN; no state yet or it fits -> passed.
"""
# No `from __future__ import annotations`: Dagster reads the check function's annotations as types.
import datetime as dt
from typing import Any, Iterable, Mapping, Optional

from dagster import (AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec,
                     AssetChecksDefinition, AssetKey, MetadataValue, asset_check, multi_asset_check)

from stateops.jobs.definition.spec import JobSpec
from stateops.audit import load_findings, load_history
from stateops.timefmt import human_duration
from stateops.audit.render import findings_markdown
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import StateOpsError, first_line
from stateops.layout import Layout

from stateops.dagster.audits.assets import audit_target, deep_audit_key
from stateops.dagster.catalog import catalog_for
from stateops.dagster.failure import redacted_step, redacted
from stateops.dagster.resources import PathsResource, SparkResource

COMPATIBLE = "state_compatible"

# check name -> (finding codes it reflects, what it is about)
CHECKS: dict[str, tuple[tuple[str, ...], str]] = {
    "state_skew": (("STATE_SKEW",), "state concentrated on one partition (max/mean rows per partition)"),
    "state_growth": (("STATE_GROWTH", "STATE_MEMORY"), "state rows/bytes growing against earlier audits of this "
                     "checkpoint; Spark's in-memory store near the heap the settings give it"),
    "state_eviction": (("EVICTION_STALLED", "UNBOUNDED_DEDUP", "CLEANUP_STUCK"),
                       "state the watermark should have evicted, dedup without event time, cleanup stuck"),
    "state_readable": (("STATE_UNREADABLE",), "every store loads at the audited batch (no corrupt or lost state file)"),
}


def latest_deep_audit(layout: Layout, checkpoint: str) -> tuple[Optional[dict[str, Any]], list[dict[str, Any]]]:
    """(one `audits` row of the newest deep audit of the checkpoint's current query, its findings rows)."""
    try:
        query_id = Checkpoint.open(checkpoint).query_id()
    except (StateOpsError, OSError, ValueError, KeyError):
        query_id = None
    deep = [r for r in load_history(layout, checkpoint, query_id) if r["kind"] == "deep"]
    if not deep:
        return None, []
    latest = max(deep, key=lambda r: r["audited_at"])
    return latest, [f for f in load_findings(layout, checkpoint) if f["audit_id"] == latest["audit_id"]]


def check_result(name: str, audit: Optional[Mapping[str, Any]], findings: Iterable[Mapping[str, Any]],
                 now: dt.datetime, missing: Optional[str] = None) -> AssetCheckResult:
    """One check's verdict from the findings of one recorded audit (pure: testable without Dagster runs)."""
    codes, _about = CHECKS[name]
    if audit is None:
        message = missing or "no deep audit recorded for this checkpoint yet"
        return AssetCheckResult(check_name=name, passed=False, severity=AssetCheckSeverity.WARN,
                                description=message, metadata={"status": message})
    mine = [f for f in findings if f["code"] in codes]
    severities = {f["severity"] for f in mine}
    age = (now - audit["audited_at"]).total_seconds()
    described = (f"deep audit {audit['audit_id'][:8]} of batch {audit['batch_id']}, "
                 f"{audit['audited_at'].isoformat(timespec='seconds')} ({human_duration(age)} ago): ")
    metadata = {
        "audit_id": audit["audit_id"],
        "audited_at": audit["audited_at"].isoformat(),
        "audit_age_seconds": round(age, 1),
        "batch_id": audit["batch_id"],
        "codes": ", ".join(codes),
        "findings": MetadataValue.md(findings_markdown(mine)),
        "messages": MetadataValue.json([{"code": f["code"], "severity": f["severity"], "message": f["message"],
                                         "recommendation": f["recommendation"]} for f in mine]),
    }
    if "error" in severities or "warn" in severities:
        severity = AssetCheckSeverity.ERROR if "error" in severities else AssetCheckSeverity.WARN
        worst = next(f for f in mine if f["severity"] == severity.value.lower())
        return AssetCheckResult(check_name=name, passed=False, severity=severity, metadata=metadata,
                                description=described + f"{worst['code']}: {worst['message']}")
    return AssetCheckResult(check_name=name, passed=True, metadata=metadata,
                            description=described + f"no warn/error {'/'.join(codes)} finding")


def build_state_checks(spec: JobSpec) -> AssetChecksDefinition:
    audit_key = deep_audit_key(spec)
    specs = [AssetCheckSpec(name, asset=AssetKey(spec.output_asset), additional_deps=[audit_key],
                            description=f"{about.capitalize()} ({', '.join(codes)}). Reflects the latest deep "
                                        f"audit recorded by {audit_key.to_user_string()} (hourly); the audit's "
                                        "id, time and age are in the result's metadata.")
             for name, (codes, about) in CHECKS.items()]

    @multi_asset_check(name=f"{spec.name}_state_checks", specs=specs,
                       description=f"Skew, growth and eviction of {spec.name}'s state, from its latest deep audit.")
    def _checks(context: AssetCheckExecutionContext, paths: PathsResource) -> Iterable[AssetCheckResult]:
        layout = paths.layout
        now = dt.datetime.now(dt.timezone.utc)
        try:
            checkpoint = audit_target(spec, paths.environment()).checkpoint
        except StateOpsError as err:
            for name in CHECKS:
                yield check_result(name, None, [], now, missing=first_line(err))
            return
        audit, findings = latest_deep_audit(layout, checkpoint)
        for name in CHECKS:
            yield check_result(name, audit, findings, now)

    return _checks



def compatibility_result(fit) -> AssetCheckResult:
    """`state_compatible` from a StateFit (stateops.jobs.runtime.compatibility)."""
    metadata = redacted({key: value for key, value in (
        ("status", fit.status), ("error_class", fit.error_class), ("operator", fit.operator), ("change", fit.change),
        ("fix", fit.to_json()["fix"]), ("rebuild", fit.rebuild), ("checkpoint", fit.checkpoint)) if value})
    if fit.debt:
        metadata["migration_debt"] = fit.debt["line"]
    if fit.compatible and fit.owes:  # a partial migration: a warning until its boundary is settled
        return AssetCheckResult(check_name=COMPATIBLE, passed=False, severity=AssetCheckSeverity.WARN,
                                description=fit.line, metadata=metadata)
    if fit.compatible:
        return AssetCheckResult(check_name=COMPATIBLE, passed=True, description=fit.line, metadata=metadata)
    severity = AssetCheckSeverity.ERROR if fit.compatible is False else AssetCheckSeverity.WARN
    return AssetCheckResult(check_name=COMPATIBLE, passed=False, severity=severity, description=fit.line,
                            metadata=metadata)


def build_compatibility_check(spec: JobSpec) -> AssetChecksDefinition:
    @asset_check(name=COMPATIBLE, asset=AssetKey(spec.output_asset),
                 description=f"Whether {spec.name}'s query, as it is now, still fits the state in its checkpoint "
                             "(stateops jobs check): Spark's own schema rules and the key columns by name. A change "
                             "it refuses needs `stateops recover run JOB --mode rebuild`.")
    def _check(context: AssetCheckExecutionContext, spark: SparkResource, paths: PathsResource) -> AssetCheckResult:
        from stateops.jobs.runtime.compatibility import check_job

        with redacted_step():
            job = catalog_for(paths.environment()).job(spec.name)  # resolved: a run's environment
            fit = check_job(spark.spark_session, job, paths.layout)
        context.log.info(fit.line)
        return compatibility_result(fit)

    return _check
