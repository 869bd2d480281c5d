"""How a StateOps error ends a Dagster step: its first line as the failure, no retry (a retry would meet the same
configuration, lease or lock)."""
from __future__ import annotations

from dagster import Failure

from stateops.errors import StateOpsError, first_line


def one_line_failure(err: StateOpsError) -> Failure:
    return Failure(description=first_line(err), allow_retries=False)
