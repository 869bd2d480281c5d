"""The sensors of the code location (orchestration.definitions merges `defs`). All start stopped: switch them
on in Automation. STATEOPS_SENSOR_INTERVAL_SECONDS (default 60) sets how often they tick."""
from __future__ import annotations

import os

from dagster import Definitions

from jobs.catalog import load_config
from stateops.errors import ConfigError
from stateops.remediation.policy import Policy

from orchestration.assets import SPECS
from orchestration.audit_schedules import deep_audit_jobs
from orchestration.recovery import state_recovery
from orchestration.schedules import job_runs
from sensors.health import build_health_sensor, run_failure_alert
from sensors.state import state_sensors
from sensors.ticks import Targets

INTERVAL_ENV = "STATEOPS_SENSOR_INTERVAL_SECONDS"


def interval_seconds() -> int:
    raw = os.environ.get(INTERVAL_ENV, "").strip() or "60"
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(INTERVAL_ENV, f"{raw!r} is not a whole number of seconds above 0", "use e.g. 60")
    return int(raw)


def validate_policies() -> None:
    """Every job's remediation policy, checked when the code location loads (a ConfigError names the field)."""
    config = load_config(os.environ.get("STATEOPS_CONFIG"))
    for name in SPECS:
        Policy.from_config(config, name)


validate_policies()
TARGETS = Targets(deep_audit=lambda job: deep_audit_jobs[job].name, job_run=lambda job: job_runs[job].name,
                  runbook=state_recovery)
INTERVAL = interval_seconds()

defs = Definitions(sensors=[
    *state_sensors(TARGETS, [*deep_audit_jobs.values(), state_recovery], INTERVAL),
    build_health_sensor(TARGETS, [*job_runs.values(), state_recovery], INTERVAL),
    run_failure_alert,
])
