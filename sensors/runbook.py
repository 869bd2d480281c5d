"""The recovery runbook's Dagster job (issue 8) as a launch target: its name, and the run config that carries
a remediation's request (stateops.remediation.model.runbook_config) to each op that takes it."""
from __future__ import annotations

from typing import Any, Mapping

RUNBOOK_JOB = "state_recovery"
REQUEST_FIELDS = {"job", "mode", "dry_run"}  # an op whose config has these takes the runbook request


def request_ops(job_def) -> list[str]:
    """Names of the job's ops whose config is the runbook request."""
    names = []
    for node in job_def.graph.nodes:
        schema = node.definition.config_schema
        fields = getattr(schema.config_type, "fields", {}) if schema is not None and schema.config_type else {}
        if REQUEST_FIELDS <= set(fields):
            names.append(node.name)
    if not names:
        raise ValueError(f"job {job_def.name} has no op configured with {sorted(REQUEST_FIELDS)}")
    return names


def runbook_run_config(job_def, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run config for `job_def` with `request` (unset fields left to their defaults, as the Launchpad shows)."""
    config = {k: v for k, v in request.items() if v is not None}
    return {"ops": {name: {"config": dict(config)} for name in request_ops(job_def)}}
