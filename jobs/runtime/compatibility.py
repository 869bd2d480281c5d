"""Whether a job's query still fits the state its checkpoint holds, decided before a run starts its queries,
with Spark's own rules, and nothing written to the checkpoint.

Spark checks a restarted query against its checkpoint while it plans the run's first batch
(IncrementalExecution's StateSchemaAndOperatorMetadataRule): the stateful operators against the state metadata
(STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA, ..._MISSING_STATE_DIRECTORY) and each store's key and
value schema against its schema file (STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE, ..._VALUE_SCHEMA_...; only a
transformWithState value schema under Avro encoding may evolve). By then the run has written the batch's
offsets, and a failed run leaves the user with Spark's page of error. Here the same planning runs first, on a
scratch copy of the checkpoint's schema and metadata files (kilobytes), in a clone of the session carrying the
checkpoint's own confs (state format versions, encoding, partitions: what a restart applies), so Spark decides
and writes only into the copy.

Spark compares key schemas by position and type, not by name: a dedup key changed from one string column to
another passes its check, and the old keys then mean something else (duplicates slip through, windows merge).
The query's own schema files (the same planning on an empty scratch) are therefore compared by name too: a
changed key column is refused as well (STATE_KEY_COLUMNS_CHANGED, StateOps' own class).

Values are compared by position and type too: two same-typed aggregates reordered (`max(value) AS hi, min(value)
AS lo` written the other way round) or an aggregate over another column pass Spark's check, and the old maxima are
then read as minima. What produced each stored value (stateops.jobs.runtime.state_schemas.value_meanings) is kept
beside the checkpoint by every run (remember_meaning) and the next query's is compared with it: a change is refused
(STATE_VALUES_CHANGED). A checkpoint whose query no StateOps run recorded (adopted, restored from before the
record) cannot be checked so: the answer says so in its line.
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import asdict, dataclass, field, replace

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.schemas import copy_schema_files
from stateops.errors import StateOpsError
from stateops.layout import Layout
from stateops.checkpoints.profile import VALUES_STORES
from stateops.checkpoints.sparkstate import reading_format
from stateops.storage import read_text, remove, write_text

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime import state_schemas, state_shapes
from stateops.jobs.runtime.failures import spark_error
from stateops.jobs.runtime.state_schemas import StoreSchema

NEW, COMPATIBLE, REFUSED, UNDECIDED = "new", "compatible", "refused", "undecided"
KEYS_CHANGED = "STATE_KEY_COLUMNS_CHANGED"
VALUES_CHANGED = "STATE_VALUES_CHANGED"
STATE_ERRORS = ("STATE_STORE_", "STREAMING_STATEFUL_OPERATOR_", "STATE_SCHEMA_", "STATEFUL_PROCESSOR_")


def rebuild_command(job: str) -> str:
    return f"stateops recover run {job} --mode rebuild --confirm {job}"


@dataclass(frozen=True)
class StateFit:
    """The answer for one job: `status` new (no state yet), compatible, refused or undecided (the check could
    not run: the run goes on and Spark's own failure, if any, gets the same advice)."""

    job: str
    checkpoint: str
    status: str
    error_class: str | None = None
    operator: str | None = None
    change: str | None = None     # old -> new
    message: str | None = None    # Spark's words, first line
    rebuild: str | None = None    # what the rebuild would replay, or why it cannot
    stored: tuple[StoreSchema, ...] = field(default=())
    query: tuple[StoreSchema, ...] = field(default=())
    join_keys: dict[str, str] = field(default_factory=dict)  # the query's stream-stream joins: op id -> keys
    values: dict[str, list[str]] = field(default_factory=dict)  # op id -> what produced each stored value
    unchecked: str | None = None  # what could not be checked, and why
    shapes: list[dict] = field(default_factory=list)  # the query's state, per operator (stateops.migration.shape)
    debt: dict | None = None  # a partial migration's boundary not yet settled (stateops.migration.debt)

    @property
    def compatible(self) -> bool | None:
        return {NEW: True, COMPATIBLE: True, REFUSED: False}.get(self.status)

    @property
    def line(self) -> str:
        if self.status == REFUSED:
            return (f"{self.job}: the query no longer fits the state in its checkpoint {self.checkpoint}: "
                    f"{self.operator}: {self.change} ({self.error_class}); nothing was written. Fix: "
                    f"`{rebuild_command(self.job)}` ({self.rebuild})")
        if self.status == UNDECIDED:
            return f"{self.job}: the state check could not decide ({self.message}); Spark checks at the first batch"
        if self.status == NEW:
            return f"{self.job}: no state yet in {self.checkpoint}: any query fits"
        operators = sorted({s.operator for s in self.stored})
        return (f"{self.job}: the query fits the state in {self.checkpoint} ({', '.join(operators)})"
                + (f"; {self.unchecked}" if self.unchecked else "")
                + (f"; {self.debt['line']}" if self.owes else ""))

    @property
    def owes(self) -> bool:
        """A partial migration's windows or keys from before its boundary are still in the state."""
        return bool(self.debt) and not self.debt["settled"]

    def to_json(self) -> dict:
        return {"job": self.job, "checkpoint": self.checkpoint, "status": self.status, "compatible": self.compatible,
                "error_class": self.error_class, "operator": self.operator, "change": self.change,
                "message": self.message, "fix": rebuild_command(self.job) if self.status == REFUSED else None,
                "rebuild": self.rebuild, "line": self.line,
                "stored": [asdict(s) for s in self.stored], "query": [asdict(s) for s in self.query],
                "join_keys": self.join_keys, "values": self.values, "unchecked": self.unchecked, "debt": self.debt}


class StateIncompatible(StateOpsError):
    """A run refused before its queries started: the query does not fit the checkpoint's state (exit 2)."""

    def __init__(self, fit: StateFit):
        self.fit = fit
        super().__init__(fit.line)


def _restart_point(checkpoint: str) -> tuple[int, str, str] | None:
    """(the batch a restart plans first, its query id, the offset log's metadata line of its last
    batch: the confs a restart applies), or None for a checkpoint without a batch (no state to fit)."""
    try:
        cp = Checkpoint.open(checkpoint)
    except StateOpsError:
        return None
    batches = cp.offset_batches()
    if not batches:
        return None
    committed = cp.committed_batches()
    batch = batches[-1] + 1 if committed and committed[-1] >= batches[-1] else batches[-1]
    return batch, cp.query_id(), json.dumps(cp.batch_metadata(batches[-1]))


def check_state(spark, spec: JobSpec, layout: Layout, frame, *, migrated: bool = False) -> StateFit:
    """Compare `frame` (the job's stateful query) with the state in the job's checkpoint. `migrated`: the state was
    just rewritten for this query (stateops.jobs.runtime.migration), so what produced its values is the query's own,
    not the record's: Spark's rules and the key columns are checked (a join's against what its rewritten rows
    hold), the record is not."""
    checkpoint = spec.checkpoint_path(layout)
    try:
        restart = _restart_point(checkpoint)
    except (StateOpsError, OSError, ValueError, KeyError, IndexError) as err:  # an offset log that does not read
        return StateFit(spec.name, checkpoint, UNDECIDED, message=f"the checkpoint does not read: {_first(err)}")
    with tempfile.TemporaryDirectory(prefix="stateops-state-check-") as scratch:
        # Spark looks for `state/` beside the offsets (the state folder's parent): each copy is a checkpoint's
        stored_dir, query_dir = (Checkpoint(os.path.join(scratch, copy)).state_root for copy in ("stored", "query"))
        batch, query_id, metadata = restart or (0, str(uuid.uuid4()), None)
        try:
            planned = state_schemas.plan_restart(spark, frame, spec, query_id, query_dir, metadata, 0)  # its own files
            joins, values = state_schemas.join_keys(planned), state_schemas.value_meanings(planned)
            query = state_schemas.read_schemas(spark, query_dir)
            shapes = state_shapes.shapes(planned, query_dir).to_list()
        except Exception as err:  # noqa: BLE001 - any failure here leaves the decision to Spark's run
            return StateFit(spec.name, checkpoint, UNDECIDED, message=_first(err))
        if restart is None:
            return StateFit(spec.name, checkpoint, NEW, query=tuple(query), join_keys=joins, values=values,
                            shapes=shapes)
        copy_schema_files(checkpoint, stored_dir)
        stored = state_schemas.read_schemas(spark, stored_dir)
        found = dict(stored=tuple(stored), query=tuple(query), join_keys=joins, values=values, shapes=shapes)
        try:
            state_schemas.plan_restart(spark, frame, spec, query_id, stored_dir, metadata, batch)
        except Exception as err:  # noqa: BLE001 - classified below
            error_class, message = spark_error(err)
            if not error_class.startswith(STATE_ERRORS):
                return StateFit(spec.name, checkpoint, UNDECIDED, message=f"{error_class}: {message}")
            operator, change = _culprit(error_class, stored, query, message)
            kept = kept_meaning(layout, spec.name, query_id).get("joins", {})
            change += "".join(f"; join keys ({kept[op]}) -> ({keys})" for op, keys in joins.items()
                              if op in kept and kept[op] != keys and operator.startswith(f"operator {op} "))
            return StateFit(spec.name, checkpoint, REFUSED, error_class, operator, change, message,
                            rebuild_outlook(spec, layout), **found)
    kept = kept_meaning(layout, spec.name, query_id)
    kept_joins = {} if migrated else kept.get("joins", {})  # a migrated join's keys: judged by its own state's rows
    changed = _renamed_keys(stored, query) or _changed_joins(spark, kept_joins, checkpoint, joins, stored)
    if changed:
        operator, change = changed
        return StateFit(spec.name, checkpoint, REFUSED, KEYS_CHANGED, operator,
                        f"{change}: Spark would accept the same types, but the stored keys would mean something else",
                        "key columns changed", rebuild_outlook(spec, layout), **found)
    if migrated:
        return StateFit(spec.name, checkpoint, COMPATIBLE, **found)
    if "values" not in kept:
        unchecked = (f"what produced its stored values ({_listing(values)}) was not recorded by a StateOps run of this "
                     "checkpoint's query, so a swap of same-typed values cannot be checked") if values else None
        return StateFit(spec.name, checkpoint, COMPATIBLE, unchecked=unchecked, **found)
    swapped = _changed_values(stored, kept["values"], values)
    if swapped:
        operator, change = swapped
        return StateFit(spec.name, checkpoint, REFUSED, VALUES_CHANGED, operator,
                        f"{change}: Spark would accept the same types, but the stored values would mean something "
                        "else", "value fields changed", rebuild_outlook(spec, layout), **found)
    return StateFit(spec.name, checkpoint, COMPATIBLE, **found)


def rebuild_outlook(spec: JobSpec, layout: Layout) -> str:
    """What `recover run --mode rebuild` would replay (stateops.recovery.coverage), or why it cannot."""
    from stateops.recovery import coverage
    from stateops.jobs.definition.targets import replay_target

    try:
        return coverage.assess(layout, Checkpoint(spec.checkpoint_path(layout)), replay_target(spec, layout)).describe()
    except StateOpsError as err:
        return f"a rebuild would be refused now: {err}"


def _first(err: BaseException) -> str:
    error_class, message = spark_error(err)
    return f"{error_class}: {message}"


def _culprit(error_class: str, stored: list[StoreSchema], query: list[StoreSchema], message: str
             ) -> tuple[str, str]:
    """Which operator Spark refused and what changed, old -> new, from the two sets of schema files."""
    if "OPERATOR" in error_class:
        def listing(schemas):
            return ", ".join(sorted({f"{s.operator_id} {s.operator_name}" for s in schemas})) or "none"
        return "stateful operators", f"[{listing(stored)}] -> [{listing(query)}]"
    by_store = {(s.operator_id, s.store): s for s in query}
    part = "value" if "VALUE" in error_class else "key"
    for old in stored:
        new = by_store.get((old.operator_id, old.store))
        if new is not None and getattr(old, part) != getattr(new, part):
            return old.operator, f"{part} {getattr(old, part)} -> {getattr(new, part)}"
    return "a stateful operator", message


def _renamed_keys(stored: list[StoreSchema], query: list[StoreSchema]) -> tuple[str, str] | None:
    by_store = {(s.operator_id, s.store): s for s in query}
    for old in stored:
        new = by_store.get((old.operator_id, old.store))
        if new is not None and old.key_columns != new.key_columns:
            return old.operator, f"key columns ({', '.join(old.key_columns)}) -> ({', '.join(new.key_columns)})"
    return None


def _listing(values: dict[str, list[str]]) -> str:
    return "; ".join(f"operator {op}: {', '.join(parts)}" for op, parts in sorted(values.items()))


def _changed_values(stored: list[StoreSchema], kept: dict[str, list[str]], values: dict[str, list[str]]
                    ) -> tuple[str, str] | None:
    """The first operator whose stored values another query's parts would read in their place (same types, or
    Spark would have refused): (operator, `value fields (old) -> (new)`)."""
    names = {str(s.operator_id): s.operator_name for s in stored}
    for op, parts in sorted(values.items()):
        if op in kept and kept[op] != parts:
            return (f"operator {op} ({names.get(op, 'stateful operator')})",
                    f"value fields ({', '.join(kept[op])}) -> ({', '.join(parts)})")
    return None


def remember_meaning(layout: Layout, job: str, query_id: str, fit: StateFit, watermark_delay: str | None = None
                     ) -> None:
    """Keep what the state of the query a run started means (the checkpoint's query id with it): its join keys and
    what produced each stored value, which the next check compares against (_changed_joins, _changed_values), and
    the state's shape and watermark delay, which a migration starts from (stateops.jobs.runtime.migration)."""
    if fit.status == UNDECIDED:
        return  # the query was not planned: what is kept stays
    write_text(layout.state_meaning(job), json.dumps({"query_id": query_id, "joins": fit.join_keys,
                                                      "values": fit.values, "shapes": fit.shapes,
                                                      "watermark_delay": watermark_delay}, sort_keys=True))
    remove(layout.legacy_join_keys(job))


def kept_meaning(layout: Layout, job: str, query_id: str) -> dict:
    """What remember_meaning kept for this checkpoint's query, `joins` and `values` (nothing for another
    checkpoint's: a restored or rebuilt one); an older run's join keys alone where that is all it kept."""
    for path in (layout.state_meaning(job), layout.legacy_join_keys(job)):
        try:
            kept = json.loads(read_text(path))
        except FileNotFoundError:
            continue
        return kept if kept.get("query_id") == query_id else {}
    return {}


# Rows of a join side's value store read to tell which input columns its keys are: enough that a column equal to the
# key by chance in all of them is unlikely, few enough that the check stays a second.
JOIN_SAMPLE_ROWS = 200


def _joins_in_state(spark, checkpoint: str, op: str) -> dict[str, list[set[str]]] | None:
    """Per side of join operator `op`, per key position: the input columns whose value equals the key's in every
    row read of the side's value store (which keeps the whole input row): the columns the checkpoint's join was
    keyed by, as its own state shows them (Spark names the key fields field0, field1, ...). None: not readable."""
    from stateops.checkpoints.profile import JOIN_KEY_TIME

    sides: dict[str, list[set[str]]] = {}
    cp = Checkpoint(checkpoint)
    committed = cp.committed_batches()
    own_format = cp.checkpoint_format(committed[-1]) if committed else 1
    for side in ("left", "right"):
        rows = None
        for store in VALUES_STORES:  # formats 1-3, format 4
            try:
                with reading_format(spark, own_format):
                    rows = (spark.read.format("statestore").option("path", checkpoint).option("operatorId", op)
                            .option("storeName", f"{side}-{store}").load().select("key", "value")
                            .limit(JOIN_SAMPLE_ROWS).collect())
                break
            except Exception:  # noqa: BLE001 - the other format's store, or no state to read
                continue
        if not rows:
            return None
        pairs = [(r["key"].asDict(), r["value"].asDict()) for r in rows]
        keys = [k for k in pairs[0][0] if k != JOIN_KEY_TIME]
        sides[side] = [{column for column in pairs[0][1] if all(value.get(column) == key[k] for key, value in pairs)}
                       for k in keys]
    return sides


def _swapped_in_state(found: dict[str, list[set[str]]], keys: str) -> str | None:
    """The checkpoint's join keys (found) when the query's `keys` (`left = right`) name another column at a position
    whose column the state tells; None when they agree or the state cannot tell."""
    query = [part.split(", ") for part in keys.split(" = ")]
    for side, columns in zip(("left", "right"), query):
        for position, column in enumerate(columns):
            known = found[side][position] if position < len(found[side]) else set()
            if known and column not in known:
                return " = ".join(", ".join("|".join(sorted(c)) or "?" for c in found[s]) for s in ("left", "right"))
    return None


def _changed_joins(spark, kept: dict[str, str], checkpoint: str, joins: dict[str, str],
                   stored: list[StoreSchema]) -> tuple[str, str] | None:
    """A join keyed by other columns of the same types (Spark accepts it): against the keys remember_meaning kept
    for this checkpoint's query, else against the columns the checkpoint's own state shows (a checkpoint StateOps did
    not start, or restored)."""
    names = {str(s.operator_id): s.operator_name for s in stored}
    for op, keys in joins.items():
        where = f"operator {op} ({names.get(op, 'join')})"
        if op in kept:
            if kept[op] != keys:
                return where, f"join keys ({kept[op]}) -> ({keys})"
            continue
        found = _joins_in_state(spark, checkpoint, op)
        old = _swapped_in_state(found, keys) if found else None
        if old:
            return where, f"join keys ({old}, as the checkpoint's state holds them) -> ({keys})"
    return None


def job_query(spark, spec: JobSpec, layout: Layout):
    """(the spec with the settings in force, its stateful query built as a run builds it); no query starts."""
    from stateops.jobs.definition.settings import effective_spec
    from stateops.jobs.runtime.plan import stateful_plan
    from stateops.jobs.runtime.start import ensure_landing, stateful_frame

    spec = effective_spec(spec, layout)
    ensure_landing(spec, layout)
    frame = stateful_frame(spark, spec, layout)
    stateful_plan(frame, spec)
    return spec, frame


def check_job(spark, spec: JobSpec, layout: Layout) -> StateFit:
    """The check alone (`stateops jobs check`, the `state_compatible` asset check): the job's query built as a
    run builds it, with the settings in force, compared with its checkpoint; no query starts."""
    from stateops.migration import debt

    spec, frame = job_query(spark, spec, layout)
    fit = check_state(spark, spec, layout, frame)
    if fit.status != COMPATIBLE:
        return fit
    return replace(fit, debt=debt.current(layout, spec.name, Checkpoint.open(fit.checkpoint)))
