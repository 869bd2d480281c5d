"""Exactly-once micro-batch writes into Delta with delta-rs (no JVM needed).

A micro-batch may run twice (crash after the Delta commit, before Spark's commit log), and two writers
may run the same batch at once (two instances of one query). Each commit carries the Delta transaction
`(app_id, batch_id)`; a batch whose id is not above the table's recorded version for that app id is
skipped. `app_id` must change with the checkpoint, since batch ids restart at 0.

The check and the commit use one snapshot (measured on deltalake 1.6.6): delta-rs commits on top of the
snapshot it is given, and when newer commits landed meanwhile its conflict check fails the commit with
`CommitFailedError` if one of them carries the same app id ("Concurrent transaction failed"; a MERGE
also fails when they added data it read). Checking on one snapshot and committing through the table
opened again let a commit that landed in between pass unseen (six writers of one batch: it landed twice
in 3 of 10 rounds), and a table created by a first write through its path is not checked either (twice
in 10 of 10 rounds). So the table is created empty first (no transaction), and a failed commit reloads,
checks again and retries.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from stateops.redaction import redact
from stateops.storage import local_path, storage_options

if TYPE_CHECKING:
    import pyarrow.dataset as ds

COMMIT_ATTEMPTS = 20


@dataclass(frozen=True)
class BatchWrite:
    """What one write did; `attempts` > 1 means commits were lost to concurrent writers first."""

    rows: int
    skipped: bool
    version: int | None
    attempts: int = 1


def open_table(uri: str, version: int | None = None) -> DeltaTable | None:
    """The table at `uri` (at `version`, else its latest) with the storage layer's options; None where there is none.
    Every reader goes through here: a bare DeltaTable(uri) misses them (an S3 API server over plain HTTP,
    STATEOPS_STORAGE_OPTIONS, the call bound)."""
    try:
        return DeltaTable(uri, version=version, storage_options=storage_options(uri))
    except TableNotFoundError:
        return None


def _commit(table: DeltaTable, data: pa.Table, commit: CommitProperties, merge_keys: Sequence[str],
            insert_only: bool) -> None:
    """Append or MERGE on top of `table`'s snapshot: delta-rs checks what landed after it."""
    if not merge_keys:
        write_deltalake(table, data, mode="append", commit_properties=commit, schema_mode="merge")
        return
    predicate = " AND ".join(f"t.{k} = s.{k}" for k in merge_keys)
    merge = table.merge(data, predicate=predicate, source_alias="s", target_alias="t", commit_properties=commit,
                        merge_schema=True)  # an output column a changed query added joins the table, as on append
    (merge if insert_only else merge.when_matched_update_all()).when_not_matched_insert_all().execute()


def _write_once(uri: str, data: pa.Table, app_id: str, batch_id: int, merge_keys: Sequence[str],
                insert_only: bool, attempt: int) -> BatchWrite:
    table = open_table(uri)
    if table is None:
        write_deltalake(uri, data.schema.empty_table(), mode="append", schema_mode="merge",
                        storage_options=storage_options(uri))
        table = open_table(uri)
    done = table.transaction_version(app_id)
    if done is not None and done >= batch_id:
        return BatchWrite(rows=0, skipped=True, version=table.version(), attempts=attempt)
    _commit(table, data, CommitProperties(app_transactions=[Transaction(app_id, batch_id)]), merge_keys,
            insert_only)
    return BatchWrite(rows=data.num_rows, skipped=False, version=table.version(), attempts=attempt)


def write_batch(
    uri: str,
    data: pa.Table,
    *,
    app_id: str,
    batch_id: int,
    merge_keys: Sequence[str] = (),
    insert_only: bool = False,
    attempts: int = COMMIT_ATTEMPTS,
) -> BatchWrite:
    """Append `data` (or MERGE it on `merge_keys`) once per (app_id, batch_id). insert_only: rows whose key is
    in the table already are left as they are (insert if absent: a replay's repeats).

    A commit that loses a race is retried on a reloaded snapshot, at most `attempts` times, after a short
    random pause (writers of other app ids to one table make a MERGE conflict too); the last failure is
    raised.
    """
    attempt = 1
    while True:
        try:
            return _write_once(uri, data, app_id, batch_id, merge_keys, insert_only, attempt)
        except CommitFailedError:
            if attempt >= attempts:
                raise
            time.sleep(random.uniform(0.0, 0.01 * attempt))
            attempt += 1


def append_rows(uri: str, data: pa.Table) -> None:
    """Plain append for ops tables (no idempotency needed: rows carry their own ids), every text redacted
    (stateops.redaction): the one way into every ops table, so an error message quoting a secret stops here."""
    write_deltalake(uri, _redacted(data), mode="append", schema_mode="merge", storage_options=storage_options(uri))


def _redacted(data: pa.Table) -> pa.Table:
    for i, column in enumerate(data.schema):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            texts = [None if text is None else redact(text) for text in data.column(i).to_pylist()]
            data = data.set_column(i, column, pa.array(texts, type=column.type))
    return data


def dataset(table: DeltaTable) -> ds.Dataset:
    """The table's current files as a pyarrow dataset, for `scan`.

    delta-rs reads through a Python file system over its Rust object store by default, and Arrow's I/O threads
    are still inside it when the interpreter exits: a process that had read a table aborted at exit ("terminate
    called without an active exception", exit status 134) in 6 of 8 runs (deltalake 1.6.6, pyarrow 26.0.1; the
    same as delta-io/delta-rs#2184), so a command that had printed its answer failed. A local table is read
    through Arrow's own local file system instead (0 of 8); on any other store `scan` keeps the reads on the
    calling thread (0 of 8)."""
    import pyarrow.fs as pafs  # with pyarrow.dataset: only where rows are read (pandas comes with it, 1.6 s)

    root = local_path(table.table_uri)
    if root is None:
        return table.to_pyarrow_dataset()
    return table.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(unquote(root), pafs.LocalFileSystem()))


def scan(table: DeltaTable, columns: Sequence[str] | None = None, filters=None) -> pa.Table:
    """The rows of `table` (its `columns`, those matching `filters`: DNF tuples or an Arrow expression): every
    reader of a table's rows goes through here (see `dataset`: Arrow's threads only on Arrow's own file system)."""
    import pyarrow.fs as pafs

    files = dataset(table)
    expression = pq.filters_to_expression(filters) if filters is not None else None
    return files.to_table(columns=list(columns) if columns else None, filter=expression,
                          use_threads=isinstance(files.filesystem, pafs.SubTreeFileSystem))


def read_table(uri: str, columns: Sequence[str] | None = None, filters=None) -> pa.Table | None:
    table = open_table(uri)
    if table is None:
        return None
    try:
        return scan(table, columns, filters)
    except pa.ArrowNotImplementedError:
        if not filters:
            raise
    # Files that delta-rs's own UPDATE rewrote (the home move's path rewrite) keep their text as `string_view`, and
    # pyarrow cannot compare a filter's plain string with it in the scan: read the rows, then filter them (the scan
    # casts every file to the table's schema).
    found = scan(table)
    found = found.filter(pq.filters_to_expression(filters))
    return found.select(list(columns)) if columns else found


def table_columns(table: DeltaTable) -> list[tuple[str, str, bool]]:
    """(name, type, nullable) per column of the table's current schema; nested types by their JSON."""
    return [(f.name, f.type.type if isinstance(getattr(f.type, "type", None), str) else f.type.to_json(),
             f.nullable) for f in table.schema().fields]
