"""The Dagster code location (workspace.yaml): every module's `defs`, plus shared resources and executor.
The sensors are built here from the jobs they may launch (sensors import no orchestration module).

Add a module with one line in MODULE_DEFS. The in-process executor runs a run's assets one after the
other in one process, so a run starts at most one JVM (a step per process would start one per asset).
"""
from __future__ import annotations

import os

from dagster import Definitions, in_process_executor

from orchestration import assets, audits, recovery, retention, schedules
from orchestration.audit_schedules import deep_audit_jobs
from orchestration.resources import default_resources
from sensors import definitions as sensors

MODULE_DEFS = [
    assets.defs,
    schedules.defs,
    audits.defs,
    recovery.defs,
    retention.defs,
    sensors.build_defs(deep_audit_jobs=deep_audit_jobs, job_runs=schedules.job_runs, runbook=recovery.state_recovery,
                       config_path=os.environ.get("STATEOPS_CONFIG")),
]

defs = Definitions.merge(*MODULE_DEFS, Definitions(resources=default_resources(), executor=in_process_executor))
