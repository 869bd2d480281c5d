"""State audits in Dagster: the deep and fast audit assets (assets), the checks on the job assets (checks), the
audit jobs and hourly schedules (schedules)."""
from __future__ import annotations

from typing import Mapping

from dagster import Definitions
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from stateops.jobs.definition.spec import JobSpec

from stateops.dagster.audits.assets import build_deep_audit_asset, build_fast_audit_asset
from stateops.dagster.audits.checks import build_compatibility_check, build_state_checks
from stateops.dagster.audits.schedules import DEEP_CRON, audit_schedule, build_audit_jobs


def build(specs: Mapping[str, JobSpec], crons: Mapping[str, str] | None = None
          ) -> tuple[Definitions, dict[str, UnresolvedAssetJobDefinition]]:
    """The audits of `specs`, and each job's deep audit job (the sensors launch it); `crons`: when each job's
    deep audit schedule fires (`[audit] deep_audit_cron`; default hourly). The schedule keeps its name
    `<job>_deep_audit_hourly` whatever the cron: the name operators, links and run tags know."""
    crons = crons or {}
    checks = {name: (build_state_checks(spec), build_compatibility_check(spec)) for name, spec in specs.items()}
    jobs = {name: build_audit_jobs(spec, *checks[name]) for name, spec in specs.items()}
    deep = {name: deep for name, (deep, _fast) in jobs.items()}
    return Definitions(
        assets=[make(spec) for spec in specs.values() for make in (build_deep_audit_asset, build_fast_audit_asset)],
        asset_checks=[check for pair in checks.values() for check in pair],
        jobs=[job for pair in jobs.values() for job in pair],
        schedules=[audit_schedule(spec, deep[name], f"{name}_deep_audit_hourly",
                                  crons.get(name, DEEP_CRON))
                   for name, spec in specs.items()]), deep
