"""State audits in Dagster: audit assets (audit_assets), checks on the job assets (audit_checks), audit jobs and
schedules (audit_schedules). definitions.py registers `defs` with one line."""
from __future__ import annotations

from dagster import Definitions

from orchestration import audit_assets, audit_checks, audit_schedules

defs = Definitions.merge(audit_assets.defs, audit_checks.defs, audit_schedules.defs)
