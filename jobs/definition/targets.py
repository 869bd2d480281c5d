"""What an operation acts on, resolved from a job name (or a checkpoint path) and the catalog: the CLI and
the Dagster code resolve through these, so both read a job's checkpoint, thresholds, join bound and kind of
state the same way.

    resolve_target / resolve_audit   `stateops audit TARGET`, the audit assets and schedules
    explain_target                   `stateops explain-key JOB`
    recovery_target / replay_target  the runbook (stateops.recovery), what a rebuild would replay
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from stateops import progress
from stateops.checkpoints import state_store
from stateops.audit import Thresholds
from stateops.audit.history import normalize
from stateops.checkpoints.operators import describe
from stateops.checkpoints.profile import kind_of
from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError
from stateops.errors import first_line
from stateops.explain import ExplainError, ExplainTarget, InputSource, JoinSpec
from stateops.storage import exists, is_url
from stateops.joins import JoinBound
from stateops.checkpoints.kafka_offsets import KafkaSource
from stateops.layout import Layout
from stateops.recovery import JobTarget
from stateops.roots import Roots

from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.settings import effective_spec, watermark_bounds
from stateops.sinkstate import query_app_id
from stateops.jobs.definition.spec import JobSpec


def resolve_target(target: str, catalog: Catalog) -> tuple[str, str | None]:
    """(checkpoint path, job name or None) for a job name or a checkpoint path."""
    jobs, layout = catalog.jobs, catalog.layout
    if target in jobs:
        path = jobs[target].checkpoint_path(layout)
        if not exists(path):
            raise NotACheckpointError(f"job {target} has no checkpoint yet at {path}; run it first "
                                      f"(stateops jobs run {target})")
        return path, target
    looks_like_path = "/" in target or is_url(target) or target.startswith(".") or exists(target)
    if not looks_like_path:
        raise NotACheckpointError(f"{target}: not a job (known: {', '.join(sorted(jobs))}) and not a "
                                  "checkpoint path")
    Checkpoint.open(target)
    wanted = normalize(target)
    job = next((name for name, spec in jobs.items() if normalize(spec.checkpoint_path(layout)) == wanted), None)
    return target, job


@dataclass(frozen=True)
class AuditTarget:
    """What an audit of TARGET needs to know beyond the checkpoint: the job (if any), its thresholds, and
    its join's time bound (None: no stream-stream join, or a checkpoint path that is no job's)."""

    checkpoint: str
    job: str | None
    thresholds: Thresholds
    join_bound: JoinBound | None


def resolve_audit(target: str, catalog: Catalog) -> AuditTarget:
    """resolve_target, plus the job's thresholds (`[audit]`, `[audit.jobs.<job>]`) and join bound."""
    checkpoint, job = resolve_target(target, catalog)
    return AuditTarget(checkpoint, job, catalog.thresholds(job), catalog.jobs[job].join_bound if job else None)


# explain-key's rules per kind of state, from the audit's operator kinds (stateops.checkpoints.profile.KINDS);
# a deduplication may come first, in front of any of them.
EXPLAIN_KINDS = {"join": "join", "session": "session", "aggregation": "window", "custom": "custom", "tws": "custom"}
DEDUP_KINDS = ("dedup", "dedup_within_watermark")


def state_kind(spec: JobSpec, checkpoint: Checkpoint) -> str:
    """The one kind of state the job's checkpoint keeps; ExplainError naming the operators otherwise."""
    names = [meta.operator_name for meta in map(lambda op: describe(checkpoint, op), checkpoint.operator_ids())
             if meta is not None]
    stateful = [name for name in names if kind_of(name) not in DEDUP_KINDS]
    kinds = {EXPLAIN_KINDS.get(kind_of(name)) for name in stateful}
    if len(kinds) != 1 or None in kinds:
        unknown = sorted({n for n in stateful if kind_of(n) not in EXPLAIN_KINDS})
        why = (f"has operators explain-key has no rules for ({', '.join(unknown)})" if unknown else
               "keeps deduplication state only" if names and not kinds else
               f"keeps {' and '.join(sorted(k for k in kinds if k))} state in one query" if kinds else
               "has no stateful operator in its checkpoint yet")
        raise ExplainError(f"explain-key does not support job {spec.name}: it {why} (operators: "
                           f"{', '.join(names) or 'none'}); it explains one kind of state per job (join, window, "
                           "session or custom state, optionally after a deduplication). Read its state with "
                           f"`stateops audit {spec.name}` or Spark's statestore reader instead")
    (kind,) = kinds
    if kind == "join" and spec.join is None:
        raise ExplainError(f"job {spec.name} joins two streams but its spec declares no join bound: add "
                           f"join = {{ left = ..., right = ..., upper = ... }} to [jobs.{spec.name}]")
    return kind


