"""What an existing job's checkpoint, input and table say, read with the storage layer only (no JVM).

- the batches: the last committed one, and a batch in flight (`offsets/N` without `commits/N`: a restart runs
  it again, over the same input);
- the sources: per source of the checkpoint (its index in the offset log), the files its log recorded or the
  Kafka topics of its offsets, matched to the job's inputs;
- the table: whether it is a Delta table, and which Delta transaction (`txn`) holds the checkpoint's batches:
  Delta's streaming sink records the query id with each batch id, a `foreachBatch` writer its `txnAppId`.
"""
from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field
from typing import Any

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.delta import open_table
from stateops.sinkstate import read_commit
from stateops.storage import comparable, exists, names

# How long the plan watches the checkpoint for a writer (a new offset or commit file means one is running).
WATCH_SECONDS = 3.0
# How many of the table's newest commits are searched for the app ids of its transactions.
TXN_COMMITS = 50
KAFKA, FILES = "kafka", "files"


@dataclass(frozen=True)
class Batches:
    """The checkpoint's batches: the last committed (None: none yet) and one planned but not committed."""

    last_committed: int | None
    in_flight: int | None
    offset_files: int


def batches(checkpoint: Checkpoint) -> Batches:
    planned, committed = checkpoint.offset_batches(), checkpoint.committed_batches()
    last = committed[-1] if committed else None
    in_flight = planned[-1] if planned and (last is None or planned[-1] > last) else None
    return Batches(last, in_flight, len(planned))


def watch(checkpoint: Checkpoint, seconds: float = WATCH_SECONDS) -> str | None:
    """Why another process seems to write the checkpoint (a batch planned or committed while watched), or None."""
    before = (checkpoint.offset_batches(), checkpoint.committed_batches())
    time.sleep(seconds)
    after = (checkpoint.offset_batches(), checkpoint.committed_batches())
    if after != before:
        return (f"its offset or commit log changed within {seconds:g} s (offsets {before[0][-1:]} -> "
                f"{after[0][-1:]}, commits {before[1][-1:]} -> {after[1][-1:]})")
    return None


def inside(path: str, folder: str) -> bool:
    path, folder = comparable(path), comparable(folder)
    return path == folder or path.startswith(folder + "/")


@dataclass(frozen=True)
class Source:
    """One source of the checkpoint, as its logs have it, and the job input it reads (None: none does)."""

    index: int
    kind: str                          # files | kafka
    where: tuple[str, ...]             # the folders of its files, or its topics
    input: str | None
    offset: Any                        # its offset at the last committed batch
    files_read: int = 0                # files its log holds up to the last committed batch
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "where": list(self.where), "input": self.input,
                "offset": self.offset, "files_read": self.files_read, "problem": self.problem}


def sources(checkpoint: Checkpoint, last: int, inputs: dict[str, str], kind: str,
            order: list[str | None]) -> list[Source]:
    """The checkpoint's sources at batch `last`, each matched to the input (name -> its folder or topic) that
    holds its files or topics, and to the query's own source at the same index (`order`: the input each source
    of the query reads, in Spark's numbering; None where unknown)."""
    offsets = checkpoint.source_offsets(last)
    found: list[Source] = []
    for index, offset in enumerate(offsets):
        expected = order[index] if index < len(order) else None
        if kind == KAFKA:
            topics = tuple(sorted(offset)) if isinstance(offset, dict) and "logOffset" not in offset else ()
            name = next((n for n, topic in inputs.items() if topics == (topic,)), None)
            found.append(_checked(Source(index, KAFKA, topics, name, offset), expected, inputs))
            continue
        log_offset = offset.get("logOffset") if isinstance(offset, dict) else None
        entries = [e for e in checkpoint.source_log(index).values()
                   if log_offset is not None and int(e["batchId"]) <= int(log_offset)]
        folders = tuple(sorted({posixpath.dirname(comparable(e["path"])) for e in entries}))
        name = next((n for n, folder in inputs.items() if entries and all(inside(e["path"], folder)
                                                                            for e in entries)), None)
        if not entries and expected is not None:
            name = expected  # nothing read yet: only the query's own order can say
        found.append(_checked(Source(index, FILES, folders, name, offset, len(entries)), expected, inputs))
    return found


def _checked(source: Source, expected: str | None, inputs: dict[str, str]) -> Source:
    if source.kind == FILES and not isinstance(source.offset, dict):
        problem = f"its offset {source.offset!r} is not a file source's"
    elif source.input is None:
        problem = (f"it read {', '.join(source.where) or 'nothing yet'}, which is none of the inputs' "
                   f"{'topics' if source.kind == KAFKA else 'folders'} ({', '.join(f'{n}: {p}' for n, p in inputs.items())})")
    elif expected is not None and expected != source.input:
        problem = (f"it reads input {source.input}, but the job's query reads {expected} as source {source.index} "
                   "(Spark matches sources by position)")
    else:
        problem = None
    return source if problem is None else Source(**{**source.__dict__, "problem": problem})


@dataclass(frozen=True)
class Sink:
    """The job's table: a Delta table or not, and the transaction that holds the checkpoint's batches."""

    table: str
    delta: bool
    exists: bool
    version: int | None = None
    writer: str | None = None          # the txn app id of the checkpoint's writes (None: none found)
    written: int | None = None         # the newest batch id that app id recorded
    operations: tuple[str, ...] = field(default=())  # the newest commits' operations (MERGE, STREAMING UPDATE, ...)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "delta": self.delta, "exists": self.exists, "version": self.version,
                "txn_app_id": self.writer, "txn_version": self.written, "operations": list(self.operations)}


def sink(table_uri: str, query_id: str) -> Sink:
    """The table, and which of its transactions is the checkpoint's: the query id (Delta's streaming sink), else
    the app id of the newest commit that carried a transaction (a `foreachBatch` writer's `txnAppId`)."""
    if not exists(table_uri):
        return Sink(table_uri, delta=False, exists=False)
    if "_delta_log" not in (names(table_uri) or ()):
        return Sink(table_uri, delta=False, exists=True)
    table = open_table(table_uri)
    if table is None:
        return Sink(table_uri, delta=False, exists=True)
    version = table.version()
    operations: list[str] = []
    apps: list[str] = []
    for at in range(version, max(-1, version - TXN_COMMITS), -1):
        commit = read_commit(table_uri, at)
        if commit is None:
            break
        if commit.operation and len(operations) < 5:
            operations.append(commit.operation)
        apps += [app for app, _ in commit.transactions if app not in apps]
    writer = query_id if table.transaction_version(query_id) is not None else (apps[0] if apps else None)
    written = table.transaction_version(writer) if writer else None
    return Sink(table_uri, True, True, version, writer, written, tuple(operations))
