"""Audit jobs per streaming job, and the deep audit's schedule (stopped until an operator turns it on):

    <job>_deep_audit  the deep audit asset, then the job asset's state checks   hourly, and on escalation (Spark)
    <job>_fast_audit  the fast audit asset                                     on demand (no JVM)

The fast audit has no schedule: the sensors (sensors/) compute it in process on every tick, which costs
milliseconds, where a run every 5 minutes per job cost a process each; they request the deep audit run
when the cheap numbers look wrong.

A tick is skipped, without launching a run, while the job has no committed batch yet (a file listing,
no JVM), while a runbook holds the job's maintenance lock (it may be moving the checkpoint), or while the
previous run of the same audit job is still active. A running job is audited: the audits read committed
batches only and never touch the running query, which is how long-running jobs get audited.
"""


from dagster import (AssetChecksDefinition, AssetSelection, DefaultScheduleStatus, RunRequest, ScheduleDefinition,
                     ScheduleEvaluationContext, SkipReason, schedule)

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.definition.targets import resolve_target
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import MaintenanceLockedError, maintenance
from stateops.errors import StateOpsError, first_line
from stateops.jobs.definition.environment import Environment

from stateops.dagster.asset_jobs import scoped_asset_job
from stateops.dagster.catalog import catalog_for
from stateops.dagster.audits.assets import deep_audit_key, fast_audit_key
from stateops.dagster.resources import PathsResource
from stateops.sensors.runs import still_running

DEEP_CRON = "0 * * * *"


def not_ready(spec: JobSpec, environment: Environment) -> str | None:
    """Why the job cannot be audited now (maintenance lock, no checkpoint, no committed batch), or None."""
    try:
        lock = maintenance.current(environment.layout, spec.name)
        if lock is not None:
            return str(MaintenanceLockedError(lock))
        checkpoint, _job = resolve_target(spec.name, catalog_for(environment))
        if not Checkpoint.open(checkpoint).committed_batches():
            return f"job {spec.name} has no committed batch yet at {checkpoint}; run it first"
    except StateOpsError as err:
        return first_line(err)
    return None


def audit_schedule(spec: JobSpec, job, name: str, cron: str) -> ScheduleDefinition:
    """`job` is an asset job from define_asset_job."""
    @schedule(name=name, cron_schedule=cron, job=job, execution_timezone="UTC",
              default_status=DefaultScheduleStatus.STOPPED)
    def _tick(context: ScheduleEvaluationContext, paths: PathsResource):
        try:
            reason = not_ready(spec, paths.environment())
        except StateOpsError as err:  # e.g. a malformed variable of the environment
            reason = first_line(err)
        if reason:
            return SkipReason(reason)
        running = still_running(context.instance, job.name)
        return SkipReason(running) if running else RunRequest()

    return _tick


def build_audit_jobs(spec: JobSpec, checks: AssetChecksDefinition, compatible: AssetChecksDefinition) -> tuple:
    """(deep, fast) audit jobs of `spec`; `checks`: its state checks, `compatible`: its state_compatible check
    (stateops.dagster.audits.checks)."""
    deep = scoped_asset_job(
        f"{spec.name}_deep_audit",
        AssetSelection.assets(deep_audit_key(spec)) | AssetSelection.checks(checks, compatible),
        description=f"Deep state audit of {spec.name} (Spark), then the skew/growth/eviction checks and whether "
                    "the query still fits its state.")
    fast = scoped_asset_job(f"{spec.name}_fast_audit", AssetSelection.assets(fast_audit_key(spec)),
                            description=f"Fast state audit of {spec.name} (no JVM), on demand: the sensors compute "
                                        "it in process on every tick.")
    return deep, fast

