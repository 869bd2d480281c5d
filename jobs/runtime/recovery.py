"""The runbook's Spark side: a job's target for the core (stateops.recovery), and the Runtime it calls back:
deep audits (state reader), the offline repartition, restarts (bounded in this process, long-running in
a process of its own, as the query ran before).

    target = job_target(spec, catalog)
    report = recover(environment, request, on_event=..., terminate=..., launcher=...)

An orchestrator passes `terminate(lease) -> bool` (end the run holding the lease by force, e.g. through
the Dagster instance) and may pass `launcher(runbook_id, previous_lease) -> dict` to start long-running
restarts its own way (e.g. a Dagster run) instead of a `stateops jobs run --mode continuous` process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from typing import Any, Callable

from stateops.audit import deep_audit, record
from stateops.control import maintenance
from stateops.recovery import JobTarget, RecoveryReport, RecoveryRequest, Terminate
from stateops.runbooks import StepEvent
from stateops.recovery import plan as plan_runbook
from stateops.recovery import run as run_runbook
from stateops.recovery.model import RecoveryPlan
from stateops.migration.classify import Rewrite
from stateops.recovery.store_switch import StoreToWrite
from stateops.checkpoints.sparkstate import ensure_state_coordinator, write_store

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.environment import Environment
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.definition.targets import recovery_target
from stateops.jobs.runtime import migration

Launcher = Callable[[str, "dict[str, Any] | None"], "dict[str, Any]"]


def job_target(spec: JobSpec, catalog: Catalog, spark: SparkSettings | None = None) -> JobTarget:
    return recovery_target(spec, catalog.layout, catalog.roots(), spark.extra_conf if spark else None)


def process_launcher(catalog: Catalog, job: str) -> Launcher:
    """Start `stateops jobs run JOB --mode continuous --runbook-id ID` in its own session (it outlives the
    runbook), logging to ops/<job>/logs/<runbook id>-<n>.log, with this catalog's home and config file."""
    layout = catalog.layout

    def launch(runbook_id: str, previous: dict[str, Any] | None) -> dict[str, Any]:
        folder = os.path.join(layout.ops_dir(job), "logs")
        os.makedirs(folder, exist_ok=True)
        count = sum(1 for name in os.listdir(folder) if name.startswith(runbook_id))
        log = os.path.join(folder, f"{runbook_id}-{count + 1}.log")
        command = [sys.executable, "-m", "stateops.cli", "--home", layout.home,
                   *(("--config", catalog.config.path) if catalog.config.path else ()),
                   "jobs", "run", job, "--mode", "continuous", "--runbook-id", runbook_id]
        with open(log, "w") as handle:
            proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=dict(os.environ))
        return {"pid": proc.pid, "log": log, "command": " ".join(command)}

    return launch


class SparkRuntime:
    """stateops.recovery.Runtime with a Spark session, built on first use (planning never starts a JVM)."""

    def __init__(self, environment: Environment, spec: JobSpec, *, spark: Any = None,
                 launcher: Launcher | None = None):
        self.environment, self.layout, self.spec = environment, environment.layout, spec
        self._spark = spark
        self.launcher = launcher or process_launcher(environment.catalog, spec.name)

    @property
    def spark(self):
        from stateops.jobs.runtime.session import get_session, session_of

        self._spark = session_of(self._spark or (lambda: get_session(self.environment.spark)))
        return self._spark

    def audit(self, checkpoint: str, batch_id: int | None = None) -> dict[str, Any]:
        report = deep_audit(self.spark, checkpoint, batch_id=batch_id, layout=self.layout, job=self.spec.name)
        record(self.layout, report)
        return report.to_json()

    def repartition(self, checkpoint: str, partitions: int) -> None:
        ensure_state_coordinator(self.spark)
        self.spark._streamingCheckpointManager.repartition(checkpoint, partitions)

    def write_store(self, checkpoint: str, batch_id: int, store: StoreToWrite, provider_class: str, version: int,
                    state_root: str) -> list[int]:
        return write_store(self.spark, checkpoint, batch_id, store, provider_class, version, state_root)

    def rewrite_state(self, checkpoint: str, batch: int, rewrite: Rewrite, provider_class: str, version: int,
                      state_root: str, partitions: int, schema: tuple[str, str] | None) -> list[int]:
        return migration.rewrite_state(self.spark, checkpoint, batch, rewrite, provider_class, version, state_root,
                                       partitions, schema)

    def migration_files(self, state_root: str) -> dict[int, tuple[str, str]]:
        return migration.planned_state_files(self.spark, self.spec, self.layout, self.spec.checkpoint_path(self.layout),
                                             state_root)

    def adopt_migration(self) -> dict[str, Any]:
        return migration.adopt(self.spark, self.spec, self.layout)

    def run_bounded(self, runbook_id: str) -> dict[str, Any]:
        from stateops.jobs.runtime.runner import run_job  # Spark's Python API: only when a restart runs here

        result = run_job(self.spark, self.spec, self.layout, settings=self.environment.settings,
                         runbook_id=runbook_id)
        return {key: value for key, value in asdict(result).items()
                if key in ("run_id", "query_id", "batches", "input_rows", "output_rows", "watermark", "delta_version")}

    def launch_continuous(self, runbook_id: str, previous: dict[str, Any] | None) -> dict[str, Any]:
        return self.launcher(runbook_id, previous)


