"""State audits in Dagster: the deep and fast audit assets (assets), the checks on the job assets (checks), the
audit jobs and hourly schedules (schedules)."""
from __future__ import annotations

from dagster import Definitions

from stateops.dagster.audits import assets, checks, schedules

defs = Definitions.merge(assets.defs, checks.defs, schedules.defs)
