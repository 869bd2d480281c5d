"""Where everything lives under STATEOPS_HOME: one place that names every path.

landing/<source>/          JSON event files (the embedded source)
checkpoints/<job>/         the job's stateful query
checkpoints/_deadletter/<job>/  a retired dead-letter query (homes from before one scan; archived at the job's next run)
tables/<table>/            Delta output tables (dead letters: <job>_deadletter)
ops/<job>/                 control files and archives of one job (ops/<job>/archives/<runbook id>/)
ops/<job>/logs/<run>.log   a run's log: Spark's console output (CLI runs) and the full trace of a failure
ops/<job>/audits/<audit>/  an audit's charts (PNG), linked from its Dagster materialization
ops/tables/<table>/        ops Delta tables: progress, audits, findings, actions

The home may be an object-store URL (s3://bucket/stateops: tables, ops tables, archives, retention). The
control records (leases, locks: stateops.control) live in STATEOPS_CONTROL_HOME (default: the home itself):
a local or POSIX path, or S3 (every lock there: the control plane's, retention's, a runbook's journal).

`FOLDERS` is the one table of these folders: the methods below build paths from it and `part_of` reads a path
under the home back into its part and name (what the home move copies, leaves behind and reports).
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from enum import Enum

from stateops.environment import Locations
from stateops.storage import absolute

DEFAULT_HOME = "./.stateops"


class Part(str, Enum):
    """A part of the home (its value is how reports name it)."""

    LANDING = "landing"
    CHECKPOINT = "checkpoint"
    DEADLETTER_CHECKPOINT = "dead-letter checkpoint"
    TABLE = "table"
    OPS_TABLE = "ops table"
    ARCHIVES = "archives"
    CONTROL = "control"
    OPS = "ops"
    MOVES = "moves"
    RETENTION_LOCKS = "retention locks"
    DAGSTER = "dagster"
    MOVED_MARK = "moved mark"
    OTHER = "other"


# Each part's folder (or file) relative to the home, `{}` standing for its name (a job, a table, a source, a move
# id), the most specific first: the order in which `part_of` tries them.
FOLDERS: tuple[tuple[Part, str], ...] = (
    (Part.DAGSTER, "dagster"),
    (Part.MOVED_MARK, "MOVED.json"),
    (Part.LANDING, "landing/{}"),
    (Part.DEADLETTER_CHECKPOINT, "checkpoints/_deadletter/{}"),
    (Part.CHECKPOINT, "checkpoints/{}"),
    (Part.TABLE, "tables/{}"),
    (Part.OPS_TABLE, "ops/tables/{}"),
    (Part.RETENTION_LOCKS, "ops/_retention/locks"),
    (Part.MOVES, "ops/_move/{}"),
    (Part.CONTROL, "ops/{}/control"),
    (Part.ARCHIVES, "ops/{}/archives"),
    (Part.OPS, "ops/{}"),
)
_TEMPLATES = dict(FOLDERS)
FILES = (Part.MOVED_MARK,)  # parts that are one file, not a folder


def relative(part: Part, name: str = "") -> str:
    """The folder (or file) of `part` named `name`, relative to the home."""
    return _TEMPLATES[part].format(name)


def part_of(rel: str) -> tuple[Part, str]:
    """(part, name) of a path relative to the home: a file inside one of FOLDERS (or that file itself, for a
    file part); (OTHER, its first folder) for anything else."""
    segments = rel.strip("/").split("/")
    for part, template in FOLDERS:
        pattern = template.split("/")
        inside = len(segments) == len(pattern) if part in FILES else len(segments) > len(pattern)
        if inside and all(want in ("{}", got) for want, got in zip(pattern, segments)):
            return part, next((got for want, got in zip(pattern, segments) if want == "{}"), "")
    return Part.OTHER, segments[0]


def _join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


def _absolute(path: str) -> str:
    return absolute(path)


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

    def folder(self, part: Part, name: str = "") -> str:
        """The folder (or file) of `part` named `name` under the home."""
        return _join(self.home, relative(part, name))

    def landing(self, source: str) -> str:
        return self.folder(Part.LANDING, source)

    def checkpoint(self, job: str) -> str:
        return self.folder(Part.CHECKPOINT, job)

    def deadletter_checkpoint(self, job: str) -> str:
        return self.folder(Part.DEADLETTER_CHECKPOINT, job)

    def table(self, name: str) -> str:
        return self.folder(Part.TABLE, name)

    def deadletter_table(self, job: str) -> str:
        return self.table(f"{job}_deadletter")

    def ops_dir(self, job: str) -> str:
        return self.folder(Part.OPS, job)

    def control_dir(self, job: str) -> str:
        """The job's control records (lease, stop request, maintenance lock, overrides) on this home."""
        return self.folder(Part.CONTROL, job)

    def move_dir(self, move_id: str) -> str:
        """A home move's own folder (journal, lock) in the home it moves to."""
        return self.folder(Part.MOVES, move_id)

    def state_meaning(self, job: str) -> str:
        """What the job's state means as its last run planned it, per stateful operator: the key columns of its
        stream-stream joins (Spark's join state names them field0, field1, ...) and what produced each stored value
        (Spark compares value schemas by position and type only); stateops.jobs.runtime.compatibility compares them."""
        return _join(self.ops_dir(job), "state_meaning.json")

    def legacy_join_keys(self, job: str) -> str:
        """Where runs before the state meaning kept the join keys alone (read when `state_meaning` is absent)."""
        return _join(self.ops_dir(job), "join_keys.json")

    def archives(self, job: str) -> str:
        return self.folder(Part.ARCHIVES, job)

    def run_log(self, job: str, run_id: str) -> str:
        return _join(self.ops_dir(job), "logs", f"{run_id}.log")

    def audit_charts(self, job: str, audit_id: str) -> str:
        return _join(self.ops_dir(job), "audits", audit_id)

    def ops_table(self, name: str) -> str:
        return self.folder(Part.OPS_TABLE, name)

