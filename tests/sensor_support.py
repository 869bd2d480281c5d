"""Sensor tests' harness: the code location's sensors evaluated with Dagster's sensor context on a real
instance, and the runs they request executed in process the way the daemon would launch them.

`state_recovery` here is a stand-in with the runbook job's Config as issue 8 specifies it (job, mode,
watermark_delay, shuffle_partitions, to_batch, archive_id, reason, confirm, dry_run default true): it records
the request it got. The real job replaces it once it is in the code location.
"""
# No `from __future__ import annotations`: Dagster reads the op's config annotation as a type.

from typing import Literal, Optional

from dagster import (Config, Definitions, OpExecutionContext, RunRequest, SensorResult, build_sensor_context,
                     in_process_executor, job, op)

from orchestration import assets, audits, schedules
from orchestration.audit_schedules import deep_audit_jobs
from orchestration.resources import default_resources
from orchestration.schedules import job_runs
from sensors.definitions import TARGETS
from sensors.health import build_health_sensor, run_failure_alert
from sensors.state import state_sensors
from sensors.ticks import Targets


class RunbookConfig(Config):
    job: str
    mode: Literal["adjust", "repartition", "rebuild", "rewind", "restore"]
    watermark_delay: Optional[str] = None
    shuffle_partitions: Optional[int] = None
    to_batch: Optional[int] = None
    archive_id: Optional[str] = None
    reason: str = ""
    confirm: Optional[str] = None
    dry_run: bool = True


@op
def runbook(context: OpExecutionContext, config: RunbookConfig) -> dict:
    context.add_output_metadata({"request": config.model_dump()})
    return config.model_dump()


@job(name="state_recovery")
def stand_in_runbook():
    runbook()


def definitions() -> Definitions:
    """The code location's assets and jobs, its sensors aimed at the stand-in runbook, resources built now."""
    targets = Targets(deep_audit=TARGETS.deep_audit, job_run=TARGETS.job_run, runbook=stand_in_runbook)
    sensors = [*state_sensors(targets, [*deep_audit_jobs.values(), stand_in_runbook], 30),
               build_health_sensor(targets, [*job_runs.values(), stand_in_runbook], 30), run_failure_alert]
    return Definitions.merge(assets.defs, audits.defs, schedules.defs, Definitions(
        jobs=[stand_in_runbook], sensors=sensors, resources=default_resources(), executor=in_process_executor))


class Harness:
    def __init__(self, instance):
        self.instance = instance
        self.repo = definitions().get_repository_def()

    def tick(self, sensor: str, cursor: str | None = None) -> SensorResult:
        with build_sensor_context(instance=self.instance, cursor=cursor, resources=default_resources(),
                                  repository_def=self.repo, sensor_name=sensor) as context:
            return self.repo.get_sensor_def(sensor)(context)

    def launch(self, request: RunRequest):
        """Run a requested run to its end, as the daemon's launcher would (same job, config and tags)."""
        result = self.repo.get_job(request.job_name).execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=self.instance, raise_on_error=False)
        return result
