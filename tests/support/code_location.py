"""The repository's code location as the tests take it apart: its jobs (the catalog of $STATEOPS_CONFIG under
$STATEOPS_HOME, as stateops.dagster.definitions builds it) and its pieces, made by the builders build_defs uses."""
from __future__ import annotations

from stateops.dagster.audits.assets import build_deep_audit_asset
from stateops.dagster.catalog import load_specs
from stateops.dagster.recovery import build_state_recovery
from stateops.dagster.streaming_jobs.assets import build_job_asset

SPECS = load_specs()
job_assets = [build_job_asset(spec) for spec in SPECS.values()]
deep_audit_assets = {name: build_deep_audit_asset(spec) for name, spec in SPECS.items()}
state_recovery = build_state_recovery(SPECS)
