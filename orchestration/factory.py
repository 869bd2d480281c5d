"""`build_defs`: StateOps' Dagster definitions for one config file and home, as a user's own Dagster project adds
them (docs/dagster-project.md): every job asset, audit asset and check, the `<job>_job` and audit jobs, the
runbook (`state_recovery`) and retention jobs, their schedules and the four sensors, with the `spark` and `paths`
resources they ask for.

The arguments are fixed in the definitions (the `paths` resource), so that the runs and sensor ticks of the
user's code location read that config file and write under that home whatever their process environment says;
without them, `STATEOPS_CONFIG` and `STATEOPS_HOME` are read when the definitions are built (the catalog) and
again by each run and tick. Every StateOps job says its executor (in process: one JVM per run), so the result
sets no default executor and merges with definitions that do. A clash with the user's definitions is Dagster's
refusal when they are merged or loaded, one line naming what both define (a resource key, an asset key, a job,
schedule or sensor name).
"""
from __future__ import annotations

import os
from typing import Iterable

from dagster import Definitions

from stateops.dagster import audits, retention, streaming_jobs
from stateops.dagster.catalog import load_catalog, load_specs
from stateops.dagster.recovery import build_state_recovery
from stateops.dagster.resources import default_resources
from stateops.sensors import definitions as sensors
from stateops.storage import absolute


def build_defs(config_path: str | None = None, home: str | None = None,
               jobs: Iterable[str] | None = None) -> Definitions:
    """StateOps' definitions for the jobs of `config_path` (else $STATEOPS_CONFIG; none: the built-in jobs)
    under `home` (else $STATEOPS_HOME, default ./.stateops); `jobs`: only these of them (default all). A config
    error is refused here, in one line naming the field and the fix (stateops.errors.ConfigError)."""
    config_path = os.path.abspath(config_path) if config_path else None
    home = absolute(home) if home else home
    catalog = load_catalog(config_path, home)
    specs = load_specs(jobs=None if jobs is None else list(jobs), catalog=catalog)
    runs_defs, job_runs = streaming_jobs.build(specs)
    audit_defs, deep_audit_jobs = audits.build(specs, {name: catalog.thresholds(name).deep_audit_cron for name in specs})
    runbook = build_state_recovery(specs)
    return Definitions.merge(
        runs_defs, audit_defs, Definitions(jobs=[runbook]), retention.build(catalog.retention.cron),
        sensors.build_defs(deep_audit_jobs=deep_audit_jobs, job_runs=job_runs, runbook=runbook),
        Definitions(resources=default_resources(home, config_path)))
