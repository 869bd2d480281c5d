"""Explain a key: is it in state at a batch, where, with which value, and why has it not been emitted?

The debugging story of Spark's State Reader API, for one key value. Evidence, all as of batch N (default:
the latest committed batch):

- `state-metadata`: the operators and stores of the checkpoint, and the batches still retained;
- `statestore` at `batchId=N`: the key's rows per operator, store and partition (join stores are read by
  `storeName`, so the join's `matched` flag is visible);
- `statestore` with `readChangeFeed` from the first retained batch to N: when the key entered state, was
  matched, was deleted (eviction). This needs a provider that keeps per-batch changes: RocksDB with
  changelog checkpointing (the project default) or the HDFS provider; plain RocksDB snapshots have no
  change feed, and `changeStartBatchId` must be a batch whose changes are still retained;
- for a stream-stream join, the input files each micro-batch read (the file source's log in
  `sources/<i>/`): a row of the key that was read but never stored was dropped as late when its event time
  was behind that side's state watermark;
- the output Delta table (delta-rs), as of the Delta version written by batch N when the writer's
  transaction app id is known.

Reasons (stable names; `REASONS` below has one line each):

join (stream-stream, e.g. order_payments)
  emitted                the key's joined row is in the output table (as of batch N)
  matched                state shows the key matched (matched flag), output table not available to confirm
  matched_outside_bound  both sides arrived, but their event times break the join's time condition
  arrived_too_late       a row of the key was read after the watermark had passed it and was dropped as
                         late (the other side may have waited in state and been purged)
  waiting_for_match      in a join store at batch N, nothing on the other side yet
  purged_by_watermark    was in state (change feed), evicted by the watermark without a match
  never_arrived          not in state, not in the change feed, not in the input, not in the output
other operators (windows, sessions, dedup, applyInPandasWithState, transformWithState)
  waiting_for_watermark  in state; its event time (window/session end, timeout) is ahead of the watermark
  eviction_pending       in state although its event time is already behind the watermark (eviction
                         stalled, or a state key without event time, e.g. dropDuplicates after withWatermark)
  in_state               in state, no event time to relate to the watermark
  emitted / purged_by_watermark / never_arrived as above
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable

from stateops.checkpoint import Checkpoint
from stateops.errors import StateOpsError

REASONS: dict[str, str] = {
    "emitted": "the key's result is in the output table",
    "matched": "the state shows the key was matched (so the join emitted it); the output table was not checked",
    "matched_outside_bound": "both sides arrived, but their event times break the join's time condition",
    "arrived_too_late": "a row of the key arrived after the watermark had passed it and was dropped as late",
    "waiting_for_match": "in a join store, no matching row on the other side yet",
    "purged_by_watermark": "was in state and was evicted by the watermark without being matched/emitted",
    "never_arrived": "not in state, not in the change feed (and not in the input or the output)",
    "waiting_for_watermark": "in state; the watermark has not yet passed its event time (window still open)",
    "eviction_pending": "in state although its event time is behind the watermark: should have been evicted",
    "in_state": "in state; the state row carries no event time to relate to the watermark",
}

_JOIN_OPERATORS = ("symmetricHashJoin",)


class ExplainError(StateOpsError):
    """The key cannot be explained as asked (bad batch id, state not retained, unreadable store)."""


@dataclass(frozen=True)
class JoinSpec:
    """A stream-stream inner join with a time condition: lower <= right_time - left_time <= upper."""

    left: str
    right: str
    left_time: str
    right_time: str
    lower_seconds: int
    upper_seconds: int


@dataclass(frozen=True)
class InputSource:
    """One input of the job (file source): where it lands, how to parse it, which column holds the key."""

    name: str
    path: str
    schema: str
    time_column: str
    key_column: str | None = None


@dataclass(frozen=True)
class ExplainTarget:
    job: str
    checkpoint: str
    output_table: str | None = None
    output_app_id: str | None = None  # Delta transaction app id of the writer: maps batch ids to versions
    output_key_columns: tuple[str, ...] = ()
    inputs: tuple[InputSource, ...] = ()
    join: JoinSpec | None = None


@dataclass
class KeyExplanation:
    job: str
    key: str
    batch_id: int
    watermark: str | None
    in_state: list[dict[str, Any]]
    reason: str
    explanation: str
    checkpoint: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)  # change feed events of the key
    inputs: list[dict[str, Any]] = field(default_factory=list)   # input rows of the key (joins)
    output_rows: list[dict[str, Any]] = field(default_factory=list)
    change_feed: dict[str, Any] = field(default_factory=dict)    # start/end batch, or the error

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), default=str, **kwargs)


# ---------------------------------------------------------------- helpers


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    # Naive datetimes come from Spark's collect(), which renders timestamps in this process's local time.
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value: Any) -> Any:
    """A Spark/Arrow value as JSON-able data (timestamps as ISO strings, UTC)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, str):
        try:
            return _utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _duration(seconds: float) -> str:
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    minutes, secs = divmod(seconds, 60)
    return f"{sign}{int(minutes)}m{secs:04.1f}s" if minutes else f"{sign}{secs:.1f}s"


