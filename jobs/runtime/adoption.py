"""`stateops jobs adopt`: an existing job's checkpoint brought under StateOps (stateops.adoption), the parts that
need Spark: the job's query built as a run builds it, checked against the checkpoint's state (the changed-query
check, stateops.jobs.runtime.compatibility) and against its sources (Spark numbers a query's sources in the
order of its plan's leaves and matches them with the checkpoint's by that number alone).

The plan changes nothing. `adopt` makes the plan again, refuses on any of its refusals, and under the job's lease
(no StateOps run of the job meanwhile) checks that the checkpoint did not move since and records the adoption.
"""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from stateops import control
from stateops.adoption import evidence
from stateops.adoption import plan as plans
from stateops.storage import comparable
from stateops.adoption.plan import AdoptionPlan
from stateops.adoption.record import adoption, deadletter_start, record
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control.store import ControlStore
from stateops.errors import StateOpsError
from stateops.layout import Layout
from stateops.settings import Settings
from stateops.sinkstate import belongs_to, checkpoint_app_prefix

from stateops.jobs.definition.settings import effective_spec, state_store_report, watermark_bounds
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime import compatibility
from stateops.jobs.runtime.plan import stateful_plan
from stateops.jobs.runtime.retirement import RECORD as RETIREMENT, deadletter_in_use
from stateops.jobs.runtime.start import session_state_conf, stateful_frame


class AdoptionRefused(StateOpsError):
    """The plan has a refusal (exit 2, one line); nothing was changed."""

    def __init__(self, plan: AdoptionPlan):
        self.plan = plan
        super().__init__(plan.line)


def _leaf_location(leaf) -> str | None:
    """A streaming source leaf's folder (`path`) or topic (`subscribe`), as the reader was given it."""
    for options in (lambda: leaf.dataSource().options(), lambda: leaf.extraOptions()):
        try:
            found = options()
        except Exception:  # noqa: BLE001 - not this kind of leaf (Py4J raises for a missing method)
            continue
        for key in ("path", "subscribe"):
            try:
                value = found.get(key)
                value = value.get() if hasattr(value, "isDefined") and value.isDefined() else value
            except Exception:  # noqa: BLE001 - a Scala Option without a value
                value = None
            if isinstance(value, str):
                return value
    return None


def source_order(frame, spec: JobSpec, layout: Layout) -> list[str | None]:
    """The input each source of the job's query reads, in Spark's numbering (the plan's leaves, left to right)."""
    places = {inp.name: (inp.topic if spec.source == "kafka" else comparable(inp.landing(layout)))
              for inp in spec.inputs}
    order: list[str | None] = []
    leaves = frame._jdf.queryExecution().logical().collectLeaves().iterator()
    while leaves.hasNext():
        location = _leaf_location(leaves.next())
        if location is None:
            continue
        location = location if spec.source == "kafka" else comparable(location)
        order.append(next((name for name, place in places.items() if place == location), None))
    return order


