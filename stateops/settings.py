"""Every typed setting the core reads from the process environment, in one object an entry point builds once
(a CLI command, the code location's load, a Dagster run, a sensor tick: stateops.jobs.definition.environment.read_settings)
and passes down.

The core takes the piece it needs as a required argument (`settings.control` to the control plane,
`settings.recovery` to the runbook...): a call path that forgot to pass settings fails at once instead of
reading the environment again on its own, so every part of one invocation sees the same values. Each class
still parses and checks its own variables (`from_env`, errors naming the variable and the fix); only the entry
points and the environment's module call them (tests/unit/test_import_graph.py): nothing in this package does.
"""
from __future__ import annotations

from dataclasses import dataclass

from stateops.control.settings import ControlSettings
from stateops.progress import FlushSettings
from stateops.recovery.settings import RecoverySettings
from stateops.remediation.alerts import WebhookSettings


@dataclass(frozen=True)
class Settings:
    control: ControlSettings = ControlSettings()
    recovery: RecoverySettings = RecoverySettings()
    flush: FlushSettings = FlushSettings()
    webhook: WebhookSettings | None = None
