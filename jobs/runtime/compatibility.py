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
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import tempfile
import uuid
from dataclasses import asdict, dataclass, field

from stateops.checkpoint import Checkpoint
from stateops.errors import StateOpsError
from stateops.layout import Layout
from stateops.storage import filesystem

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime.failures import spark_error

log = logging.getLogger(__name__)

NEW, COMPATIBLE, REFUSED, UNDECIDED = "new", "compatible", "refused", "undecided"
KEYS_CHANGED = "STATE_KEY_COLUMNS_CHANGED"
STATE_ERRORS = ("STATE_STORE_", "STREAMING_STATEFUL_OPERATOR_", "STATE_SCHEMA_", "STATEFUL_PROCESSOR_")
_RUNTIME = "org.apache.spark.sql.execution.streaming.runtime."
_CHECKPOINTING = "org.apache.spark.sql.execution.streaming.checkpointing."
_STATE = "org.apache.spark.sql.execution.streaming.state."
_EXPR_ID = re.compile(r"#\d+L?")


def rebuild_command(job: str) -> str:
    return f"stateops recover run {job} --mode rebuild --confirm {job}"


@dataclass(frozen=True)
class StoreSchema:
    """One state store (one column family of it) as a schema file holds it."""

    operator_id: int
    operator_name: str
    store: str          # the store's folder and column family: "default", "left-keyToNumValues", a state variable
    key: str            # Spark's simpleString of the key schema
    value: str
    key_columns: tuple[str, ...]

    @property
    def operator(self) -> str:
        return f"operator {self.operator_id} ({self.operator_name}" + (
            f", store {self.store})" if self.store != "default" else ")")


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
        return f"{self.job}: the query fits the state in {self.checkpoint} ({', '.join(operators)})"

    def to_json(self) -> dict:
        return {"job": self.job, "checkpoint": self.checkpoint, "status": self.status, "compatible": self.compatible,
                "error_class": self.error_class, "operator": self.operator, "change": self.change,
                "message": self.message, "fix": rebuild_command(self.job) if self.status == REFUSED else None,
                "rebuild": self.rebuild, "line": self.line,
                "stored": [asdict(s) for s in self.stored], "query": [asdict(s) for s in self.query],
                "join_keys": self.join_keys}


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


def check_state(spark, spec: JobSpec, layout: Layout, frame) -> StateFit:
    """Compare `frame` (the job's stateful query) with the state in the job's checkpoint."""
    checkpoint = spec.checkpoint_path(layout)
    try:
        restart = _restart_point(checkpoint)
    except (StateOpsError, OSError, ValueError, KeyError, IndexError) as err:  # an offset log that does not read
        return StateFit(spec.name, checkpoint, UNDECIDED, message=f"the checkpoint does not read: {_first(err)}")
    with tempfile.TemporaryDirectory(prefix="stateops-state-check-") as scratch:
        # Spark looks for `state/` beside the offsets (the state folder's parent): each copy is a checkpoint's
        stored_dir, query_dir = os.path.join(scratch, "stored", "state"), os.path.join(scratch, "query", "state")
        batch, query_id, metadata = restart or (0, str(uuid.uuid4()), None)
        try:
            joins = _join_keys(_plan(spark, frame, spec, query_id, query_dir, metadata, 0))  # the query's own files
            query = _schemas(spark, query_dir)
        except Exception as err:  # noqa: BLE001 - any failure here leaves the decision to Spark's run
            return StateFit(spec.name, checkpoint, UNDECIDED, message=_first(err))
        if restart is None:
            return StateFit(spec.name, checkpoint, NEW, query=tuple(query), join_keys=joins)
        _copy_schema_files(checkpoint, stored_dir)
        stored = _schemas(spark, stored_dir)
        found = dict(stored=tuple(stored), query=tuple(query), join_keys=joins)
        try:
            _plan(spark, frame, spec, query_id, stored_dir, metadata, batch)
        except Exception as err:  # noqa: BLE001 - classified below
            error_class, message = spark_error(err)
            if not error_class.startswith(STATE_ERRORS):
                return StateFit(spec.name, checkpoint, UNDECIDED, message=f"{error_class}: {message}")
            operator, change = _culprit(error_class, stored, query, message)
            kept = _kept_joins(layout, spec.name, query_id)
            change += "".join(f"; join keys ({kept[op]}) -> ({keys})" for op, keys in joins.items()
                              if op in kept and kept[op] != keys and operator.startswith(f"operator {op} "))
            return StateFit(spec.name, checkpoint, REFUSED, error_class, operator, change, message,
                            rebuild_outlook(spec, layout), **found)
    changed = _renamed_keys(stored, query) or _changed_joins(layout, spec.name, query_id, joins, stored)
    if changed:
        operator, change = changed
        return StateFit(spec.name, checkpoint, REFUSED, KEYS_CHANGED, operator,
                        f"{change}: Spark would accept the same types, but the stored keys would mean something else",
                        "key columns changed", rebuild_outlook(spec, layout), **found)
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