def _watermark_ms(checkpoint: Checkpoint, batch_id: int) -> int:
    if batch_id < 0:
        return 0
    return int(checkpoint.batch_metadata(batch_id).get("batchWatermarkMs", 0) or 0)


def _ms_time(millis: int) -> datetime | None:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc) if millis else None


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
    return str(err).strip().splitlines()[0][:400] if str(err).strip() else type(err).__name__


# ---------------------------------------------------------------- evidence


@dataclass(frozen=True)
class _Store:
    operator_id: int
    operator_name: str
    store_name: str
    num_partitions: int
    min_batch_id: int
    max_batch_id: int
    properties: str | None


def _stores(spark, checkpoint: str, batch_id: int) -> list[_Store]:
    try:
        rows = (spark.read.format("state-metadata").option("batchId", batch_id).load(checkpoint)
                .collect())
    except Exception as err:  # noqa: BLE001 - Spark raises Py4J/Analysis errors; report them as one line
        raise ExplainError(f"{checkpoint}: cannot read state metadata at batch {batch_id}: "
                           f"{_spark_error(err)}") from None
    return [_Store(r.operatorId, r.operatorName, r.stateStoreName, r.numPartitions, r.minBatchId, r.maxBatchId,
                   r.operatorProperties) for r in rows]


def _readers(spark, checkpoint: str, store: _Store) -> list[tuple[str, Any]]:
    """(label, reader) per readable unit of a store: one per transformWithState variable, else one."""
    base = (spark.read.format("statestore").option("path", checkpoint)
            .option("operatorId", store.operator_id))
    if store.operator_name.startswith("transformWithState"):
        try:
            variables = [v["stateName"] for v in json.loads(store.properties or "{}").get("stateVariables", [])]
        except (ValueError, AttributeError, TypeError):
            variables = []
        return [(name, base.option("stateVarName", name)) for name in variables
                if not name.startswith("$")]
    return [(store.store_name, base.option("storeName", store.store_name))]


def _read_state(spark, checkpoint: str, stores: list[_Store], key: str, batch_id: int) -> list[dict]:
    found = []
    for store in stores:
        for label, reader in _readers(spark, checkpoint, store):
            try:
                rows = _key_filter(reader.option("batchId", batch_id).load(), key).collect()
            except Exception as err:  # noqa: BLE001
                raise ExplainError(f"cannot read state of operator {store.operator_id} store {label} at batch "
                                   f"{batch_id}: {_spark_error(err)}") from None
            for row in rows:
                value = _plain(row["value"]) if "value" in row.__fields__ else None
                found.append({"operator_id": store.operator_id, "operator_name": store.operator_name,
                              "store_name": label, "partition_id": row["partition_id"],
                              "key": _plain(row["key"]), "value": value})
    return found


def _read_changes(spark, checkpoint: str, stores: list[_Store], key: str, start: int, end: int
                  ) -> tuple[list[dict], dict]:
    """The key's change feed per store from `start` to `end`, and a note on what was covered."""
    info: dict[str, Any] = {"start_batch_id": start, "end_batch_id": end}
    if end < start:
        info["error"] = f"no retained changes up to batch {end} (first retained batch {start})"
        return [], info
    events = []
    for store in stores:
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
                               "partition_id": row["partition_id"], "key": _plain(row["key"]),
                               "value": _plain(row["value"])})
    events.sort(key=lambda e: (e["batch_id"], e["store_name"], e["change_type"] != "update"))
    return events, info


