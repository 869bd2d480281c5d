"""Retention in Dagster: the `retention` asset, `retention_job` and the `retention_daily` schedule (asset)."""
from __future__ import annotations

from stateops.dagster.retention.asset import build

__all__ = ["build"]
