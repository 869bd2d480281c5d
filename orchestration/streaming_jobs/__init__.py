"""The streaming jobs in Dagster: one asset per job (assets) and its run job and 15-minute schedule (schedules)."""
from __future__ import annotations

from dagster import Definitions

from stateops.dagster.streaming_jobs import assets, schedules

defs = Definitions.merge(assets.defs, schedules.defs)
