"""What Spark keeps of a stateful query's state schemas, and what it makes of a query, read without running it:
the schema and metadata files of a checkpoint copied to a scratch folder, a query planned by Spark as the first
batch of a restart on such a copy (Spark validates it there with its own rules, and writes into the copy), the
schemas read back with Spark's own reader. stateops.jobs.runtime.compatibility decides with them.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass

from stateops.storage import filesystem

from stateops.jobs.definition.spec import JobSpec

_RUNTIME = "org.apache.spark.sql.execution.streaming.runtime."
_CHECKPOINTING = "org.apache.spark.sql.execution.streaming.checkpointing."
_STATE = "org.apache.spark.sql.execution.streaming.state."
_EXPR_ID = re.compile(r"#\d+L?")


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


def copy_schema_files(checkpoint: str, target: str) -> None:
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


def plan_restart(spark, frame, spec: JobSpec, query_id: str, state_dir: str, metadata: str | None, batch: int):
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


def read_schemas(spark, state_dir: str) -> list[StoreSchema]:
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


def join_keys(plan) -> dict[str, str]:
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