def _micro_batch_of(checkpoint: Checkpoint, source_index: int, batches: list[int]) -> dict[int, int]:
    """Source batch id -> micro-batch id, from the file source's logOffset in each offsets/<batch>."""
    mapping: dict[int, int] = {}
    previous = -1
    for batch in batches:
        offsets = checkpoint.source_offsets(batch)
        if source_index >= len(offsets):
            continue
        try:
            offset = int(offsets[source_index].get("logOffset"))
        except (ValueError, TypeError, AttributeError):
            continue
        for source_batch in range(previous + 1, offset + 1):
            mapping[source_batch] = batch
        previous = max(previous, offset)
    return mapping


def _norm_path(path: str) -> str:
    return path.split("://", 1)[-1].rstrip("/")


def _read_inputs(spark, checkpoint: Checkpoint, inputs: Iterable[InputSource], key: str, batch_id: int
                 ) -> list[dict]:
    """Rows of the key that the query read from its file inputs in micro-batches <= batch_id."""
    from pyspark.sql import functions as F

    logs = checkpoint.source_files()
    batches = [b for b in checkpoint.offset_batches() if b <= batch_id]
    found = []
    for inp in inputs:
        if not inp.key_column:
            continue
        root = _norm_path(inp.path)
        for index, files in logs.items():
            mine = [(p, sb) for p, sb in files if _norm_path(p).startswith(root + "/")]
            if not mine:
                continue
            to_batch = _micro_batch_of(checkpoint, index, batches)
            by_file = {_norm_path(p): to_batch[sb] for p, sb in mine if sb in to_batch}
            if not by_file:
                continue
            paths = [p for p, sb in mine if sb in to_batch]
            try:
                rows = (spark.read.text(paths).select(
                    F.input_file_name().alias("file"),
                    F.from_json("value", inp.schema, {"mode": "PERMISSIVE"}).alias("row"))
                    .where(F.col(f"row.`{inp.key_column}`").cast("string") == F.lit(key))
                    .collect())
            except Exception:  # noqa: BLE001 - input files may be gone (retention); state evidence remains
                continue
            for row in rows:
                batch = by_file.get(_norm_path(row["file"]))
                if batch is None or row["row"] is None:
                    continue
                values = row["row"].asDict()
                found.append({"input": inp.name, "batch_id": batch,
                              "event_time": _plain(values.get(inp.time_column)), "row": _plain(values)})
    found.sort(key=lambda r: (r["batch_id"], r["input"]))
    return found


def _output_rows(target: ExplainTarget, key: str, batch_id: int, latest: int) -> list[dict] | None:
    """The key's rows in the output table as of batch_id; None when that cannot be determined."""
    if not target.output_table or not target.output_key_columns:
        return None
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(target.output_table)
    except TableNotFoundError:
        return [] if batch_id == latest else None
    if batch_id != latest:
        if not target.output_app_id:
            return None
        version = _version_for_batch(target.output_table, target.output_app_id, batch_id, table.version())
        if version is None:
            return []
        table = DeltaTable(target.output_table, version=version)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    dataset = table.to_pyarrow_dataset()
    rows: list[dict] = []
    for column in target.output_key_columns:
        if column not in dataset.schema.names:
            continue
        if pa.types.is_string(dataset.schema.field(column).type):
            data = dataset.to_table(filter=ds.field(column) == key)  # pushed down to file statistics
        else:
            data = dataset.to_table()
            data = data.filter(pc.equal(pc.cast(data[column], pa.string()), key))
        rows.extend(_plain(record) for record in data.to_pylist())
    return rows


def _version_for_batch(uri: str, app_id: str, batch_id: int, latest_version: int) -> int | None:
    """The last Delta version whose recorded transaction for app_id is <= batch_id (versions are monotonic)."""
    from deltalake import DeltaTable

    def txn(version: int) -> int:
        value = DeltaTable(uri, version=version).transaction_version(app_id)
        return -1 if value is None else int(value)

    low, high, best = 0, latest_version, None
    while low <= high:
        middle = (low + high) // 2
        if txn(middle) <= batch_id:
            best, low = middle, middle + 1
        else:
            high = middle - 1
    return best


