"""A job run's checks, made first as data and acted on after (as the runbook's preflight is): where its folders are
against what its checkpoint recorded (stateops.checkpoints.placement), which batches an earlier run committed without
a progress row, the query itself (its stateful operators, its output columns) and whether it fits the state in the
checkpoint (stateops.jobs.runtime.compatibility). Making the plan reads and writes nothing of the job's: a refusal
found here stops the run before anything is retired, journaled or started (stateops.jobs.runtime.runner acts on it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stateops import progress as progress_table
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.placement import check_placement
from stateops.errors import StateOpsError
from stateops.layout import Layout

from stateops.jobs.definition.spec import JobSpec, check_output_columns
from stateops.jobs.runtime import compatibility
from stateops.jobs.runtime.plan import StatefulPlan, stateful_plan
from stateops.jobs.runtime.session import DELTA_WRITER_CONF
from stateops.jobs.runtime.sources import collector
from stateops.jobs.runtime.start import stateful_frame


@dataclass(frozen=True)
class ProgressGap:
    """Batches of the checkpoint's query committed without a progress row (an earlier run's buffer lost)."""

    checkpoint: str
    query_id: str
    batches: tuple[int, ...]


@dataclass(frozen=True)
class RunPlan:
    """What a run found before it acts: `fit` refused means the run stops here (StateIncompatible)."""

    checkpoint: str
    use_jvm: bool                  # Delta's own Spark writer (the session factory's choice), not delta-rs
    retire: bool                   # retire an old dead-letter query first (never in a dry run: it changes nothing)
    gap: ProgressGap | None
    collectors: dict[str, Any]     # the rows each input's scan rejects, collected in the same scan
    frame: Any                     # the job's stateful query (a streaming DataFrame)
    stateful: StatefulPlan
    fit: compatibility.StateFit


def progress_gap(layout: Layout, path: str) -> ProgressGap | None:
    try:
        checkpoint = Checkpoint.open(path)
        latest, query_id = checkpoint.latest_committed_batch(), checkpoint.query_id()
    except (StateOpsError, OSError, ValueError, KeyError):
        return None  # a new checkpoint: nothing committed before this run
    gap = progress_table.unrecorded_batches(layout, query_id, latest)
    return ProgressGap(path, query_id, tuple(gap)) if gap else None


def plan_run(spark, spec: JobSpec, layout: Layout, *, by_runbook: bool, dry_run: bool) -> RunPlan:
    """The run's checks in their order; Misplaced or ConfigError raised at once (nothing was done yet)."""
    checkpoint = spec.checkpoint_path(layout)
    check_placement(spec.name, [checkpoint], [i.landing(layout) for i in spec.inputs] if
                    spec.source == "json" else [], spec.sink_path(layout), by_runbook=by_runbook)
    collectors = {inp.name: collector(spark) for inp in spec.inputs}
    frame = stateful_frame(spark, spec, layout, collectors)
    stateful = stateful_plan(frame, spec)
    check_output_columns(spec, frame.columns)
    return RunPlan(checkpoint=checkpoint, use_jvm=spark.conf.get(DELTA_WRITER_CONF, "delta-rs") == "spark",
                   retire=not dry_run, gap=progress_gap(layout, checkpoint), collectors=collectors, frame=frame,
                   stateful=stateful, fit=compatibility.check_state(spark, spec, layout, frame))
