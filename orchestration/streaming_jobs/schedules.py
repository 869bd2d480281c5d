"""A schedule per job: a bounded run every 15 minutes (stopped until an operator turns it on).

Two runs of one job at once would share one checkpoint, so a tick is skipped while the job's previous
run is still queued or running, while any run (CLI, another orchestrator, a runbook) holds the job's
lease, and while a runbook holds its maintenance lock; the skip reason names the holder or the runbook.
"""
from __future__ import annotations

from dagster import (AssetSelection, DefaultScheduleStatus, RunRequest, ScheduleDefinition,
                     ScheduleEvaluationContext, SkipReason, schedule)

from stateops.jobs.definition.spec import JobSpec
from stateops.control import start_blocker
from stateops.errors import StateOpsError

from stateops.dagster.asset_jobs import scoped_asset_job
from stateops.dagster.resources import PathsResource
from stateops.sensors.runs import still_running

CRON = "*/15 * * * *"


def build_job_run(spec: JobSpec):
    """The Dagster job that materializes the one asset of `spec` (schedules and restarts launch it)."""
    return scoped_asset_job(f"{spec.name}_job", AssetSelection.assets(spec.output_asset).without_checks(),
                            description=f"One bounded run of {spec.name}.")


def build_job_schedule(spec: JobSpec, job) -> ScheduleDefinition:
    """The 15-minute schedule of `job` (from build_job_run)."""

    @schedule(name=f"{spec.name}_every_15_minutes", cron_schedule=CRON, job=job, execution_timezone="UTC",
              default_status=DefaultScheduleStatus.STOPPED)
    def _tick(context: ScheduleEvaluationContext, paths: PathsResource):
        running = still_running(context.instance, job.name)
        if running:
            return SkipReason(running)
        try:
            environment = paths.environment()
            blocker = start_blocker(environment.layout, spec.name, settings=environment.settings.control)
        except StateOpsError as err:  # e.g. STATEOPS_HOME on a storage the control plane refuses
            blocker = err
        return SkipReason(str(blocker)) if blocker is not None else RunRequest()

    return _tick

