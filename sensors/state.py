"""`state_skew_sensor` and `state_growth_sensor`: the state's shape watched from the ops tables and the
checkpoint's file listing, acted on through the recovery runbook under the job's remediation policy."""
from __future__ import annotations

import datetime as _dt
from typing import Callable

from dagster import DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, sensor

from stateops.layout import Layout
from stateops.remediation.tick import growth_decisions, skew_decisions

from stateops.sensors.ticks import Paths, Targets, evaluate

SKEW_DESCRIPTION = (
    "STATE_SKEW on M consecutive deep audits (policy skew_audits) -> by cause: many keys -> the runbook "
    "(repartition or rebuild with more shuffle partitions); one hot key -> alert naming the key (salt it). "
    "Fewer than M, or bytes skew in the fast audit it computes in process: requests the job's deep audit. "
    "Plan mode (default) launches a dry run for a person to confirm from the Launchpad.")
GROWTH_DESCRIPTION = (
    "STATE_GROWTH while the watermark advances, or rows above the job's state_rows_budget -> the runbook "
    "(adjust: a tighter watermark delay, never below watermark_min; or rebuild). UNBOUNDED_DEDUP, "
    "EVICTION_STALLED, CLEANUP_STUCK -> alert with the code fix. Growth in the progress rows: requests the "
    "job's deep audit.")


def build_state_sensor(name: str, description: str, decide: Callable[[Layout, list, _dt.datetime], dict],
                       targets: Targets, jobs: list, interval: int) -> SensorDefinition:
    @sensor(name=name, description=description, jobs=jobs, minimum_interval_seconds=interval,
            default_status=DefaultSensorStatus.STOPPED)
    def _sensor(context: SensorEvaluationContext, paths: Paths):
        return evaluate(context, name, paths, lambda environment, jobs, now: decide(environment.layout, jobs, now),
                        targets)

    return _sensor


def state_sensors(targets: Targets, jobs: list, interval: int) -> list[SensorDefinition]:
    return [build_state_sensor("state_skew_sensor", SKEW_DESCRIPTION, skew_decisions, targets, jobs, interval),
            build_state_sensor("state_growth_sensor", GROWTH_DESCRIPTION, growth_decisions, targets, jobs, interval)]