# ---------------------------------------------------------------- reasoning


def _side_of(store_name: str) -> str | None:
    for side in ("left", "right"):
        if store_name.startswith(side + "-"):
            return side
    return None


def _explain_join(target: ExplainTarget, key: str, batch_id: int, checkpoint: Checkpoint,
                  in_state: list[dict], history: list[dict], inputs: list[dict], output: list[dict] | None,
                  feed: dict) -> tuple[str, str]:
    join = target.join
    assert join is not None
    names = {"left": join.left, "right": join.right}
    times = {"left": join.left_time, "right": join.right_time}
    rows_in_state = [r for r in in_state if "keyWithIndexToValue" in r["store_name"] or
                     not r["store_name"].endswith("keyToNumValues")]
    rows_in_state = [r for r in rows_in_state if isinstance(r.get("value"), dict)]
    updates = [e for e in history if e["change_type"] == "update" and isinstance(e.get("value"), dict)
               and "keyToNumValues" not in e["store_name"]]
    deletes = [e for e in history if e["change_type"] == "delete" and "keyToNumValues" not in e["store_name"]]
    wm = _ms_time(_watermark_ms(checkpoint, batch_id))
    wm_text = _iso(wm) or "none yet"

    # Event times seen per side: stored rows (state, change feed) and rows read from the input.
    stored: dict[str, list[datetime]] = {"left": [], "right": []}
    for r in rows_in_state + updates:
        side = _side_of(r["store_name"])
        moment = _parse_time(r["value"].get(times.get(side, ""))) if side else None
        if side and moment and moment not in stored[side]:
            stored[side].append(moment)
    arrived: dict[str, list[dict]] = {"left": [], "right": []}
    for r in inputs:
        side = "left" if r["input"] == join.left else "right" if r["input"] == join.right else None
        if side:
            arrived[side].append(r)
    seen = {s: sorted(set(stored[s]) | {t for t in (_parse_time(r["event_time"]) for r in arrived[s]) if t})
            for s in ("left", "right")}

    if output:
        return "emitted", (f"{len(output)} joined row(s) for {key} are in the output table {target.output_table} "
                           f"as of batch {batch_id}.")
    matched = [r for r in rows_in_state + updates if r["value"].get("matched")]
    if matched:
        first = min((e["batch_id"] for e in updates if e["value"].get("matched")), default=batch_id)
        return "matched", (f"the join state marks {key} as matched (batch {first}); an inner join emits a row "
                           f"when it matches. The output table was not available to confirm it.")

    bound = f"[{_duration(join.lower_seconds)}, {_duration(join.upper_seconds)}]"
    if seen["left"] and seen["right"]:
        pairs = [(lt, rt) for lt in seen["left"] for rt in seen["right"]]
        outside = [(lt, rt) for lt, rt in pairs
                   if not join.lower_seconds <= (rt - lt).total_seconds() <= join.upper_seconds]
        if outside and len(outside) == len(pairs):
            lt, rt = outside[0]
            return "matched_outside_bound", (
                f"both sides arrived for {key}: {join.left} {times['left']}={_iso(lt)} and {join.right} "
                f"{times['right']}={_iso(rt)}, {_duration((rt - lt).total_seconds())} apart; the join needs "
                f"{times['right']} - {times['left']} within {bound}, so they never match and both are purged "
                f"once the watermark passes them.")

    # Rows read but never stored: dropped as late when behind that side's state watermark.
    late = []
    for side in ("left", "right"):
        for r in arrived[side]:
            moment = _parse_time(r["event_time"])
            if moment is None or moment in stored[side]:
                continue
            late_wm = _watermark_ms(checkpoint, r["batch_id"] - 1)  # late rows: previous batch's watermark
            # Rows of one side are useless (and dropped) once no future row of the other side can match.
            shift = join.upper_seconds if side == "left" else -join.lower_seconds
            side_wm = _ms_time(late_wm - shift * 1000) if late_wm else None
            if side_wm is not None and moment <= side_wm:
                late.append((side, r, _ms_time(late_wm), side_wm))
    if late:
        side, r, late_wm, side_wm = late[0]
        other = "right" if side == "left" else "left"
        story = (f"{names[side]} row of {key} ({times[side]}={r['event_time']}) arrived in batch {r['batch_id']}, "
                 f"when the watermark was already {_iso(late_wm)}: it was behind the {names[side]} state "
                 f"watermark ({_iso(side_wm)}), so Spark dropped it as late data.")
        other_deleted = [e for e in deletes if _side_of(e["store_name"]) == other]
        other_state = [r2 for r2 in rows_in_state if _side_of(r2["store_name"]) == other]
        if other_state:
            story += (f" The {names[other]} row is still in state at batch {batch_id} but will never match.")
        elif other_deleted:
            story += (f" The {names[other]} row had waited in state and was purged by the watermark at batch "
                      f"{other_deleted[0]['batch_id']}.")
        return "arrived_too_late", story

    if rows_in_state:
        r = rows_in_state[0]
        side = _side_of(r["store_name"]) or "left"
        other = "right" if side == "left" else "left"
        moment = _parse_time(r["value"].get(times[side]))
        if side == "left":
            until = moment + timedelta(seconds=join.upper_seconds) if moment else None
        else:
            until = moment - timedelta(seconds=join.lower_seconds) if moment else None
        return "waiting_for_match", (
            f"{key} is in the {names[side]} join state (operator {r['operator_id']}, store {r['store_name']}, "
            f"partition {r['partition_id']}) at batch {batch_id}, unmatched: no {names[other]} row has arrived. "
            f"Watermark {wm_text}; it is purged once the watermark passes {_iso(until)}.")

    if deletes:
        d = deletes[-1]
        side = _side_of(d["store_name"]) or "left"
        other = "right" if side == "left" else "left"
        added = [e["batch_id"] for e in updates if _side_of(e["store_name"]) == side]
        deleted_wm = _iso(_ms_time(_watermark_ms(checkpoint, d["batch_id"])))
        return "purged_by_watermark", (
            f"{key} entered the {names[side]} join state at batch {min(added) if added else '?'} and was evicted "
            f"unmatched at batch {d['batch_id']} (watermark {deleted_wm}); no {names[other]} row arrived in "
            f"time.")

    if inputs:
        start = feed.get("start_batch_id")
        return "purged_by_watermark", (
            f"{key} was read in batch {inputs[0]['batch_id']} but is neither in state nor in the change feed "
            f"(retained from batch {start}): it was stored and evicted before the retained changes, or dropped.")
    note = f" (change feed unavailable: {feed['error']})" if feed.get("error") else ""
    return "never_arrived", (f"{key} is not in state at batch {batch_id}, not in the change feed, not in the "
                             f"input read so far and not in the output{note}.")