def _copy_schema_files(checkpoint: str, target: str) -> None:
    """The checkpoint's `state/` folders and the schema and metadata files in them, nothing else (a restart of
    a checkpoint without `state/` is what STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY is about). Spark
    keeps them per operator (`<op>/_metadata`, `<op>/_stateSchema`) and in partition 0 (`<op>/0/_metadata`,
    `<op>/0/<store>/_metadata`): listed there only, so the cost does not grow with the state's files."""
    fs, root = filesystem(posixpath.join(checkpoint.rstrip("/"), "state"))
    if not fs.exists(root):
        return
    os.makedirs(target, exist_ok=True)
    root = root.rstrip("/")
    for op in (posixpath.basename(p["name"].rstrip("/")) for p in fs.ls(root, detail=True) if p["type"] == "directory"):
        if not op.isdigit():
            continue
        os.makedirs(os.path.join(target, op), exist_ok=True)
        folders = [f"{op}/_metadata", f"{op}/_stateSchema"]
        first = f"{root}/{op}/0"
        if fs.exists(first):
            folders += [f"{op}/0/{posixpath.basename(p['name'].rstrip('/'))}/_metadata"
                        for p in fs.ls(first, detail=True) if p["type"] == "directory"] + [f"{op}/0/_metadata"]
        for folder in folders:
            for path in (fs.find(f"{root}/{folder}") if fs.exists(f"{root}/{folder}") else []):
                rel = path[len(root) + 1:] if path.startswith(root + "/") else posixpath.relpath(path, root)
                if not posixpath.basename(rel).startswith("."):
                    os.makedirs(os.path.join(target, posixpath.dirname(rel)), exist_ok=True)
                    fs.get_file(path, os.path.join(target, rel))


def _module(spark, name: str):
    """A Scala object (its MODULE$) through py4j."""
    loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
    return spark._jvm.java.lang.Class.forName(name + "$", True, loader).getField("MODULE$").get(None)


def _plan(spark, frame, spec: JobSpec, query_id: str, state_dir: str, metadata: str | None, batch: int):
    """Plan `frame` as the first batch `batch` of a restart whose state lives in `state_dir` (Spark validates
    and writes schema and operator metadata there); raises Spark's error when the state does not fit, returns
    the physical plan otherwise."""
    jvm = spark._jvm
    session = spark._jsparkSession.cloneSession()
    offsets = _module(spark, _CHECKPOINTING + "OffsetSeqMetadata")
    if metadata is None:  # a new checkpoint: the session's confs and the job's partitions, as a first start
        entries = offsets.relevantSQLConfs()  # a conf missing from the metadata would get its legacy value
        conf = {entry.key(): spark.conf.get(entry.key(), None) or entry.defaultValueString()
                for entry in (entries.apply(i) for i in range(entries.size()))}
        conf["spark.sql.shuffle.partitions"] = str(spec.shuffle_partitions)
        metadata = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0,
                               "conf": {k: v for k, v in conf.items() if v != "<undefined>"}})
    offset_log = os.path.join(os.path.dirname(state_dir), "offsets")
    os.makedirs(offset_log, exist_ok=True)  # transformWithState reads operator metadata up to the offset log's end
    with open(os.path.join(offset_log, str(batch)), "w") as handle:
        handle.write(f"v1\n{metadata}\n")
    seq_metadata = offsets.apply(metadata)
    offsets.setSessionConf(seq_metadata, session.sessionState().conf())  # the checkpoint's confs, as a restart
    execution = _module(spark, _RUNTIME + "IncrementalExecution")
    modes = jvm.org.apache.spark.sql.streaming.OutputMode
    mode = {"append": modes.Append(), "update": modes.Update(), "complete": modes.Complete()}[spec.output_mode]
    defaults = [getattr(execution, f"$lessinit$greater$default${n}")() for n in (12, 13, 14, 15)]
    planned = getattr(jvm, _RUNTIME + "IncrementalExecution")(
        session, frame._jdf.queryExecution().analyzed(), mode, "file://" + state_dir,
        jvm.java.util.UUID.fromString(query_id), jvm.java.util.UUID.randomUUID(), batch, jvm.scala.Option.apply(None),
        seq_metadata, _module(spark, _RUNTIME + "WatermarkPropagator").noop(), True, *defaults)
    return planned.executedPlan()


