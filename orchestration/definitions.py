"""The Dagster code location (workspace.yaml): one folder per capability, each exporting its `defs`, merged here
with the shared resources and executor. The sensors are built here from the jobs they may launch (sensors import
no orchestration module).

    streaming_jobs/  the job assets, their run jobs and schedules
    audits/          deep and fast audit assets, the state checks, audit jobs and schedules
    recovery/        the state_recovery job (the runbook)
    retention/       the retention asset, job and schedule
    sensors          (top-level package) skew, growth, health and run-failure sensors

The in-process executor runs a run's assets one after the other in one process, so a run starts at most one
JVM (a step per process would start one per asset).
"""
from __future__ import annotations

from dagster import Definitions, in_process_executor

from stateops.dagster import audits, recovery, retention, streaming_jobs
from stateops.dagster.audits.schedules import deep_audit_jobs
from stateops.dagster.recovery.runbook import state_recovery
from stateops.dagster.resources import default_resources
from stateops.dagster.streaming_jobs.schedules import job_runs
from stateops.sensors import definitions as sensors

MODULE_DEFS = [
    streaming_jobs.defs,
    audits.defs,
    recovery.defs,
    retention.defs,
    sensors.build_defs(deep_audit_jobs=deep_audit_jobs, job_runs=job_runs, runbook=state_recovery),
]

defs = Definitions.merge(*MODULE_DEFS, Definitions(resources=default_resources(), executor=in_process_executor))
