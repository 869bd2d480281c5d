"""What Spark makes of a query against a checkpoint's state schemas, read without running it: a query planned by
Spark as the first batch of a restart on a copy of the schema files (stateops.checkpoints.schemas; Spark validates
it there with its own rules, and writes into the copy), the schemas read back with Spark's own reader. stateops.jobs.runtime.compatibility decides with them.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.operators import operator_meta
from stateops.checkpoints.schemas import schema_files

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
    # transformWithState reads operator metadata up to the offset log's end
    Checkpoint(os.path.dirname(state_dir)).write_planned_batch(batch, metadata)
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
    """Every store's schemas in `state_dir` (stateops.checkpoints.schemas finds the files), read with Spark's own
    schema reader; the newest v3 file of a store wins."""
    reader = _module(spark, _STATE + "StateSchemaCompatibilityChecker")
    hadoop = spark._jsc.hadoopConfiguration()
    checkpoint = Checkpoint(os.path.dirname(state_dir))
    found: dict[tuple[int, str], StoreSchema] = {}
    names: dict[int, str] = {}
    for file in schema_files(state_dir):
        if file.operator_id not in names:
            meta = operator_meta(checkpoint, file.operator_id)
            names[file.operator_id] = meta.operator_name if meta else "stateful operator"
        jpath = spark._jvm.org.apache.hadoop.fs.Path("file://" + file.path)
        stream = jpath.getFileSystem(hadoop).open(jpath)
        try:
            families = reader.readSchemaFile(stream)
        finally:
            stream.close()
        for i in range(families.size()):
            family = families.apply(i)
            variable = family.colFamilyName()  # a transformWithState variable, or Spark's "default"
            store = file.store
            label = store if variable == "default" else variable if store == "default" else f"{store}:{variable}"
            key = family.keySchema()
            found[(file.operator_id, label)] = StoreSchema(file.operator_id, names[file.operator_id], label,
                                                           key.simpleString(), family.valueSchema().simpleString(),
                                                           tuple(key.fieldNames()))
    return list(found.values())


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


_SAVES = ("StateStoreSaveExec", "SessionWindowStateStoreSaveExec")


def value_meanings(plan) -> dict[str, list[str]]:
    """Operator id -> what produced each part of its stored value, in the order the state holds them, for the
    operators whose values a same-typed change can silently swap (Spark compares value schemas by position and
    type only): an aggregation's aggregates (`max(value)`, `count(1)`: its buffers follow their order), a join
    side's buffered columns (`left.amount`). Read from a planned query (plan_restart)."""
    found, pending = {}, [plan]
    while pending:
        node = pending.pop()
        name = node.getClass().getSimpleName()
        if name in _SAVES:
            aggregate = _aggregate_below(node)
            if aggregate is not None:
                expressions = aggregate.aggregateExpressions()
                found[str(node.stateInfo().get().operatorId())] = [
                    _EXPR_ID.sub("", expressions.apply(i).aggregateFunction().toString())
                    for i in range(expressions.size())]
        elif name == "StreamingSymmetricHashJoinExec":
            found[str(node.stateInfo().get().operatorId())] = [
                f"{side}.{column}" for side, child in (("left", node.left()), ("right", node.right()))
                for column in _names(child.output())]
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return found


def _aggregate_below(node):
    """The aggregate whose buffers a state save stores: the nearest aggregate node under it."""
    pending = [node.child()]
    while pending:
        current = pending.pop(0)
        if current.getClass().getSimpleName().endswith("AggregateExec"):
            return current
        children = current.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return None


def _names(attributes) -> list[str]:
    return [attributes.apply(i).name() for i in range(attributes.size())]