def plan(environment: Environment, request: RecoveryRequest, *, spark: Any = None) -> RecoveryPlan:
    """The runbook's plan for `request` (nothing written; no JVM but for mode migrate, which plans the job's query
    against its state); refusals raise one line. The job's `${env:NAME}` references are resolved: the plan asks a
    Kafka job's brokers what they still hold."""
    catalog = environment.catalog.resolved()
    settings = environment.settings
    spec = catalog.job(request.job)
    changes = _migration(SparkRuntime(environment, spec, spark=spark), spec, request)
    return plan_runbook(environment.layout, job_target(spec, catalog, environment.spark), request,
                        settings=settings.recovery, control=settings.control, migration=changes)


def _migration(runtime: "SparkRuntime", spec: JobSpec, request: RecoveryRequest) -> dict | None:
    """Mode migrate's changes, classified from the job's query planned against its checkpoint's state (a runbook
    resumed after a crash keeps the plan it made before: its checkpoint may be half-migrated); None otherwise."""
    if request.mode != "migrate" or maintenance.current(runtime.layout, spec.name) is not None:
        return None
    return migration.plan_migration(runtime.spark, spec, runtime.layout, request.transform).to_dict()


# The modes whose restart keeps the checkpoint: its state must fit the job's query (rebuild starts a new one,
# restore puts an archive's back; the restart of either is checked as every run is).
SAME_CHECKPOINT = ("adjust", "repartition", "rewind", "restart", "switch-store")


def _require_fit(runtime: SparkRuntime, spec: JobSpec) -> None:
    """Refuse the runbook before it stops anything when its restart would be refused: the job's query no
    longer fits the checkpoint's state (stateops.jobs.runtime.compatibility), whose fix is a rebuild."""
    from stateops.jobs.runtime.compatibility import REFUSED, StateIncompatible, check_job

    fit = check_job(runtime.spark, spec, runtime.layout)
    if fit.status == REFUSED:
        raise StateIncompatible(fit)


def recover(environment: Environment, request: RecoveryRequest, *, spark: Any = None,
            on_event: Callable[[StepEvent], None] | None = None, terminate: Terminate | None = None,
            launcher: Launcher | None = None) -> RecoveryReport:
    """Plan and (unless a dry run) run the runbook `request` asks for. `spark`: a session, or a callable making
    one, used only by steps that need it (default: the session factory's). The job's `${env:NAME}` references
    are resolved when it starts."""
    catalog = environment.catalog.resolved()
    spec = catalog.job(request.job)
    runtime = SparkRuntime(environment, spec, spark=spark, launcher=launcher)
    settings = environment.settings
    if request.mode in SAME_CHECKPOINT and not request.dry_run:
        _require_fit(runtime, spec)
    return run_runbook(environment.layout, job_target(spec, catalog, environment.spark), request, runtime,
                       settings=settings.recovery, control=settings.control, on_event=on_event, terminate=terminate,
                       migration=_migration(runtime, spec, request))