def _time_hint(row: dict) -> tuple[str, datetime] | None:
    """The event time that decides eviction: a window/session end in the key, else a timestamp in the row."""
    def walk(value: Any, path: str) -> Iterable[tuple[str, Any]]:
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{path}.{k}" if path else k)
        else:
            yield path, value

    key_leaves = list(walk(row.get("key"), "key"))
    for path, value in key_leaves:
        if path.endswith(".end") and _parse_time(value):
            return path, _parse_time(value)
    value_leaves = list(walk(row.get("value"), "value"))
    candidates = []
    for path, value in key_leaves + value_leaves:
        name = path.rsplit(".", 1)[-1].lower()
        if isinstance(value, str) and _parse_time(value) and len(value) >= 19:
            candidates.append((path, _parse_time(value)))
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
                "timeout" in name or "expire" in name):
            divisor = 1_000_000 if "micro" in name else 1000
            candidates.append((path, datetime.fromtimestamp(value / divisor, tz=timezone.utc)))
    if not candidates:
        return None
    return max(candidates, key=lambda c: c[1])


def _explain_other(key: str, batch_id: int, checkpoint: Checkpoint, in_state: list[dict],
                   history: list[dict], output: list[dict] | None, feed: dict) -> tuple[str, str]:
    wm = _ms_time(_watermark_ms(checkpoint, batch_id))
    wm_text = _iso(wm) or "none yet"
    if in_state:
        parts, reasons = [], []
        for r in in_state:
            hint = _time_hint(r)
            where = (f"operator {r['operator_id']} ({r['operator_name']}) store {r['store_name']} "
                     f"partition {r['partition_id']}")
            if hint is None:
                reasons.append("in_state")
                parts.append(f"{where}: no event time in the state row (watermark {wm_text})")
            elif wm is None or hint[1] > wm:
                reasons.append("waiting_for_watermark")
                parts.append(f"{where}: {hint[0]}={_iso(hint[1])} is ahead of the watermark {wm_text}; it is "
                             f"finalized/evicted when the watermark passes it")
            else:
                reasons.append("eviction_pending")
                parts.append(f"{where}: {hint[0]}={_iso(hint[1])} is already behind the watermark {wm_text}; "
                             f"it should have been evicted")
        reason = next(r for r in ("eviction_pending", "waiting_for_watermark", "in_state") if r in reasons)
        text = f"{key} is in state at batch {batch_id} in {len(in_state)} row(s): " + "; ".join(parts) + "."
        if output:
            text += f" {len(output)} row(s) for it are already in the output table (update mode or earlier results)."
        return reason, text
    if output:
        return "emitted", f"{key} is not in state at batch {batch_id}; {len(output)} row(s) for it are in the output."
    deletes = [e for e in history if e["change_type"] == "delete"]
    if deletes:
        d = deletes[-1]
        return "purged_by_watermark", (
            f"{key} was in state (operator {d['operator_id']} store {d['store_name']}) and was removed at batch "
            f"{d['batch_id']} (watermark {_iso(_ms_time(_watermark_ms(checkpoint, d['batch_id'])))}); no output row "
            f"for it was found.")
    note = f" (change feed unavailable: {feed['error']})" if feed.get("error") else ""
    return "never_arrived", f"{key} is not in state at batch {batch_id} and not in the change feed{note}."


