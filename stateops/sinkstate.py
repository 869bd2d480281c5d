"""The sink across checkpoint changes: the epoch in the Delta transaction app id, a rebuild's replay rules,
and aligning the table with the checkpoint a restart resumes from.

Why an epoch: the sink skips a batch whose id is not above the table's transaction version for its app
id. A runbook restart may replay batches (rewind, restore, rollback) and delta-rs keeps the newest
transaction per app id even after `DeltaTable.restore` (measured on deltalake 1.6.6: restore to v2 of a
table whose app wrote batches 0..4 still reports transaction_version 4), so the replay would be skipped
as "already written". Every runbook restart therefore writes under a new epoch (`stateops/<job>/<query
id>` plus `/epoch-<n>`), a number never used before for the job, recorded with history in the overrides
table; and before the restart the table is restored to the last version that holds no batch the
checkpoint will run again. Then nothing is skipped and nothing doubled.

A rebuild replays the retained input into a table that already holds the old checkpoint's rows: for an
append sink, rows whose event time starts at or before the table's newest such time may be repeats and
are inserted only where their idempotent key is absent (later rows cannot be repeats: plain appends);
rows before a write floor (the replay cannot rebuild them completely) are not written at all.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import overrides
from stateops.delta import open_table, scan
from stateops.errors import StateOpsError
from stateops.storage import read_text
from stateops.layout import Layout

_COMMIT = re.compile(r"^(\d{20})\.json$")


def app_id(job: str, query_id: str, epoch: int = 0) -> str:
    """The sink's Delta transaction app id (epoch 0 keeps the id jobs had before runbooks existed)."""
    base = f"stateops/{job}/{query_id}"
    return base if not epoch else f"{base}/epoch-{epoch}"


def query_app_id(job: str, checkpoint: str, epoch: int = 0) -> str:
    """The app id of the query of `checkpoint`: the job plus the query id stored in the checkpoint (a new
    checkpoint, a new id), plus the sink epoch a runbook restart set."""
    return app_id(job, Checkpoint(checkpoint).query_id(), epoch)


def checkpoint_app_prefix(job: str, query_id: str) -> str:
    return f"stateops/{job}/{query_id}"


def belongs_to(app: str, prefix: str) -> bool:
    """A transaction app id of the query whose prefix (checkpoint_app_prefix) is `prefix`, in any sink epoch."""
    return app == prefix or app.startswith(prefix + "/epoch-")


@dataclass(frozen=True)
class SinkState:
    """What the sink of the job's next run does: its epoch and, right after a rebuild, the replay rules."""

    epoch: int = 0
    write_floor_ms: int | None = None            # rows whose span starts before this are not written
    insert_if_absent_until_ms: int | None = None  # append rows starting at or before this: insert if absent
    # An adopted job (stateops.adoption): the old query's id and the newest of its batches the table holds; a
    # batch of that query up to it runs (its state commits) and is written nowhere.
    adopted_query: str | None = None
    written_through: int | None = None

    def already_written(self, query_id: str, batch_id: int) -> bool:
        return (self.adopted_query == query_id and self.written_through is not None
                and batch_id <= self.written_through)


def sink_state(layout: Layout, job: str) -> SinkState:
    forced = overrides.in_force(layout, job)
    epoch = int(forced[overrides.SINK_EPOCH].value) if overrides.SINK_EPOCH in forced else 0
    replay = json.loads(forced[overrides.SINK_REPLAY].value) if overrides.SINK_REPLAY in forced else {}
    adopted = json.loads(forced[overrides.ADOPTION].value) if overrides.ADOPTION in forced else {}
    adoption = {"adopted_query": adopted.get("query_id"), "written_through": adopted.get("written_through")}
    if replay.get("epoch") != epoch:  # replay rules belong to the rebuild's own epoch only
        return SinkState(epoch=epoch, **adoption)
    return SinkState(epoch=epoch, write_floor_ms=replay.get("write_floor_ms"),
                     insert_if_absent_until_ms=replay.get("insert_if_absent_until_ms"), **adoption)


def next_epoch(layout: Layout, job: str) -> int:
    """A number no earlier run of the job wrote under: above every epoch in the history."""
    used = [int(c.value) for c in overrides.history(layout, job) if c.setting == overrides.SINK_EPOCH and c.value]
    return max(used, default=0) + 1