def _schemas(spark, state_dir: str) -> list[StoreSchema]:
    """Every store's schemas in `state_dir`, read with Spark's own schema reader (v2 files under
    `<op>/<partition>/[<store>/]_metadata/schema`, v3 files under `<op>/_stateSchema/<store>/`, the newest)."""
    if not os.path.isdir(state_dir):
        return []
    reader = _module(spark, _STATE + "StateSchemaCompatibilityChecker")
    hadoop = spark._jsc.hadoopConfiguration()
    found: dict[tuple[int, str], StoreSchema] = {}
    for op in sorted((d for d in os.listdir(state_dir) if d.isdigit()), key=int):
        name = _operator_name(os.path.join(state_dir, op))
        files = []
        for folder, _, names in os.walk(os.path.join(state_dir, op)):
            rel = os.path.relpath(folder, os.path.join(state_dir, op)).split(os.sep)
            for file in names:
                if file.startswith("."):
                    continue
                if rel[-1] == "_metadata" and file == "schema":
                    files.append(("/".join(p for p in rel[1:-1]) or "default", os.path.join(folder, file), 0))
                elif "_stateSchema" in rel:
                    files.append(("/".join(rel[rel.index("_stateSchema") + 1:]) or "default",
                                  os.path.join(folder, file), int(file.split("_")[0] or 0)))
        for store, path, order in sorted(files, key=lambda f: f[2]):  # newest v3 file last
            jpath = spark._jvm.org.apache.hadoop.fs.Path("file://" + path)
            stream = jpath.getFileSystem(hadoop).open(jpath)
            try:
                families = reader.readSchemaFile(stream)
            finally:
                stream.close()
            for i in range(families.size()):
                family = families.apply(i)
                variable = family.colFamilyName()  # a transformWithState variable, or Spark's "default"
                label = (store if variable == "default" else variable if store == "default"
                         else f"{store}:{variable}")
                key = family.keySchema()
                found[(int(op), label)] = StoreSchema(int(op), name, label, key.simpleString(),
                                                      family.valueSchema().simpleString(), tuple(key.fieldNames()))
    return list(found.values())


def _operator_name(op_dir: str) -> str:
    """The operator's name in its state metadata: `_metadata/metadata`, or for transformWithState (metadata v2)
    the newest `_metadata/v2/<batch>`; JSON after a version line."""
    folder = os.path.join(op_dir, "_metadata")
    newest = sorted((n for n in os.listdir(os.path.join(folder, "v2")) if n.isdigit()), key=int, reverse=True) \
        if os.path.isdir(os.path.join(folder, "v2")) else []
    for path in [os.path.join(folder, "metadata"), *(os.path.join(folder, "v2", n) for n in newest)]:
        try:
            with open(path) as handle:
                return json.loads(handle.read().splitlines()[1])["operatorInfo"]["operatorName"]
        except (OSError, IndexError, KeyError, ValueError):
            continue
    return "stateful operator"


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


def _join_keys(plan) -> dict[str, str]:
    """Operator id -> `left keys = right keys` of each stream-stream join in a planned query: Spark's join
    state names its key columns field0, field1, ..., so the columns are known from the plan alone."""
    found, pending = {}, [plan]
    while pending:
        node = pending.pop()
        if node.getClass().getSimpleName() == "StreamingSymmetricHashJoinExec":
            sides = [node.leftKeys(), node.rightKeys()]
            left, right = ([_EXPR_ID.sub("", keys.apply(i).toString()) for i in range(keys.size())] for keys in sides)
            found[str(node.stateInfo().get().operatorId())] = f"{', '.join(left)} = {', '.join(right)}"
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return found


def remember_join_keys(layout: Layout, job: str, query_id: str, fit: StateFit) -> None:
    """Keep the join keys of the query a run started (the checkpoint's query id with them): the next check
    compares against them (_changed_joins). Nothing to keep for a query without a stream-stream join."""
    if fit.status == UNDECIDED:
        return  # the query was not planned: what is kept stays
    fs, local = filesystem(layout.join_keys(job))
    if not fit.join_keys:
        if fs.exists(local):
            fs.rm(local)
        return
    fs.makedirs(posixpath.dirname(local), exist_ok=True)
    with fs.open(local, "w") as handle:
        json.dump({"query_id": query_id, "joins": fit.join_keys}, handle)


def _kept_joins(layout: Layout, job: str, query_id: str) -> dict[str, str]:
    """The join keys remember_join_keys kept for this checkpoint's query (none for another checkpoint's: a
    restored or rebuilt one)."""
    fs, path = filesystem(layout.join_keys(job))
    if not fs.exists(path):
        return {}
    with fs.open(path, "r") as handle:
        kept = json.load(handle)
    return kept.get("joins", {}) if kept.get("query_id") == query_id else {}


def _changed_joins(layout: Layout, job: str, query_id: str, joins: dict[str, str], stored: list[StoreSchema]
                   ) -> tuple[str, str] | None:
    names = {str(s.operator_id): s.operator_name for s in stored}
    for op, keys in _kept_joins(layout, job, query_id).items():
        if op in joins and joins[op] != keys:
            return f"operator {op} ({names.get(op, 'join')})", f"join keys ({keys}) -> ({joins[op]})"
    return None


def check_job(spark, spec: JobSpec, layout: Layout) -> StateFit:
    """The check alone (`stateops jobs check`, the `state_compatible` asset check): the job's query built as a
    run builds it, with the settings in force, compared with its checkpoint; no query starts."""
    from stateops.jobs.definition.settings import effective_spec
    from stateops.jobs.runtime.plan import stateful_plan
    from stateops.jobs.runtime.start import ensure_landing, stateful_frame

    spec = effective_spec(spec, layout)
    ensure_landing(spec, layout)
    frame = stateful_frame(spark, spec, layout)
    stateful_plan(frame, spec)
    return check_state(spark, spec, layout, frame)
