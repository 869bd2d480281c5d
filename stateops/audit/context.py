"""What both audits need before looking at state: the checkpoint, the batch, its watermark, the query's
recent progress rows and the earlier audits of this checkpoint. No JVM.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Iterable

from stateops.audit.history import load_history
from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.checkpoint import Checkpoint, NotACheckpointError, provider_of, watermark_of
from stateops.delta import read_table
from stateops.layout import Layout
from stateops.progress import TABLE as PROGRESS_TABLE
from stateops.checkpoints.state_store import MEMORY, store_name


@dataclass
class AuditContext:
    checkpoint: Checkpoint
    batch_id: int
    watermark: _dt.datetime | None
    batch_timestamp: _dt.datetime | None
    provider: str | None
    query_id: str | None
    history: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)

    @property
    def watermark_ms(self) -> int:
        return int(self.watermark.timestamp() * 1000) if self.watermark else 0

    def versioning_factor(self, t: Thresholds) -> float:
        """Versions of each row the provider keeps: HDFS keeps 2 maps in memory, RocksDB one live DB."""
        if t.versioning_factor:
            return t.versioning_factor
        return 2.0 if store_name(self.provider) == MEMORY else 1.0


def recent_progress(layout: Layout, query_id: str, limit: int) -> list[dict[str, Any]]:
    """The query's latest `limit` progress rows (any job name: matched on the checkpoint's query id)."""
    return recent_progress_by_query(layout, [query_id], limit).get(query_id, [])


def recent_progress_by_query(layout: Layout, query_ids: Iterable[str], limit: int) -> dict[str, list[dict[str, Any]]]:
    """Query id -> its latest `limit` progress rows, oldest first, from one read of the progress table for all
    of `query_ids`; only the rows kept become Python objects (a query may have months of batches)."""
    wanted = sorted(set(query_ids))
    table = read_table(layout.ops_table(PROGRESS_TABLE), filters=[("query_id", "in", wanted)]) if wanted else None
    if table is None or not table.num_rows:
        return {}
    table = table.sort_by([("query_id", "ascending"), ("batch_id", "ascending"), ("timestamp", "ascending")])
    ids, keep, out = table["query_id"].to_pylist(), max(limit, 1), {}
    end = len(ids)
    while end:
        start = end
        while start and ids[start - 1] == ids[end - 1]:
            start -= 1
        out[ids[end - 1]] = table.slice(max(start, end - keep), min(keep, end - start)).to_pylist()
        end = start
    return out


def build_context(checkpoint_path: str, batch_id: int | None, t: Thresholds, *, layout: Layout | None = None,
                  history: list[dict[str, Any]] | None = None,
                  progress: list[dict[str, Any]] | None = None) -> AuditContext:
    checkpoint = Checkpoint.open(checkpoint_path)
    committed = checkpoint.committed_batches()
    if not committed:
        raise NotACheckpointError(f"{checkpoint_path}: no committed batch yet; run the job first")
    if batch_id is None:
        batch_id = committed[-1]
    elif batch_id not in committed:
        raise NotACheckpointError(f"{checkpoint_path}: batch {batch_id} is not committed "
                                  f"(committed batches: {committed[0]}..{committed[-1]})")
    meta = checkpoint.batch_metadata(batch_id)
    try:
        query_id = checkpoint.query_id()
    except (OSError, ValueError, KeyError):
        query_id = None
    ts = meta.get("batchTimestampMs")
    if history is None:
        history = load_history(layout, checkpoint_path, query_id) if layout else []
    if progress is None:
        progress = recent_progress(layout, query_id, t.progress_batches) if layout and query_id else []
    return AuditContext(
        checkpoint=checkpoint, batch_id=batch_id, watermark=watermark_of(meta),  # one read of the offsets file
        batch_timestamp=_dt.datetime.fromtimestamp(ts / 1000, tz=_dt.timezone.utc) if ts else None,
        provider=provider_of(meta), query_id=query_id, history=history, progress=progress)