def replay_value(epoch: int, write_floor_ms: int | None, insert_if_absent_until_ms: int | None) -> str:
    return json.dumps({"epoch": epoch, "write_floor_ms": write_floor_ms,
                       "insert_if_absent_until_ms": insert_if_absent_until_ms}, sort_keys=True)


# --- the table's history ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Commit:
    version: int
    operation: str | None
    parameters: dict[str, Any]
    transactions: tuple[tuple[str, int], ...]  # (app id, batch id)


def read_commit(uri: str, version: int) -> Commit | None:
    """One commit of the Delta log, or None when its JSON file is no longer retained."""
    try:
        text = read_text(posixpath.join(uri.rstrip("/"), "_delta_log", f"{version:020d}.json"))
    except FileNotFoundError:
        return None
    operation, parameters, txns = None, {}, []
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            operation = action["commitInfo"].get("operation")
            parameters = action["commitInfo"].get("operationParameters") or {}
        elif "txn" in action:
            txns.append((action["txn"]["appId"], int(action["txn"]["version"])))
    return Commit(version, operation, parameters, tuple(txns))


def _commits_back(uri: str, start: int) -> Iterator[Commit]:
    for version in range(start, -1, -1):
        commit = read_commit(uri, version)
        if commit is None:
            raise StateOpsError(f"{uri}: Delta log entry {version} is no longer retained, so the table cannot be "
                                "aligned with the checkpoint. Fix: restore the table by hand to the version that "
                                "matches the checkpoint's latest batch, or rebuild the job")
        yield commit


def aligned_version(uri: str, prefix: str, batch: int, start: int) -> int:
    """The newest version <= `start` holding no write of this checkpoint (app ids under `prefix`) for a batch
    above `batch`: every such later write is one the restart will make again."""
    target = start
    for commit in _commits_back(uri, start):
        ours = [b for app, b in commit.transactions if belongs_to(app, prefix)]
        if any(b <= batch for b in ours):
            break
        if ours:
            target = commit.version - 1
    return target


def table_version(uri: str) -> int | None:
    table = open_table(uri)
    return table.version() if table is not None else None


def transaction_version(uri: str, app: str) -> int | None:
    table = open_table(uri)
    return table.transaction_version(app) if table is not None else None


def restored_to(uri: str, version: int) -> bool:
    """True when the table is already at `version`'s content: its latest commit restored it, or nothing came
    after it."""
    latest = table_version(uri)
    if latest is None or latest == version:
        return True
    commit = read_commit(uri, latest)
    return (commit is not None and commit.operation == "RESTORE"
            and str(commit.parameters.get("version")) == str(version))


def restore(uri: str, version: int) -> dict[str, Any]:
    """Restore the table to `version` (a new commit; the later versions stay in the log: nothing is lost)."""
    if restored_to(uri, version):
        return {"restored": False, "version": version}
    table = open_table(uri)
    before = table.version()
    metrics = table.restore(version)
    return {"restored": True, "version": version, "from_version": before, "metrics": dict(metrics or {})}


def max_time(uri: str, column: str | None) -> int | None:
    """The newest value of `column` in the table, epoch milliseconds (None: no table, no rows, no column)."""
    table = open_table(uri)
    if table is None or not column or column not in [f.name for f in table.schema().fields]:
        return None
    values = scan(table, [column]).column(column)
    if len(values) == 0:
        return None
    top = pc.max(values)
    if not top.is_valid:
        return None
    if pa.types.is_timestamp(values.type):
        return int(pc.divide(pc.cast(top, pa.timestamp("us")).cast(pa.int64()), 1000).as_py())
    return int(top.as_py())


def duplicate_keys(uri: str, key: tuple[str, ...], limit: int = 5) -> tuple[int, list[dict[str, Any]]]:
    """(how many keys occur more than once, a few of them) in the table."""
    table = open_table(uri)
    if table is None or not key:
        return 0, []
    rows = scan(table, key)
    counts = rows.group_by(list(key)).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    return repeated.num_rows, [{k: str(v) for k, v in r.items()} for r in repeated.slice(0, limit).to_pylist()]
