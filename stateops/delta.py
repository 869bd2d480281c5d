"""Exactly-once micro-batch writes into Delta with delta-rs (no JVM needed).

A micro-batch may run twice (crash after the Delta commit, before Spark's commit log). Each commit carries
the Delta transaction `(app_id, batch_id)`; a batch whose id is not above the table's recorded version
for that app id is skipped. `app_id` must change with the checkpoint, since batch ids restart at 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from stateops.fs import storage_options


@dataclass(frozen=True)
class BatchWrite:
    rows: int
    skipped: bool
    version: int | None


def open_table(uri: str) -> DeltaTable | None:
    try:
        return DeltaTable(uri, storage_options=storage_options(uri))
    except TableNotFoundError:
        return None


def write_batch(
    uri: str,
    data: pa.Table,
    *,
    app_id: str,
    batch_id: int,
    merge_keys: Sequence[str] = (),
) -> BatchWrite:
    """Append `data` (or MERGE it on `merge_keys`) once per (app_id, batch_id)."""
    table = open_table(uri)
    if table is not None:
        done = table.transaction_version(app_id)
        if done is not None and done >= batch_id:
            return BatchWrite(rows=0, skipped=True, version=table.version())
    commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
    if table is None or not merge_keys:
        write_deltalake(uri, data, mode="append", commit_properties=commit, schema_mode="merge",
                        storage_options=storage_options(uri))
    else:
        predicate = " AND ".join(f"t.{k} = s.{k}" for k in merge_keys)
        (
            table.merge(data, predicate=predicate, source_alias="s", target_alias="t",
                        commit_properties=commit)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    return BatchWrite(rows=data.num_rows, skipped=False, version=open_table(uri).version())


def append_rows(uri: str, data: pa.Table) -> None:
    """Plain append for ops tables (no idempotency needed: rows carry their own ids)."""
    write_deltalake(uri, data, mode="append", schema_mode="merge", storage_options=storage_options(uri))


def read_table(uri: str, columns: Sequence[str] | None = None, filters=None) -> pa.Table | None:
    table = open_table(uri)
    if table is None:
        return None
    return table.to_pyarrow_table(columns=list(columns) if columns else None, filters=filters)