def kafka_source(spec: JobSpec) -> KafkaSource | None:
    """The brokers and consumer options of a Kafka job (None for a file job), for reads outside its query."""
    spec.require_extras()
    return KafkaSource(spec.kafka_bootstrap_servers, dict(spec.kafka_options)) if spec.source == "kafka" else None


def explain_target(spec: JobSpec, layout: Layout) -> ExplainTarget:
    """Everything explain_key needs to know about a job: checkpoint, kind of state, inputs and the columns
    that carry the key, output table, join condition."""
    checkpoint = spec.checkpoint_path(layout)
    kind = state_kind(spec, Checkpoint.open(checkpoint))
    keys = spec.explain
    try:
        app_id = query_app_id(spec.name, checkpoint)
    except (OSError, ValueError, KeyError) as err:  # the output is looked up "as of a batch" by this id
        raise ExplainError(f"{checkpoint}/metadata: cannot read the query id ({first_line(err)}); the checkpoint "
                           f"is damaged: audit it (stateops audit {spec.name}) before explaining keys") from None
    kafka = kafka_source(spec)
    inputs = tuple(InputSource(inp.name, None if kafka else inp.landing(layout), inp.schema, inp.time_column,
                               keys.key_columns.get(inp.name), spec.future_tolerance_seconds, kafka,
                               inp.path if kafka else None)
                   for inp in spec.inputs)
    join = spec.join and JoinSpec(left=spec.join.left, right=spec.join.right,
                                  left_time=spec.input(spec.join.left).time_column,
                                  right_time=spec.input(spec.join.right).time_column, bound=spec.join.bound)
    return ExplainTarget(job=spec.name, checkpoint=checkpoint, output_table=spec.sink_path(layout),
                         output_app_id=app_id, output_key_columns=keys.output_key_columns or spec.merge_keys,
                         inputs=inputs,
                         join=join if kind == "join" else None, kind=kind,
                         late_margin_seconds=keys.late_margin_seconds, progress_table=layout.ops_table(progress.TABLE))


def recovery_target(spec: JobSpec, layout: Layout, roots: Roots, spark_conf: Mapping[str, str] | None = None) -> JobTarget:
    """What the runbook needs to know about `spec` under `layout`, with the settings in force now; `spark_conf`:
    what STATEOPS_SPARK_CONF sets (a rebuild's new checkpoint takes its state store settings)."""
    effective = effective_spec(spec, layout)
    return JobTarget(
        job=spec.name, checkpoint=spec.checkpoint_path(layout), sink_table=spec.sink_path(layout),
        output_mode=spec.output_mode, row_key=spec.row_key, output_time_column=spec.output_time_column,
        watermark_delay=effective.watermark_delay, bounds=watermark_bounds(spec),
        shuffle_partitions=effective.shuffle_partitions, archive_root=spec.archive_path(layout),
        landing=tuple(i.landing(layout) for i in spec.inputs) if spec.source == "json" else (),
        inputs=len(spec.inputs), roots=roots,
        kafka=kafka_source(spec), state_store=spec.state_store,
        state_conf={key: value for key, value in (spark_conf or {}).items() if key in state_store.DEFAULTS})


def replay_target(spec: JobSpec, layout: Layout) -> JobTarget:
    """The target for asking what a rebuild would replay (stateops.recovery.coverage) where no catalog is at
    hand (a run refused by its state check): the roots of this job alone, which coverage never reads; a runbook
    plans with the catalog's (stateops.jobs.runtime.recovery.job_target)."""
    return recovery_target(spec, layout, Roots.from_layout(layout, {spec.name: spec.checkpoint_path(layout)}, {}, {}))
