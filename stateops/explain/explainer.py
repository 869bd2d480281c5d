"""explain_key: gather the evidence about a key at a batch (Spark), then judge it (pure rules)."""
from __future__ import annotations

from stateops import progress
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.explain import batches, evidence
from stateops.explain.model import Evidence, ExplainError, ExplainTarget, KeyExplanation
from stateops.explain.verdict import judge
from stateops.checkpoints.sparkstate import ensure_state_coordinator, reading_format
from stateops.timefmt import iso_millis


def resolve_batch(checkpoint: Checkpoint, batch_id: int | None) -> int:
    """The committed batch to explain at (default: the latest); a clear error for any other value."""
    committed = checkpoint.committed_batches()
    if not committed:
        checkpoint.latest_committed_batch()  # raises NotACheckpointError with the message
    if batch_id is None:
        return committed[-1]
    if batch_id < 0 or batch_id not in set(committed):
        raise ExplainError(f"batch {batch_id} is not a committed batch of {checkpoint.path} "
                           f"(committed: {committed[0]}..{committed[-1]})")
    return batch_id


def gather(spark, target: ExplainTarget, checkpoint: Checkpoint, key: str, batch: int) -> Evidence:
    """Everything the checkpoint, the progress table, the input and the output say about `key` at `batch` (its
    state read in the checkpoint's own format: stateops.checkpoints.sparkstate.reading_format)."""
    ensure_state_coordinator(spark)
    with reading_format(spark, checkpoint.checkpoint_format(batch)):
        return _gather(spark, target, checkpoint, key, batch)


def _gather(spark, target: ExplainTarget, checkpoint: Checkpoint, key: str, batch: int) -> Evidence:
    stores = evidence.stores(spark, target.checkpoint, batch)
    if not stores:
        raise ExplainError(f"{target.checkpoint}: no stateful operator in the state metadata at batch {batch}")
    retained = max(s.min_batch_id for s in stores)
    if batch < retained:
        raise ExplainError(f"batch {batch}: state no longer retained (state readable for batches "
                           f"{retained}..{max(s.max_batch_id for s in stores)})")
    if target.kind == "join" and not any(s.operator_name in evidence.JOIN_OPERATORS for s in stores):
        raise ExplainError(f"{target.checkpoint}: job {target.job} is explained as a join, but its state has no "
                           f"join operator ({', '.join(sorted({s.operator_name for s in stores}))})")
    readable = stores
    if target.kind == "join":  # the rows (with the matched flag) live in keyWithIndexToValue; counts add nothing
        readable = [s for s in stores if not s.store_name.endswith("keyToNumValues")] or stores
    in_state = evidence.read_state(spark, target.checkpoint, readable, key, batch)
    start = max(0, min(s.min_batch_id for s in stores))
    history, feed = evidence.read_changes(spark, target.checkpoint, readable, key, start, batch)
    output = evidence.output_rows(target, key, batch, checkpoint.latest_committed_batch())
    recorded = progress.query_batches(target.progress_table, checkpoint.query_id()) if target.progress_table else []
    log = batches.load(checkpoint, recorded)
    inputs_read = not output and any(inp.key_column for inp in target.inputs)
    inputs, dead = (evidence.read_inputs(spark, checkpoint, log, recorded, target.inputs, key, batch) if inputs_read
                    else ([], 0))
    return Evidence(kind=target.kind, key=key, batch_id=batch, watermarks=log.watermarks, in_state=in_state,
                    history=history, inputs=inputs, output=output, feed=feed, join=target.join,
                    output_table=target.output_table, late_margin_seconds=target.late_margin_seconds,
                    run_starts=log.run_starts, inputs_read=inputs_read, dead_letters=dead)


def explain_key(spark, target: ExplainTarget, key: str, batch_id: int | None = None) -> KeyExplanation:
    """Explain why `key` is (or is not) in the state of `target` at `batch_id` (default latest committed)."""
    if not key:
        raise ExplainError("key: empty; pass the key value, e.g. --key o000042")
    checkpoint = Checkpoint.open(target.checkpoint)
    batch = resolve_batch(checkpoint, batch_id)
    found = gather(spark, target, checkpoint, key, batch)
    reason, text = judge(found)
    state_rows = [{"operator_id": r["operator_id"], "store_name": r["store_name"],
                   "partition_id": r["partition_id"], "value": r["value"], "key": r["key"],
                   "operator_name": r["operator_name"]} for r in found.in_state]
    return KeyExplanation(
        job=target.job, key=key, batch_id=batch, watermark=iso_millis(checkpoint.watermark(batch)),
        in_state=state_rows, reason=reason, explanation=text, checkpoint=target.checkpoint,
        history=found.history, inputs=found.inputs, output_rows=found.output or [], change_feed=found.feed,
    )

