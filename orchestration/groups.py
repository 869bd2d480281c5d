"""Where a job's assets appear in the Dagster UI: its asset group. The config file's `group` and `owners` are
checked as Dagster accepts them when the catalog loads (stateops.jobs.definition.spec); how they name a group is Dagster's business."""
from __future__ import annotations

import re

from stateops.jobs.definition.spec import JobSpec

DEFAULT_GROUP = "streaming_jobs"


def asset_group(spec: JobSpec) -> str:
    """The Dagster asset group of the job: `group` when set, else the name of its first team owner
    ("team:data-platform" -> data_platform), else streaming_jobs. A thousand jobs in one group are a list
    nobody reads; grouped by team, a person finds their team's jobs. Jobs without either (the built-ins)
    stay in streaming_jobs."""
    if spec.group:
        return spec.group
    team = next((o[len("team:"):] for o in spec.owners if o.startswith("team:")), None)
    return re.sub(r"[^A-Za-z0-9_]", "_", team)[:63] if team else DEFAULT_GROUP
