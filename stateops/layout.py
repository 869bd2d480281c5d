"""Where everything lives under STATEOPS_HOME: one place that names every path.

landing/<source>/          JSON event files (the embedded source)
checkpoints/<job>/         the job's stateful query
checkpoints/_deadletter/<job>/  the job's dead-letter query
tables/<table>/            Delta output tables (dead letters: <job>_deadletter)
ops/<job>/                 control files and archives of one job (ops/<job>/archives/<runbook id>/)
ops/<job>/logs/<run>.log   a run's log: Spark's console output (CLI runs) and the full trace of a failure
ops/tables/<table>/        ops Delta tables: progress, audits, findings, actions
"""
from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

DEFAULT_HOME = "./.stateops"


def _join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


@dataclass(frozen=True)
class Layout:
    home: str

    @classmethod
    def from_env(cls) -> "Layout":
        home = os.environ.get("STATEOPS_HOME", DEFAULT_HOME)
        if "://" not in home:
            home = os.path.abspath(home)
        return cls(home)

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

    def archives(self, job: str) -> str:
        return _join(self.ops_dir(job), "archives")

    def run_log(self, job: str, run_id: str) -> str:
        return _join(self.ops_dir(job), "logs", f"{run_id}.log")

    def ops_table(self, name: str) -> str:
        return _join(self.home, "ops", "tables", name)

