"""The optional parts of StateOps, each an extra of the package (pyproject.toml), and the one refusal a feature gives
when its extra is not installed: one line naming the extra to install.

The plain install is what `build_defs`, the CLI and the embedded default (local Spark, local files, delta-rs, a
SQLite Dagster instance) need; `bash scripts/setup` installs every extra.
"""
from __future__ import annotations

import importlib.util

from stateops.errors import StateOpsError

# extra -> (the module it brings, what it is for)
EXTRAS = {
    "kafka": ("confluent_kafka", "Kafka jobs (the brokers asked for offsets by the runbook, explain-key and the demo)"),
    "s3": ("s3fs", "a home or paths on S3"),
    "postgres": ("dagster_postgres", "a Dagster instance on PostgreSQL"),
    "ui": ("dagster_webserver", "the Dagster UI (dagster dev)"),
    "dg": ("dagster_dg_cli", "the `dg` command line in a dg project"),
    "charts": ("matplotlib", "the audits' and retention's charts"),
}


class MissingExtra(StateOpsError):
    """A feature was used without its extra installed: nothing was done (exit code 2)."""

    def __init__(self, extra: str, what: str):
        self.extra = extra
        super().__init__(f"{what}: StateOps' {extra} extra is not installed. Fix: pip install 'stateops[{extra}]'")


def installed(extra: str) -> bool:
    return importlib.util.find_spec(EXTRAS[extra][0]) is not None


def require(extra: str, what: str) -> None:
    """Refuse `what` in one line unless `extra` is installed."""
    if not installed(extra):
        raise MissingExtra(extra, what)
