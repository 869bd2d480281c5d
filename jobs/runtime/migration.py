"""The migration's Spark side: the plan (the kept shape of the checkpoint's state against the job's query now,
classified by stateops.migration.classify), and the three things the core's apply (stateops.migration.apply) asks of
Spark: one operator's state rewritten through the store's own API, the new query's schema and metadata files, and
the migrated checkpoint checked against the query (Spark's own planning, as `jobs check`) with its meaning kept.

A key's state partition is Spark's `pmod(murmur3(key columns), partitions)` (HashPartitioning with seed 42, SQL's
`hash`): a rewritten row goes to the partition its new key hashes to. The rule is checked on the old state's own
rows before anything is written (`PLACEMENT`); a checkpoint where it does not hold is refused.
"""
from __future__ import annotations

import importlib
import json
import os
import posixpath
import re
import tempfile
from dataclasses import replace

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.schemas import repoint_schema_paths
from stateops.checkpoints.sparkstate import JOIN_COUNTS, ensure_state_coordinator, join_state_format
from stateops.delta import open_table, table_columns
from stateops.durations import parse_seconds
from stateops.errors import OperationFailed
from stateops.layout import Layout
from stateops.migration.classify import Migration, Position, Rewrite, classify
from stateops.migration.shape import QueryShape
from stateops.recovery.model import RecoveryRefused
from stateops.storage import copies

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.runtime import compatibility, state_schemas

PLACEMENT = "pmod(hash({columns}), {partitions})"


def plan_migration(spark, spec: JobSpec, layout: Layout, transform: str | None = None) -> Migration:
    """The migration from the state the checkpoint holds (as its last StateOps run recorded it) to the job's query
    with the settings in force; `transform`: the user's rule (module:function) for what StateOps cannot derive,
    its output's schema checked against the new query's here. Refused in one line when the record is missing or
    belongs to another query, or the rule's output does not fit."""
    checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
    kept = compatibility.kept_meaning(layout, spec.name, checkpoint.query_id())
    if not kept.get("shapes"):
        raise RecoveryRefused(
            f"{spec.name}: what the state in {checkpoint.path} means was not recorded by a StateOps run of its query "
            "(a checkpoint adopted, or run before StateOps kept it), so no change can be judged by meaning. Fix: run "
            f"the job once with the query that wrote the state (stateops jobs run {spec.name}), then migrate; or "
            f"rebuild (stateops recover run {spec.name} --mode rebuild --confirm {spec.name})")
    spec, frame = compatibility.job_query(spark, spec, layout)
    retyped = _retyped_output(spec, layout, frame)
    if retyped:
        raise RecoveryRefused(retyped)
    fit = compatibility.check_state(spark, spec, layout, frame)
    if fit.status == compatibility.UNDECIDED:
        raise RecoveryRefused(f"{spec.name}: the job's query could not be planned ({fit.message}); nothing was "
                              "changed. Fix: make the query plan (stateops jobs check) and migrate again")
    latest = checkpoint.latest_committed_batch()
    position = Position(latest, checkpoint.next_watermark_ms(latest),
                        _ms(kept.get("watermark_delay") or spec.watermark_delay), _ms(spec.watermark_delay))
    migration = classify(QueryShape.from_list(kept["shapes"]), QueryShape.from_list(fit.shapes), position, transform)
    join_format = join_state_format(checkpoint.batch_metadata(latest).get("conf", {}))
    if any(r.join_key for r in migration.rewrites) and join_format > 2:
        raise RecoveryRefused(f"{spec.name}: its join keeps its state in format {join_format} (column families of one "
                              "store), which StateOps' writer does not rewrite yet (formats 1 and 2: four stores); "
                              f"nothing was changed. Fix: rebuild (stateops recover run {spec.name} --mode rebuild "
                              f"--confirm {spec.name})")
    schemas = {s.operator_id: (s.key, s.value) for s in fit.query if s.store == "default"}
    for rewrite in migration.rewrites:
        if rewrite.transform:
            rows = (spark.read.format("statestore").option("batchId", latest)
                    .option("operatorId", rewrite.source_id).load(checkpoint.path))
            _transformed(rows, rewrite, schemas.get(rewrite.operator_id))
    return migration