def make_plan(spark, spec: JobSpec, layout: Layout, settings: Settings, *, replay_last_batch: bool = False,
              watch_seconds: float = evidence.WATCH_SECONDS) -> AdoptionPlan:
    """What adopting `spec`'s checkpoint would do, and why not (refusals); nothing is changed."""
    spec = effective_spec(spec, layout)
    path = spec.checkpoint_path(layout)
    empty = AdoptionPlan(spec.name, path, None, None, (), None, {}, {}, {}, None, None, replay_last_batch)
    record_found = adoption(layout, spec.name)
    if record_found is not None:
        return replace(empty, adopted=record_found)
    try:
        checkpoint = Checkpoint.open(path)
    except StateOpsError as err:
        return replace(empty, refusals=(f"{err}. Fix: set the job's `checkpoint` to the old query's checkpoint",))
    blocker = control.start_blocker(layout, spec.name, settings=settings.control)
    busy = str(blocker) if blocker is not None else evidence.watch(checkpoint, watch_seconds)
    batches = evidence.batches(checkpoint)
    query_id = checkpoint.query_id()
    frame = stateful_frame(spark, spec, layout)
    stateful_plan(frame, spec)
    fit = compatibility.check_state(spark, spec, layout, frame)
    fit_json = {k: v for k, v in fit.to_json().items() if k not in ("stored", "query")}
    inputs = {inp.name: (inp.topic if spec.source == "kafka" else inp.landing(layout)) for inp in spec.inputs}
    sources = (evidence.sources(checkpoint, batches.last_committed, inputs,
                                evidence.KAFKA if spec.source == "kafka" else evidence.FILES,
                                source_order(frame, spec, layout))
               if batches.last_committed is not None else [])
    sink = evidence.sink(spec.sink_path(layout), query_id)
    already = _already_run(spec, layout, query_id, sink)
    output, through, behind = (plans.in_flight_output(batches, sink) if sink.delta and batches.last_committed
                               is not None else (None, batches.last_committed, None))
    if output == plans.UNKNOWN and replay_last_batch and spec.output_mode == "update":
        through = batches.last_committed
    refusals = plans.refusals(batches=batches, sources=sources, inputs=len(spec.inputs), sink=sink, fit=fit_json,
                              output=output, replay_last_batch=replay_last_batch,
                              merges=spec.output_mode == "update", busy=busy, already=already)
    draft = AdoptionPlan(
        spec.name, path, query_id, batches, tuple(sources), sink,
        state_store_report(spec, layout, session_state_conf(spark)), fit_json, {}, output, through, replay_last_batch,
        tuple(refusals + ([behind] if behind else [])),
        notes=(f"StateOps writes the table under its own transaction app id stateops/{spec.name}/{query_id}; "
               f"batches up to {through} are the old query's" if through is not None else "",))
    start = deadletter_start(draft) if sources and not any(s.problem for s in sources) else {}
    return replace(draft, deadletter={**start, "start": _start_text(start)},
                   notes=tuple(n for n in draft.notes if n))


def _already_run(spec: JobSpec, layout: Layout, query_id: str, sink: evidence.Sink) -> str | None:
    """Why the checkpoint is StateOps' own already (nothing to adopt), or None: StateOps wrote its output or dead
    letters under the checkpoint's query id, or ran (and may have retired) a dead-letter query beside it."""
    ours = checkpoint_app_prefix(spec.name, query_id)
    dead = evidence.sink(layout.deadletter_table(spec.name), query_id)
    if not any(found.writer and belongs_to(found.writer, ours) for found in (sink, dead)) \
            and not deadletter_in_use(layout.deadletter_checkpoint(spec.name)) \
            and ControlStore(layout, spec.name).read(RETIREMENT) is None:
        return None
    return ("the job already runs under StateOps (its tables hold StateOps' transactions of this checkpoint): nothing "
            "to adopt. Fix: `stateops jobs run` it")


def _start_text(start: dict[str, Any]) -> str:
    if start.get("kind") == evidence.KAFKA:
        return f"from the old query's last committed offsets {start['offsets']}"
    if start.get("kind") == evidence.FILES:
        return (f"new files only: the stateful query goes on after the {sum(start['files'].values())} file(s) the "
                "old query read, and judges the lines of the batches it runs")
    return "unknown until the sources match"


def adopt(spark, spec: JobSpec, layout: Layout, settings: Settings, *, actor: str,
          replay_last_batch: bool = False, watch_seconds: float = evidence.WATCH_SECONDS) -> AdoptionPlan:
    """Adopt `spec`'s checkpoint (the module doc); raises AdoptionRefused with the plan's first refusal."""
    plan = make_plan(spark, spec, layout, settings, replay_last_batch=replay_last_batch, watch_seconds=watch_seconds)
    if plan.adopted:
        raise AdoptionRefused(replace(plan, adopted=None, refusals=(
            f"already adopted at {plan.adopted.get('adopted_at')} by {plan.adopted.get('actor')}. Fix: `stateops "
            f"jobs run {spec.name}`",)))
    if plan.refusals:
        raise AdoptionRefused(plan)
    spec = effective_spec(spec, layout)
    with control.acquire(layout, spec.name, run_id=uuid.uuid4().hex, actor=actor, mode="adopt",
                         settings=settings.control):
        checkpoint = Checkpoint.open(plan.checkpoint)
        if evidence.batches(checkpoint) != plan.batches:
            raise AdoptionRefused(replace(plan, refusals=(
                f"the checkpoint moved while it was planned ({plan.batches} -> {evidence.batches(checkpoint)}): "
                "another process writes it. Fix: stop the query that writes it, then adopt",)))
        start = {k: v for k, v in plan.deadletter.items() if k in ("kind", "offsets", "files")}
        adopted = record(layout, plan, actor=actor, bounds=watermark_bounds(spec), deadletter=start)
    return replace(plan, adopted=adopted)
