"""The repository's own Dagster code location (workspace.yaml): `build_defs()` for $STATEOPS_CONFIG and
$STATEOPS_HOME (stateops.dagster.factory), one folder per capability:

    streaming_jobs/  the job assets, their run jobs and schedules
    audits/          deep and fast audit assets, the state checks, audit jobs and schedules
    recovery/        the state_recovery job (the runbook)
    retention/       the retention asset, job and schedule
    sensors          (stateops.sensors) skew, growth, health and run-failure sensors

The in-process executor is the default here too, so that a materialization of several assets from the UI runs
them one after the other in one process: at most one JVM per run (a step per process would start one per asset).
"""
from __future__ import annotations

from dagster import Definitions, in_process_executor

from stateops.dagster.factory import build_defs

defs = Definitions.merge(build_defs(), Definitions(executor=in_process_executor))
