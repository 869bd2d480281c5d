"""What reading or rewriting a checkpoint's state through Spark needs: the coordinator first, and the reader
options of each unit the state reader reads (the audit and explain-key enumerate stores the same way). Nothing
here imports pyspark: the core calls it with the session it is handed."""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Iterator

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.operators import describe, files_by_store
from stateops.checkpoints.profile import JOIN, NUM_VALUES_STORE, VALUES_STORES
from stateops.errors import OperationFailed

CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"

ReaderOptions = tuple[tuple[str, str], ...]


def ensure_state_coordinator(spark) -> None:
    """Spark's state reader and its offline repartition report to the StateStoreCoordinator, which exists only
    once the session's StreamingQueryManager does: a fresh session (the CLI, a runbook) fails with
    RpcEndpointNotFoundException without this."""
    spark.streams.active  # noqa: B018 (creates the manager and its coordinator)


@contextlib.contextmanager
def reading_format(spark, checkpoint_format: int) -> Iterator[None]:
    """Read a checkpoint's state (`state-metadata`, `statestore`) with the session's checkpoint format set to the
    checkpoint's own: Spark 4.2's readers follow the session's setting, and a format-2 checkpoint read by a session
    in format 1 (the default) lists no operator at all (measured: tests/spark/test_store_matrix.py). The caller's
    value is put back after."""
    before = spark.conf.get(CHECKPOINT_FORMAT, None)
    spark.conf.set(CHECKPOINT_FORMAT, str(checkpoint_format))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(CHECKPOINT_FORMAT)
        else:
            spark.conf.set(CHECKPOINT_FORMAT, before)


# A stream-stream join's stores per side, by the state format its checkpoint records
# (`spark.sql.streaming.join.stateFormatVersion`): formats 1 and 2 keep four stores of their own, format 3 the same
# four as column families of one store (`default`), format 4 (Spark 4.2: keys carry the event time, eviction
# range-scans a time index) a values store and its time index per side; the index (`tsWithKey`) holds no row of
# its own and is not read.
@dataclass(frozen=True)
class ListedStore:
    """One store of a checkpoint, as a row of Spark's `state-metadata` gives it, or as the store's folders and schema
    files give it where Spark lists none of its operator (a checkpoint written before Spark 4.0: its batch range the
    versions on disk)."""

    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    min_batch_id: int | None
    max_batch_id: int | None
    properties: str | None


def listed_stores(spark, checkpoint: Checkpoint, batch_id: int | None = None) -> tuple[list[ListedStore], list[int]]:
    """Every store Spark's state reader can be asked for, and the operators that hold state neither Spark's
    `state-metadata` nor the files describe (the caller refuses those: never an audit that leaves out state)."""
    reader = spark.read.format("state-metadata")
    rows = (reader.option("batchId", batch_id) if batch_id is not None else reader).load(checkpoint.path).collect()
    found = [ListedStore(r.operatorId, r.operatorName, r.stateStoreName, r.numPartitions, r.minBatchId, r.maxBatchId,
                         getattr(r, "operatorProperties", None)) for r in rows]
    listed = {r.operatorId for r in rows}
    unlisted = [op for op in checkpoint.operator_ids() if op not in listed]
    on_disk = files_by_store(checkpoint) if unlisted else {}
    undescribed = []
    for op in unlisted:
        meta = describe(checkpoint, op)
        if meta is None:
            undescribed.append(op)
            continue
        for store, partitions in meta.stores:
            files = on_disk.get((op, store))
            low, high = (files.min_version, files.max_version) if files else (None, None)
            found.append(ListedStore(op, meta.operator_name, store, partitions,
                                     None if low is None else low - 1, None if high is None else high - 1, None))
    return found, undescribed


JOIN_ROWS, JOIN_COUNTS = VALUES_STORES[0], NUM_VALUES_STORE  # a side's rows and its count per key (formats 1-3)
JOIN_STORES = {3: tuple(f"{side}-{store}" for side in ("left", "right") for store in (JOIN_COUNTS, JOIN_ROWS)),
               4: ("left-keyWithTsToValues", "right-keyWithTsToValues")}


def join_state_format(conf: dict) -> int:
    """The join state format a checkpoint's offset log records in its `conf` (1 when it records none: Spark's
    legacy default)."""
    return int(conf.get("spark.sql.streaming.join.stateFormatVersion", 1))


def join_units(operator_name: str | None, store_name: str, join_format: int | None) -> tuple[str, ...] | None:
    """The stores a join keeps as column families of its one store (formats 3 and 4), None for any other store."""
    if operator_name == JOIN and store_name == "default":
        return JOIN_STORES.get(join_format)
    return None


def readable_units(operator_id: int, store_name: str, properties: str | None, operator_name: str | None = None,
                   join_format: int | None = None) -> list[tuple[str, ReaderOptions]]:
    """(label, `statestore` reader options) for each unit Spark's state reader reads on its own, from one row of
    `state-metadata`: a transformWithState operator's state variables one by one (its timers left out: internal
    state, `$`-named), a join's column families (formats 3 and 4: JOIN_STORES) one by one, any other store whole."""
    base: ReaderOptions = (("operatorId", str(operator_id)),)
    units = join_units(operator_name, store_name, join_format)
    if units:
        return [(name, base + (("storeName", name),)) for name in units]
    try:
        variables = json.loads(properties).get("stateVariables", []) if properties else []
    except (ValueError, AttributeError):
        variables = []
    names = [v["stateName"] for v in variables if isinstance(v, dict) and "stateName" in v
             and "timer" not in str(v.get("stateVariableType", "")).lower() and not v["stateName"].startswith("$")]
    if names:
        return [(name, base + (("stateVarName", name),)) for name in names]
    return [(store_name, base if store_name == "default" else base + (("storeName", store_name),))]


def write_store(spark, checkpoint: str, batch_id: int, store, provider_class: str, version: int,
                state_root: str) -> list[int]:
    """Rewrite one store of `checkpoint` at `batch_id`, as Spark's state reader reads it, under `state_root` (laid
    out as a checkpoint's `state/`) as `provider_class` at `version`, through that provider's StateStore API (the
    runbook's store switch: `store` is a stateops.recovery.store_switch.StoreToWrite, and `partial(write_store,
    spark)` its Writer). The rows written per partition."""
    operator_id, store_name = store.operator_id, store.store_name
    ensure_state_coordinator(spark)
    rows = (spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator_id)
            .option("storeName", store_name).load(checkpoint))
    writer = spark._jvm.io.stateops.state.StoreWriter  # StateOps' jar (jvm/state), on every session's spark.jars
    try:
        return list(writer.write(rows._jdf, state_root, operator_id, store_name, store.prefix_columns,
                                 provider_class, version, store.partitions))
    except Exception as err:  # py4j's error says only which call failed; the JVM's exception says why
        cause = getattr(err, "java_exception", None)
        if cause is None:
            raise
        raise OperationFailed(f"writing operator {operator_id} store {store_name} as "
                              f"{provider_class.rsplit('.', 1)[-1]} failed: {cause.toString()}") from err
