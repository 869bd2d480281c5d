"""The Dagster code location (workspace.yaml): every module's `defs`, plus shared resources and executor.

Add a module with one line in MODULE_DEFS. The in-process executor runs a run's assets one after the
other in one process, so a run starts at most one JVM (a step per process would start one per asset).
"""
from __future__ import annotations

from dagster import Definitions, in_process_executor

from orchestration import assets, audits, recovery, retention, schedules
from orchestration.resources import default_resources
from sensors import definitions as sensors

MODULE_DEFS = [
    assets.defs,
    schedules.defs,
    audits.defs,
    recovery.defs,
    retention.defs,
    sensors.defs,
]

defs = Definitions.merge(*MODULE_DEFS, Definitions(resources=default_resources(), executor=in_process_executor))