def _retyped_output(spec: JobSpec, layout: Layout, frame) -> str | None:
    """Why the job's table cannot take the new query's output (a column it holds, written as another type), in one
    line; None when it can. A column added joins the table at its first write (the sink merges schemas); a column's
    type StateOps does not change, so the first write after the migration would fail."""
    path = spec.sink_path(layout)
    table = open_table(path)
    if table is None:
        return None
    held = {name: kind for name, kind, _ in table_columns(table)}
    for field in frame.schema.fields:
        kind = held.get(field.name)
        if kind is None or _delta_type(kind) == _delta_type(field.dataType.jsonValue()):
            continue
        wanted = field.dataType.simpleString()
        return (f"{spec.name}: the changed query writes column {field.name} as {wanted}, and its table {path} holds it "
                f"as {kind}: StateOps does not change a table column's type, so the first write after the migration "
                f"would fail; nothing was changed. Fix: cast {field.name} back in the query's final select, or write "
                "the new query into a new table (sink_table) with a rebuild")
    return None


def _delta_type(kind):
    """A column type as Delta's schema JSON gives it (Spark's too), without nullability: comparable across both."""
    if isinstance(kind, str):
        try:
            kind = json.loads(kind)
        except ValueError:
            return kind
    if isinstance(kind, dict):
        return {k: _delta_type(v) for k, v in kind.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")}
    if isinstance(kind, list):
        return [_delta_type(v) for v in kind]
    return kind


def _shape_of(struct: str) -> str:
    """A struct type's simpleString without its field names (Spark's state check compares types by position)."""
    return re.sub(r"(?<=[<,])[^:<>,]+:", "", struct)


def _transformed(rows, rewrite: Rewrite, schema: tuple[str, str] | None):
    """The user's rule applied to an operator's old rows: its key and value, checked against the new query's store
    schema (types by position) before anything is written; RecoveryRefused in one line when it cannot be used."""
    name = rewrite.transform
    module, _, attribute = name.partition(":")
    try:
        rule = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as err:
        raise RecoveryRefused(f"--transform {name}: cannot be imported ({err}); nothing was changed. Fix: put the "
                              "module on the Python path (beside the job's own code)") from None
    frame = rule(rows, {"operator_id": rewrite.operator_id, "operator_name": rewrite.operator_name,
                        "store": rewrite.store})
    where = f"--transform {name} for operator {rewrite.operator_id} ({rewrite.operator_name})"
    if frame is None or not {"key", "value"} <= set(frame.columns):
        raise RecoveryRefused(f"{where} returned {'nothing' if frame is None else frame.columns}: it must return the "
                              "new state's `key` and `value` columns; nothing was changed")
    frame = frame.select("key", "value")
    for part, wanted in zip(("key", "value"), schema or ()):
        got = frame.schema[part].dataType.simpleString()
        if _shape_of(got) != _shape_of(wanted):
            raise RecoveryRefused(f"{where}: its {part} is {got}, the new query's state holds {wanted} (types by "
                                  "position); nothing was changed")
    return frame


def _ms(delay: str | None) -> int:
    return int((parse_seconds(delay) or 0) * 1000) if delay else 0


def _struct(fields: list[tuple[str, str]]) -> str:
    return "struct<" + ",".join(f"`{name}`:{kind}" for name, kind in fields) + ">"


def _placed(rows, rewrite: Rewrite) -> str:
    """The key columns Spark partitions the rows by: the rewrite's `placement` leading fields (negative: all but
    that many last ones), else all."""
    names = rows.schema["key"].dataType.fieldNames()
    chosen = names if rewrite.placement is None else names[:rewrite.placement]
    return ", ".join(f"key.`{n}`" for n in chosen)


def _new_state(spark, rows, rewrite: Rewrite, partitions: int, schema: tuple[str, str] | None = None,
               flagged: bool = False):
    """The old rows (the state reader's key, value, partition_id) as the new query's: keys and values by the
    rewrite's parts (none: as they are), merged per new key when old keys meet, a join side's rows re-keyed
    (`flagged`: each carries its matched flag last), placed by Spark's partitioning."""
    from pyspark.sql import functions as F

    if rewrite.transform:
        rows = _transformed(rows, rewrite, schema)  # checked again as it is written
    if rewrite.join_key:
        rows = _rejoined(rows, rewrite, flagged)
    if rewrite.transform or rewrite.join_key or not rewrite.keys and not rewrite.values:
        placed = rows.select("key", "value").withColumn(
            "partition_id", F.expr(PLACEMENT.format(columns=_placed(rows, rewrite), partitions=partitions)))
        return placed.repartitionById(partitions, "partition_id")

    old_values = rows.schema["value"].dataType.fields
    positional = _struct([(f"v{i}", f.dataType.simpleString()) for i, f in enumerate(old_values)])
    keys = []
    for part in rewrite.keys:
        column = F.col("key").getField(part.source)
        if part.window_factor > 1:  # the old window's length from its own bounds, the new one a multiple of it
            start, end = (F.unix_micros(column.getField(b)) for b in ("start", "end"))
            length = (end - start) * part.window_factor
            first = start - F.pmod(start, length)
            column = F.struct(F.timestamp_micros(first).alias("start"),
                              F.timestamp_micros(first + length).alias("end"))
        keys.append(column.cast(part.type).alias(part.name))
    values = [(F.col("v").getField(f"v{p.source}") if p.source is not None else F.expr(p.initial)).cast(p.type)
              .alias(f"f{i}") for i, p in enumerate(rewrite.values)]
    frame = rows.select(F.struct(*keys).alias("key"), F.col("value").cast(positional).alias("v"))
    frame = frame.select("key", F.struct(*values).alias("value"))
    if rewrite.regroup:
        merged = [getattr(F, p.merge)(F.col("value").getField(f"f{i}")).cast(p.type).alias(f"f{i}")
                  for i, p in enumerate(rewrite.values)]
        frame = frame.groupBy("key").agg(*merged).select("key", F.struct(*[f"f{i}" for i in range(len(merged))])
                                                         .alias("value"))
    columns = ", ".join(f"key.`{p.name}`" for p in rewrite.keys)
    placed = frame.withColumn("partition_id", F.expr(PLACEMENT.format(columns=columns, partitions=partitions)))
    return placed.repartitionById(partitions, "partition_id")


def _rejoined(rows, rewrite: Rewrite, flagged: bool):
    """A join side's rows (its keyWithIndexToValue store: key (join key, index), value (the row, its matched flag
    when `flagged`)) re-keyed by the buffered fields `rewrite.join_key`, each value cast to the new query's types:
    as the side's rows (indices 0.. per new key, in the old keys' order) or, for its keyToNumValues store, their
    count per new key."""
    from pyspark.sql import Window, functions as F

    old = rows.schema["value"].dataType.fields
    cast = [F.col("value").getField(old[p.source].name).cast(p.type).alias(old[p.source].name)
            for p in rewrite.values]
    flag = [F.col("value").getField(old[-1].name)] if flagged else []
    frame = rows.select(F.col("key").alias("old_key"), F.struct(*cast, *flag).alias("value"))
    key = [F.col("value").getField(name).alias(f"field{i}") for i, name in enumerate(rewrite.join_key)]
    frame = frame.withColumn("key", F.struct(*key))
    if rewrite.store.endswith(JOIN_COUNTS):
        return frame.groupBy("key").agg(F.struct(F.count(F.lit(1)).alias("value")).alias("value"))
    index = F.row_number().over(Window.partitionBy("key").orderBy("old_key")) - 1
    fields = [F.col("key").getField(f"field{i}").alias(f"field{i}") for i in range(len(rewrite.join_key))]
    return frame.select(F.struct(*fields, index.cast("bigint").alias("index")).alias("key"), "value")


def _check_placement(rows, partitions: int, rewrite: Rewrite) -> None:
    """Spark's placement of the old state's own keys, as PLACEMENT computes it: every row where the rule says."""
    from pyspark.sql import functions as F

    operator_id, columns = rewrite.source_id, _placed(rows, rewrite)
    wrong = rows.where(F.col("partition_id") != F.expr(PLACEMENT.format(columns=columns, partitions=partitions)))
    if wrong.limit(1).count():
        raise OperationFailed(f"operator {operator_id}: its state's keys are not where {PLACEMENT} puts them, so "
                              "a rewritten key could not be placed where Spark looks for it; nothing was written")


def rewrite_state(spark, checkpoint: str, batch: int, rewrite: Rewrite, provider_class: str, version: int,
                  state_root: str, partitions: int, empty_schema: tuple[str, str] | None = None) -> list[int]:
    """Write operator `rewrite.operator_id`'s new state under `state_root` as `provider_class` at `version`: the
    old operator's rows at `batch` rewritten (stateops.migration.apply.StateWriter), or an empty store for an
    added operator; `empty_schema`: the new store's (key, value) as Spark plans it. The rows written per partition."""
    ensure_state_coordinator(spark)
    if rewrite.how == "empty":
        key, value = empty_schema
        frame = spark.createDataFrame([], f"key {key}, value {value}, partition_id int")
    else:
        store = rewrite.read_store
        reader = spark.read.format("statestore").option("batchId", batch).option("operatorId", rewrite.source_id)
        rows = (reader if store == "default" else reader.option("storeName", store)).load(checkpoint)
        opened = Checkpoint.open(checkpoint)
        _check_placement(rows, opened.shuffle_partitions(batch) or partitions,
                         replace(rewrite, placement=-1) if rewrite.join_key else rewrite)
        flagged = bool(rewrite.join_key) and join_state_format(opened.batch_metadata(batch).get("conf", {})) >= 2
        frame = _new_state(spark, rows, rewrite, partitions, empty_schema, flagged)
    writer = spark._jvm.io.stateops.state.StoreWriter  # StateOps' jar (jvm/state), on every session's spark.jars
    try:
        return list(writer.write(frame._jdf, state_root, rewrite.operator_id, rewrite.store, rewrite.prefix_columns,
                                 provider_class, version, partitions))
    except Exception as err:  # py4j's error says only which call failed; the JVM's exception says why
        cause = getattr(err, "java_exception", None)
        if cause is None:
            raise
        raise OperationFailed(f"writing operator {rewrite.operator_id}'s migrated state failed: "
                              f"{cause.toString()}") from err


def planned_state_files(spark, spec: JobSpec, layout: Layout, checkpoint: str, state_root: str) -> dict:
    """The schema and operator metadata files Spark writes when it plans the job's query on an empty state with the
    checkpoint's confs, copied under `state_root`; the (key, value) schema of each operator's default store."""
    opened = Checkpoint.open(checkpoint)
    spec, frame = compatibility.job_query(spark, spec, layout)
    metadata = json.dumps(opened.batch_metadata(opened.offset_batches()[-1]))
    with tempfile.TemporaryDirectory(prefix="stateops-migrate-") as scratch:
        state_dir = Checkpoint(os.path.join(scratch, "query")).state_root
        state_schemas.plan_restart(spark, frame, spec, opened.query_id(), state_dir, metadata, 0)
        schemas = {s.operator_id: (s.key, s.value) for s in state_schemas.read_schemas(spark, state_dir)
                   if s.store == "default"}
        for folder, _, names in os.walk(state_dir):
            for name in names:
                path = os.path.join(folder, name)
                copies.copy_file(path, posixpath.join(state_root, os.path.relpath(path, state_dir)))
        repoint_schema_paths(state_root, state_dir, opened.state_root)  # where the swap puts them
    return schemas


def adopt(spark, spec: JobSpec, layout: Layout) -> dict:
    """The migrated checkpoint checked against the job's query as its restart will be (Spark's own planning, the key
    columns by name): it must fit; its meaning is then kept for the next checks. The check's JSON. (A rollback puts
    the old record back with the archive.)"""
    spec, frame = compatibility.job_query(spark, spec, layout)
    fit = compatibility.check_state(spark, spec, layout, frame, migrated=True)
    if fit.status != compatibility.COMPATIBLE:
        raise OperationFailed(f"the migrated state does not fit the query: {fit.line}")
    query_id = Checkpoint.open(spec.checkpoint_path(layout)).query_id()
    compatibility.remember_meaning(layout, spec.name, query_id, fit, spec.watermark_delay)
    return fit.to_json()
