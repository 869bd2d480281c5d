"""The recovery runbook in Dagster: the `state_recovery` job (runbook)."""
from __future__ import annotations

from stateops.dagster.recovery.runbook import defs

__all__ = ["defs"]
