"""The streaming jobs in Dagster: one asset per job (assets) and its run job and 15-minute schedule (schedules)."""
from __future__ import annotations

from typing import Mapping

from dagster import Definitions
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from stateops.jobs.definition.spec import JobSpec

from stateops.dagster.streaming_jobs.assets import build_job_asset
from stateops.dagster.streaming_jobs.schedules import build_job_run, build_job_schedule


def build(specs: Mapping[str, JobSpec]) -> tuple[Definitions, dict[str, UnresolvedAssetJobDefinition]]:
    """The assets and schedules of `specs`, and each job's own run job (`<job>_job`: schedules and restarts).
    Every job a schedule or sensor launches is listed in the definitions too: a dg project's loader copies the
    jobs of schedules and sensors that are not, once per schedule and sensor, and two copies of one name clash."""
    runs = {name: build_job_run(spec) for name, spec in specs.items()}
    return Definitions(assets=[build_job_asset(spec) for spec in specs.values()], jobs=list(runs.values()),
                       schedules=[build_job_schedule(spec, runs[name]) for name, spec in specs.items()]), runs