# ---------------------------------------------------------------- entry points


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


def explain_key(spark, target: ExplainTarget, key: str, batch_id: int | None = None) -> KeyExplanation:
    """Explain why `key` is (or is not) in the state of `target` at `batch_id` (default latest committed)."""
    if not key:
        raise ExplainError("key: empty; pass the key value, e.g. --key o000042")
    checkpoint = Checkpoint.open(target.checkpoint)
    batch = resolve_batch(checkpoint, batch_id)
    spark.streams.active  # noqa: B018 - registers the StateStoreCoordinator; fresh sessions fail to read RocksDB
    stores = _stores(spark, target.checkpoint, batch)
    if not stores:
        raise ExplainError(f"{target.checkpoint}: no stateful operator in the state metadata at batch {batch}")
    retained = max(s.min_batch_id for s in stores)
    if batch < retained:
        raise ExplainError(f"batch {batch}: state no longer retained (state readable for batches "
                           f"{retained}..{max(s.max_batch_id for s in stores)})")
    is_join = target.join is not None and any(s.operator_name in _JOIN_OPERATORS for s in stores)
    readable = stores
    if is_join:  # the rows (with the matched flag) live in keyWithIndexToValue; counts add nothing
        readable = [s for s in stores if not s.store_name.endswith("keyToNumValues")] or stores
    in_state = _read_state(spark, target.checkpoint, readable, key, batch)
    start = max(0, min(s.min_batch_id for s in stores))
    history, feed = _read_changes(spark, target.checkpoint, readable, key, start, batch)
    latest = checkpoint.latest_committed_batch()
    output = _output_rows(target, key, batch, latest)
    inputs: list[dict] = []
    if is_join:
        if not output:  # the input files only matter to tell late rows from purged ones
            inputs = _read_inputs(spark, checkpoint, target.inputs, key, batch)
        reason, text = _explain_join(target, key, batch, checkpoint, in_state, history, inputs, output, feed)
    else:
        reason, text = _explain_other(key, batch, checkpoint, in_state, history, output, feed)
    state_rows = [{"operator_id": r["operator_id"], "store_name": r["store_name"],
                   "partition_id": r["partition_id"], "value": r["value"], "key": r["key"],
                   "operator_name": r["operator_name"]} for r in in_state]
    return KeyExplanation(
        job=target.job, key=key, batch_id=batch, watermark=_iso(checkpoint.watermark(batch)),
        in_state=state_rows, reason=reason, explanation=text, checkpoint=target.checkpoint,
        history=history, inputs=inputs, output_rows=output or [], change_feed=feed,
    )
