"""Evidence about one key at one batch, gathered with Spark's State Reader API, the input and the output.

- `state-metadata`: the operators and stores of the checkpoint, and the batches still retained;
- `statestore` at `batchId=N`: the key's rows per operator, store and partition (join stores are read by
  `storeName`, so the join's `matched` flag is visible);
- `statestore` with `readChangeFeed` from the first retained batch to N: when the key entered state, was
  matched, was deleted. This needs a provider that keeps per-batch changes: RocksDB with changelog
  checkpointing (the project default) or the HDFS provider;
- the input rows of the key that the query read: the file source's log (`sources/<i>/`) names every file
  with its source batch, and the batch log (`batches.py`) says which micro-batch read it and the watermarks;
  a Kafka source's records are read by offset range (`kafka_input.py`);
- the output Delta table (delta-rs), as of the Delta version written by batch N when the writer's
  transaction app id is known.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable
from urllib.parse import unquote

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import first_line
from stateops.explain import kafka_input
from stateops.explain.batches import BatchLog
from stateops.explain.model import ExplainError, ExplainTarget, InputSource
from stateops.jsonvalues import jsonable
from stateops.checkpoints.sparkstate import join_state_format, listed_stores, readable_units

JOIN_OPERATORS = ("symmetricHashJoin",)



# The reader's columns around a row's value: a transformWithState list state's value is `list_element`, a map
# state's `user_map_key` and `user_map_value` (Spark 4.2's flattened collections), every other store's `value`.
_NOT_VALUE = ("key", "partition_id", "batch_id", "change_type")


def _value(row) -> Any:
    """The row's value as JSON values: `value`, or a collection state's columns by name."""
    if "value" in row.__fields__:
        return jsonable(row["value"])
    return {name: jsonable(row[name]) for name in row.__fields__ if name not in _NOT_VALUE} or None


def _leaf_columns(data_type, prefix: str) -> list[tuple[str, str]]:
    """(column path, leaf name) of every non-struct field under a struct type."""
    from pyspark.sql.types import StructType

    out = []
    for f in data_type.fields:
        path = f"{prefix}.`{f.name}`"
        if isinstance(f.dataType, StructType):
            out.extend(_leaf_columns(f.dataType, path))
        else:
            out.append((path, f.name))
    return out


def _key_filter(df, key: str):
    """Rows whose state key has a field equal to `key` (or `field=value` to pick the field)."""
    from pyspark.sql import functions as F

    leaves = _leaf_columns(df.schema["key"].dataType, "key")
    value, names = key, None
    if "=" in key:
        name, _, rest = key.partition("=")
        if name in {leaf for _, leaf in leaves}:
            value, names = rest, {name}
    conditions = [F.col(path).cast("string") == F.lit(value) for path, leaf in leaves
                  if names is None or leaf in names]
    if not conditions:
        return df.limit(0)
    condition = conditions[0]
    for extra in conditions[1:]:
        condition = condition | extra
    return df.where(condition)


def _spark_error(err: Exception) -> str:
    return first_line(err)[:400]


@dataclass(frozen=True)
class Store:
    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    min_batch_id: int
    max_batch_id: int
    properties: str | None
    join_format: int | None = None  # a join's state format, as its checkpoint records it


def stores(spark, checkpoint: str, batch_id: int) -> list[Store]:
    try:
        listed, undescribed = listed_stores(spark, Checkpoint(checkpoint), batch_id)
    except Exception as err:  # noqa: BLE001 - Spark raises Py4J/Analysis errors; report them as one line
        raise ExplainError(f"{checkpoint}: cannot read state metadata at batch {batch_id}: "
                           f"{_spark_error(err)}") from None
    if undescribed:
        raise ExplainError(f"{checkpoint}: operator(s) {undescribed} hold state that neither Spark's state-metadata "
                           "nor their schema files describe: explain-key cannot say what their state holds. Fix: run "
                           "the query once more so Spark writes their operator metadata")
    join_format = join_state_format(Checkpoint(checkpoint).batch_metadata(batch_id).get("conf", {}))
    return [Store(r.operator_id, r.operator_name, r.store_name, r.num_partitions, r.min_batch_id, r.max_batch_id,
                  r.properties, join_format) for r in listed]


def _readers(spark, checkpoint: str, store: Store) -> list[tuple[str, Any]]:
    """(label, reader) per readable unit of a store: one per transformWithState variable, else one."""
    readers = []
    for label, options in readable_units(store.operator_id, store.store_name, store.properties, store.operator_name,
                                         store.join_format):
        reader = spark.read.format("statestore").option("path", checkpoint)
        for name, value in options:
            reader = reader.option(name, value)
        readers.append((label, reader))
    return readers


def read_state(spark, checkpoint: str, found_in: list[Store], key: str, batch_id: int) -> list[dict]:
    found = []
    for store in found_in:
        for label, reader in _readers(spark, checkpoint, store):
            try:
                rows = _key_filter(reader.option("batchId", batch_id).load(), key).collect()
            except Exception as err:  # noqa: BLE001
                raise ExplainError(f"cannot read state of operator {store.operator_id} store {label} at batch "
                                   f"{batch_id}: {_spark_error(err)}") from None
            for row in rows:
                value = _value(row)
                found.append({"operator_id": store.operator_id, "operator_name": store.operator_name,
                              "store_name": label, "partition_id": row["partition_id"],
                              "key": jsonable(row["key"]), "value": value})
    return found


def read_changes(spark, checkpoint: str, found_in: list[Store], key: str, start: int, end: int
                 ) -> tuple[list[dict], dict]:
    """The key's change feed per store from `start` to `end`, and a note on what was covered."""
    info: dict[str, Any] = {"start_batch_id": start, "end_batch_id": end}
    if end < start:
        info["error"] = f"no retained changes up to batch {end} (first retained batch {start})"
        return [], info
    events = []
    for store in found_in:
        for label, reader in _readers(spark, checkpoint, store):
            try:
                df = (reader.option("readChangeFeed", True).option("changeStartBatchId", start)
                      .option("changeEndBatchId", end).load())
                rows = _key_filter(df, key).collect()
            except Exception as err:  # noqa: BLE001
                info["error"] = (f"change feed unavailable for operator {store.operator_id} store {label} "
                                 f"(needs RocksDB changelog checkpointing or the HDFS provider, and batch "
                                 f"{start} still retained): {_spark_error(err)}")
                return [], info
            for row in rows:
                events.append({"operator_id": store.operator_id, "store_name": label,
                               "batch_id": row["batch_id"], "change_type": row["change_type"],
                               "partition_id": row["partition_id"], "key": jsonable(row["key"]),
                               "value": _value(row)})
    events.sort(key=lambda e: (e["batch_id"], e["store_name"], e["change_type"] not in ("update", "append")))
    return events, info


