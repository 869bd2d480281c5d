"""A repartition through the migration's writer, where Spark's offline repartition does not serve: Spark 4.2's
reads RocksDB state only (STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER on the in-memory store), and on
a stream-stream join in state format 4 it writes state its own reader cannot read. The same rows, every operator and
store, re-placed by Spark's partitioning into the new number of partitions at the same version (the migration's
apply: scratch, swap), the old schema and metadata files kept, and the new count recorded where the restart reads
it (the offsets of the latest batch and any later one). No input is read.
"""
from __future__ import annotations

import posixpath

from stateops.checkpoints import state_store
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.operators import operator_meta
from stateops.checkpoints.profile import JOIN, kind_of
from stateops.checkpoints.sparkstate import JOIN_ROWS
from stateops.migration.apply import StateFiles, schema_file
from stateops.migration.classify import Migration, Position, Rewrite
from stateops.storage import copies, files_under

PARTITIONS = "spark.sql.shuffle.partitions"


def writer_repartition(checkpoint: str) -> bool:
    """Whether the runbook repartitions this checkpoint with the writer (Spark's own does not serve it)."""
    found = state_store.of_checkpoint(checkpoint)
    return bool(found) and found[0].store == state_store.MEMORY


def refusal(checkpoint: str) -> str | None:
    """Why the writer cannot repartition the checkpoint, in one clause; None when it can."""
    opened = Checkpoint(checkpoint)
    for op in opened.operator_ids():
        meta = operator_meta(opened, op)
        if meta is None:
            return (f"operator {op} has no state metadata (a checkpoint written before Spark 4): the writer reads "
                    "each store's layout from it")
        if kind_of(meta.operator_name) in ("tws", "unknown"):
            return f"operator {op} ({meta.operator_name}) keeps state the writer does not re-place"
    return None


def plan(checkpoint: str, partitions: int) -> Migration:
    """Every store of every operator rewritten as it is into `partitions` partitions."""
    opened = Checkpoint.open(checkpoint)
    batch = opened.latest_committed_batch()
    rewrites = []
    for op in opened.operator_ids():
        meta = operator_meta(opened, op)
        for store, _ in meta.stores:
            prefix = meta.prefix_columns.get(store, 0)
            placement = prefix or None
            if meta.operator_name == JOIN and store.split("-", 1)[-1] == JOIN_ROWS:
                placement = -1  # a side's rows: keyed by the join key and an index Spark does not hash
            rewrites.append(Rewrite(op, meta.operator_name, "rewrite", op, store=store, placement=placement,
                                    prefix_columns=prefix))
    return Migration((), tuple(rewrites), Position(batch, opened.next_watermark_ms(batch), 0))


def kept_schema_files(checkpoint: str) -> StateFiles:
    """The checkpoint's own schema and operator metadata files copied into the scratch (a repartition keeps the
    schema); the writer's stores need no schema from them."""
    state = Checkpoint(checkpoint).state_root

    def copy(scratch: str) -> dict:
        for rel in sorted(files_under(state) or ()):
            if schema_file(rel):
                copies.copy_file(posixpath.join(state, rel), posixpath.join(scratch, rel))
        return {}
    return copy


def recorded(checkpoint: str, batch: int, partitions: int) -> bool:
    opened = Checkpoint(checkpoint)
    return all(opened.shuffle_partitions(b) == partitions for b in opened.offset_batches() if b >= batch)


def record(checkpoint: str, batch: int, partitions: int) -> list[int]:
    """The new partition count in the offsets of `batch` and any later one; the batches rewritten."""
    opened = Checkpoint(checkpoint)
    rewritten = []
    for b in opened.offset_batches():
        if b < batch or opened.shuffle_partitions(b) == partitions:
            continue
        metadata = opened.batch_metadata(b)
        metadata.setdefault("conf", {})[PARTITIONS] = str(partitions)
        opened.write_batch_metadata(b, metadata)
        rewritten.append(b)
    return rewritten
