"""Which micro-batch read which file-source batch, and each micro-batch's watermark, as far as still known.

Spark keeps offsets/<batch> (the batch's watermark and each source's end offset) for the last 100 batches
only (minBatchesToRetain). The file source's own log (`sources/<i>/`, with its `.compact` files) keeps every
file with its *source* batch id, which is not the micro-batch id (a batch that reads no new file adds no
source batch). The progress ops table records every micro-batch's watermark and source offsets for good.
A `BatchLog` joins the two, JVM-free: the retained offsets first (the checkpoint is the truth), the progress
table for older batches; what neither knows stays None, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.explain.times import to_ms


@dataclass(frozen=True)
class BatchRecord:
    """One micro-batch as one source of truth knows it. Offsets are file-source logOffsets per source
    index (None: not a file source, or nothing read yet); starts are exclusive, ends inclusive."""

    batch_id: int
    watermark_ms: int | None
    ends: tuple[int | None, ...] = ()
    starts: tuple[int | None, ...] | None = None  # None: unknown (offsets/ only has ends)
    run_id: str | None = None


def _log_offset(offset: Any) -> int | None:
    if isinstance(offset, dict) and isinstance(offset.get("logOffset"), int):
        return offset["logOffset"]
    return None


class BatchLog:
    """Micro-batch facts merged from the retained offsets and the progress table."""

    def __init__(self, offsets: Iterable[BatchRecord] = (), recorded: Iterable[BatchRecord] = ()):
        retained = {r.batch_id: r for r in offsets}
        durable: dict[int, BatchRecord] = {}
        for record in recorded:  # oldest first: a re-executed batch's last attempt wins
            durable[record.batch_id] = record
        self.watermarks: dict[int, int] = {}
        self._ends: dict[int, tuple[int | None, ...]] = {}
        self._starts: dict[int, tuple[int | None, ...]] = {}
        runs: dict[int, str] = {}
        for batch in sorted(set(retained) | set(durable)):
            mine, kept = retained.get(batch), durable.get(batch)
            first = mine if mine is not None and mine.watermark_ms is not None else kept
            if first is not None and first.watermark_ms is not None:
                self.watermarks[batch] = first.watermark_ms
            ends = mine.ends if mine is not None and mine.ends else (kept.ends if kept is not None else ())
            if ends:
                self._ends[batch] = ends
            if kept is not None and kept.starts is not None:
                self._starts[batch] = kept.starts
            if kept is not None and kept.run_id:
                runs[batch] = kept.run_id
        self.run_starts = frozenset(b for b, run in runs.items() if b - 1 in runs and runs[b - 1] != run)
        self._order = sorted(self._ends)

    def watermark_ms(self, batch: int) -> int | None:
        """batchWatermarkMs of a batch; 0 before the first batch; None when no longer known."""
        return 0 if batch < 0 else self.watermarks.get(batch)

    def end_offset(self, batch: int, index: int) -> int | None:
        ends = self._ends.get(batch, ())
        return ends[index] if index < len(ends) else None

    def _start_offset(self, batch: int, index: int) -> int | None:
        starts = self._starts.get(batch)
        if starts is not None:
            if index < len(starts) and starts[index] is not None:
                return starts[index]
            if batch == 0:
                return -1
        if batch == 0:
            return -1
        return self.end_offset(batch - 1, index)

    def micro_batch_of(self, index: int, source_batch: int) -> int | None:
        """The micro-batch that read `source_batch` of source `index`, or None when no longer known."""
        for batch in self._order:
            end = self.end_offset(batch, index)
            if end is None or end < source_batch:
                continue
            start = self._start_offset(batch, index)
            if start is not None and start < source_batch:
                return batch
            return None  # the first batch that reached it: did it read it, or an earlier one? unknown
        return None


def offset_records(checkpoint: Checkpoint) -> list[BatchRecord]:
    """The batches still in offsets/: watermark and each source's end offset."""
    records = []
    for batch in checkpoint.offset_batches():
        meta = checkpoint.batch_metadata(batch)
        ends = tuple(_log_offset(o) for o in checkpoint.source_offsets(batch))
        records.append(BatchRecord(batch, int(meta.get("batchWatermarkMs", 0) or 0), ends))
    return records


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def progress_records(rows: Iterable[dict[str, Any]]) -> list[BatchRecord]:
    """Rows of the progress table (stateops.progress.query_batches) as batch records, oldest first."""
    records = []
    for row in rows:
        sources = row.get("sources")
        starts = ends = None
        if sources is not None:
            starts = tuple(_log_offset(s.get("start_offset")) for s in sources)
            ends = tuple(_log_offset(s.get("end_offset")) for s in sources)
        records.append(BatchRecord(int(row["batch_id"]), _ms(row.get("watermark")), ends or (), starts,
                                   row.get("run_id")))
    return records


def load(checkpoint: Checkpoint, progress_rows: Iterable[dict[str, Any]]) -> BatchLog:
    """The batch log from the retained offsets and the query's progress rows (progress.query_batches)."""
    return BatchLog(offset_records(checkpoint), progress_records(progress_rows))