def _norm_path(path: str) -> str:
    """A path or URI as comparable text: file:///a/b, file:/a/b and /a/b alike."""
    return unquote(re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:", "", path)).strip("/")


def _input_files(logs: dict[int, list[tuple[str, int]]], log: BatchLog, inp: InputSource, batch_id: int
                 ) -> dict[str, tuple[int, int, int | None]]:
    """Files of one input read up to micro-batch `batch_id`: path -> (source index, source batch, micro-batch
    or None when no longer known)."""
    root = _norm_path(inp.path)
    files: dict[str, tuple[int, int, int | None]] = {}
    for index, logged in logs.items():
        last = log.end_offset(batch_id, index)
        for path, source_batch in logged:
            if not _norm_path(path).startswith(root + "/") or (last is not None and source_batch > last):
                continue
            micro = log.micro_batch_of(index, source_batch)
            if micro is None or micro <= batch_id:
                files[path] = (index, source_batch, micro)
    return files


def _dead_letter(values: dict, inp: InputSource, arrival: datetime | None) -> bool:
    """What the job's query writes to its dead letters (jobs/runtime/sources.py): a field missing or unparsable, or a
    time more than the future tolerance ahead of the record's arrival (file modification or Kafka timestamp)."""
    if any(v is None for v in values.values()):
        return True
    moment = values.get(inp.time_column)
    return bool(inp.future_tolerance_seconds and arrival is not None and isinstance(moment, datetime)
                and moment > arrival + timedelta(seconds=inp.future_tolerance_seconds))


def _file_records(spark, logs: dict[int, list[tuple[str, int]]], log: BatchLog, inp: InputSource, key: str,
                  batch_id: int) -> list[tuple[Any, Any, dict[str, Any]]]:
    """(parsed row, arrival, where the query read it) for the key's lines in the files read up to `batch_id`;
    `logs`: the checkpoint's file-source logs (Checkpoint.source_files)."""
    from pyspark.sql import functions as F

    from stateops.lineparse import parse_rows

    files = _input_files(logs, log, inp, batch_id)
    if not files:
        return []
    by_path = {_norm_path(p): where for p, where in files.items()}
    try:
        rows = (spark.read.text(sorted(files)).select(
            F.col("_metadata.file_path").alias("file"),
            F.col("_metadata.file_modification_time").alias("arrival"),
            F.explode(parse_rows(spark, F.col("value"), inp.schema)).alias("row"))
            .where(F.col(f"row.`{inp.key_column}`").cast("string") == F.lit(key))
            .collect())
    except Exception:  # noqa: BLE001 - input files may be gone (retention); state evidence remains
        return []
    out = []
    for row in rows:
        where = by_path.get(_norm_path(row["file"]))
        if where is not None:
            _, source_batch, micro = where
            out.append((row["row"], row["arrival"], {"batch_id": micro, "source_batch_id": source_batch}))
    return out


def _kafka_records(spark, kafka: kafka_input.KafkaBatches, inp: InputSource, key: str, batch_id: int
                   ) -> list[tuple[Any, Any, dict[str, Any]]]:
    """(parsed row, arrival, where the query read it) for the key's records of the topic up to `batch_id`."""
    return [(r["row"], r["arrival"], {"batch_id": kafka.micro_batch_of(inp.topic, r["partition"], r["offset"]),
                                      "source_batch_id": None, "partition": int(r["partition"]),
                                      "offset": r["offset"]})
            for r in kafka_input.read_records(spark, inp, kafka, key, batch_id)]


def read_inputs(spark, checkpoint: Checkpoint, log: BatchLog, progress_rows: list[dict[str, Any]],
                inputs: Iterable[InputSource], key: str, batch_id: int) -> tuple[list[dict], int]:
    """Rows of the key that the stateful query saw in its inputs (files or Kafka topics), up to micro-batch
    `batch_id`, and the number of the key's records that went to the dead-letter table instead."""
    found, dead, kafka, logs = [], 0, None, None
    for inp in inputs:
        if not inp.key_column:
            continue
        if inp.kafka is not None:
            kafka = kafka or kafka_input.load(checkpoint, progress_rows)
            read = _kafka_records(spark, kafka, inp, key, batch_id)
        else:
            logs = checkpoint.source_files() if logs is None else logs
            read = _file_records(spark, logs, log, inp, key, batch_id)
        for parsed, arrival, where in read:
            if parsed is None:
                continue
            values = parsed.asDict()
            if _dead_letter(values, inp, arrival):
                dead += 1
                continue
            found.append({"input": inp.name, **where, "event_time": jsonable(values.get(inp.time_column)),
                          "row": jsonable(values)})
    found.sort(key=lambda r: (r["batch_id"] is None, r["batch_id"] or 0, r["source_batch_id"] or 0,
                              r.get("partition", 0), r.get("offset", 0), r["input"]))
    return found, dead


def output_rows(target: ExplainTarget, key: str, batch_id: int, latest: int) -> list[dict] | None:
    """The key's rows in the output table as of batch_id; None when that cannot be determined."""
    if not target.output_table or not target.output_key_columns:
        return None
    from stateops.delta import open_table  # deltalake: only when an output is read (the CLI's start stays light)

    table = open_table(target.output_table)
    if table is None:
        return [] if batch_id == latest else None
    if batch_id != latest:
        if not target.output_app_id:
            return None
        version = _version_for_batch(target.output_table, target.output_app_id, batch_id, table.version())
        if version is None:
            return []
        table = open_table(target.output_table, version)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from stateops.delta import dataset, scan

    schema = dataset(table).schema
    rows: list[dict] = []
    for column in target.output_key_columns:
        if column not in schema.names:
            continue
        data = None
        if pa.types.is_string(schema.field(column).type):
            try:
                data = scan(table, filters=ds.field(column) == key)  # pushed down to file statistics
            except pa.ArrowNotImplementedError:
                # A file whose column delta-rs wrote as string_view (seen with a MERGE-written table on S3): Arrow
                # has no string == string_view kernel for the pushed-down filter; compare after a cast instead.
                data = None
        if data is None:
            data = scan(table)
            data = data.filter(pc.equal(pc.cast(data[column], pa.string()), key))
        rows.extend(jsonable(record) for record in data.to_pylist())
    return rows


def _version_for_batch(uri: str, app_id: str, batch_id: int, latest_version: int) -> int | None:
    """The last Delta version whose recorded transaction for app_id is <= batch_id (versions are monotonic)."""
    from stateops.delta import open_table

    def txn(version: int) -> int:
        value = open_table(uri, version).transaction_version(app_id)
        return -1 if value is None else int(value)

    low, high, best = 0, latest_version, None
    while low <= high:
        middle = (low + high) // 2
        if txn(middle) <= batch_id:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best
