"""Where everything lives under STATEOPS_HOME: one place that names every path.

landing/<source>/          JSON event files (the embedded source)
checkpoints/<job>/         the job's stateful query
checkpoints/_deadletter/<job>/  the job's dead-letter query
tables/<table>/            Delta output tables (dead letters: <job>_deadletter)
ops/<job>/                 control files and archives of one job (ops/<job>/archives/<runbook id>/)
ops/<job>/logs/<run>.log   a run's log: Spark's console output (CLI runs) and the full trace of a failure
ops/<job>/audits/<audit>/  an audit's charts (PNG), linked from its Dagster materialization
ops/tables/<table>/        ops Delta tables: progress, audits, findings, actions

The home may be an object-store URL (s3://bucket/stateops: tables, ops tables, archives, retention). The
control records (leases, locks: stateops.control) live in STATEOPS_CONTROL_HOME (default: the home itself):
a local or POSIX path, or S3; retention's locks need a local or POSIX one.
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from stateops.environment import Locations

DEFAULT_HOME = "./.stateops"


def _join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


@dataclass(frozen=True)
class Layout:
    home: str
    control: str | None = None  # where control records and locks live; None: the home

    @classmethod
    def from_env(cls) -> "Layout":
        """STATEOPS_HOME (default ./.stateops) and STATEOPS_CONTROL_HOME (stateops.environment)."""
        found = Locations.read()
        return cls.of(found.home, found.control_home)

    @classmethod
    def of(cls, home: str | None, control: str | None = None) -> "Layout":
        """A layout for `home` (default ./.stateops), absolute, with its control home (default: the home)."""
        return cls(_absolute(home or DEFAULT_HOME), _absolute(control) if control else None)

    @property
    def control_home(self) -> str:
        return self.control or self.home

    def landing(self, source: str) -> str:
        return _join(self.home, "landing", source)

    def checkpoint(self, job: str) -> str:
        return _join(self.home, "checkpoints", job)

    def deadletter_checkpoint(self, job: str) -> str:
        return _join(self.home, "checkpoints", "_deadletter", job)

    def table(self, name: str) -> str:
        return _join(self.home, "tables", name)

    def deadletter_table(self, job: str) -> str:
        return self.table(f"{job}_deadletter")

    def ops_dir(self, job: str) -> str:
        return _join(self.home, "ops", job)

    def join_keys(self, job: str) -> str:
        """The key columns of the job's stream-stream joins as its last run planned them (Spark's join state
        names them field0, field1, ...; stateops.jobs.runtime.compatibility compares them)."""
        return _join(self.ops_dir(job), "join_keys.json")

    def archives(self, job: str) -> str:
        return _join(self.ops_dir(job), "archives")

    def run_log(self, job: str, run_id: str) -> str:
        return _join(self.ops_dir(job), "logs", f"{run_id}.log")

    def audit_charts(self, job: str, audit_id: str) -> str:
        return _join(self.ops_dir(job), "audits", audit_id)

    def ops_table(self, name: str) -> str:
        return _join(self.home, "ops", "tables", name)

