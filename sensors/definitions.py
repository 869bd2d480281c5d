"""The sensors of the code location, built from the Dagster jobs they may launch, which
orchestration/definitions.py hands in (sensors never import orchestration). All start stopped: switch them on in
Automation. STATEOPS_SENSOR_INTERVAL_SECONDS (default 60) sets how often they tick."""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from dagster import Definitions

from jobs.catalog import load_config
from stateops.errors import ConfigError
from stateops.remediation.policy import Policy

from sensors.health import build_health_sensor, run_failure_alert
from sensors.state import state_sensors
from sensors.ticks import Targets

INTERVAL_ENV = "STATEOPS_SENSOR_INTERVAL_SECONDS"


def interval_seconds() -> int:
    raw = os.environ.get(INTERVAL_ENV, "").strip() or "60"
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(INTERVAL_ENV, f"{raw!r} is not a whole number of seconds above 0", "use e.g. 60")
    return int(raw)


def validate_policies(jobs: Iterable[str], config_path: str | None) -> None:
    """Every job's remediation policy, checked when the code location loads (a ConfigError names the field)."""
    config = load_config(config_path)
    for name in jobs:
        Policy.from_config(config, name)


def build_defs(*, deep_audit_jobs: Mapping[str, Any], job_runs: Mapping[str, Any], runbook: Any,
               config_path: str | None) -> Definitions:
    """The four sensors. `deep_audit_jobs` / `job_runs`: StateOps job -> its deep audit job / its own run job;
    `runbook`: the state_recovery job."""
    validate_policies(job_runs, config_path)
    targets = Targets(deep_audit=lambda job: deep_audit_jobs[job].name, job_run=lambda job: job_runs[job].name,
                      runbook=runbook)
    interval = interval_seconds()
    return Definitions(sensors=[
        *state_sensors(targets, [*deep_audit_jobs.values(), runbook], interval),
        build_health_sensor(targets, [*job_runs.values(), runbook], interval),
        run_failure_alert,
    ])
