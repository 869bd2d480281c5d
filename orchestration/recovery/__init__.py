"""The recovery runbook in Dagster: the `state_recovery` job (runbook)."""
from __future__ import annotations

from stateops.dagster.recovery.runbook import build_state_recovery

__all__ = ["build_state_recovery"]
