"""The sensors of the code location, built from the Dagster jobs they may launch, which
orchestration/definitions.py hands in (sensors never import orchestration). All start stopped: switch them on in
Automation. STATEOPS_SENSOR_INTERVAL_SECONDS (default 60) sets how often they tick."""
from __future__ import annotations

from typing import Any, Mapping

from dagster import Definitions

from stateops.environment import numbers

from stateops.sensors.health import build_health_sensor, run_failure_alert
from stateops.sensors.state import state_sensors
from stateops.sensors.ticks import Targets

INTERVAL_ENV = "STATEOPS_SENSOR_INTERVAL_SECONDS"


def interval_seconds() -> int:
    return int(numbers({"interval": INTERVAL_ENV}, integers=("interval",), minimum={"interval": 1}).get("interval", 60))


def build_defs(*, deep_audit_jobs: Mapping[str, Any], job_runs: Mapping[str, Any], runbook: Any) -> Definitions:
    """The four sensors. `deep_audit_jobs` / `job_runs`: StateOps job -> its deep audit job / its own run job;
    `runbook`: the state_recovery job. Each tick reads the config file (and so the remediation policies) as
    it is then: a policy edited in the config file applies from the next tick (stateops.jobs.definition.catalog.reusing_unchanged:
    validated again only when it changed)."""
    targets = Targets(deep_audit=lambda job: deep_audit_jobs[job].name, job_run=lambda job: job_runs[job].name,
                      runbook=runbook)
    interval = interval_seconds()
    return Definitions(sensors=[
        *state_sensors(targets, [*deep_audit_jobs.values(), runbook], interval),
        build_health_sensor(targets, [*job_runs.values(), runbook], interval),
        run_failure_alert,
    ])
