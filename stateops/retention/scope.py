"""What retention looks after, as data: the home, each configured job's paths, the roots guard, the policies
and Spark's own minimum history. The jobs layer builds it from the job catalog and the config file
(stateops.jobs.runtime.retention.retention_scope); the core never imports the catalog."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Mapping

from stateops.layout import Layout
from stateops.retention.policy import Policies
from stateops.roots import Roots

ORPHANS = "_orphans"  # ops/_orphans/archives/<id>/: archives of checkpoints no configured job owns


@dataclass(frozen=True)
class JobArea:
    job: str
    checkpoint: str
    deadletter_checkpoint: str
    archive_root: str
    sink_table: str
    deadletter_table: str


@dataclass(frozen=True)
class Scope:
    layout: Layout
    jobs: Mapping[str, JobArea]
    roots: Roots
    policies: Policies
    min_batches_to_retain: int = 100  # spark.sql.streaming.minBatchesToRetain of the jobs' sessions

    @property
    def orphan_archive_root(self) -> str:
        return posixpath.join(self.layout.home.rstrip("/"), "ops", ORPHANS, "archives")

    def roots_to_lock(self) -> tuple[str, ...]:
        """Every root a retention run may change: the home and any checkpoint root outside it."""
        return tuple(self.roots.roots)
