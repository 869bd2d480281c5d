"""Every change between the query a checkpoint's state was written by and the job's query now, classified by what
it means for the state (stateops.migration.kinds), and the rewrite of each operator's state that carries it: the
migration as data (`Migration`), which the runbook's migrate step applies (stateops.migration.apply) and `recover
plan --mode migrate` shows. Pure: the two shapes come from the planned queries (stateops.migration.shape).

Operators are matched by their kinds in plan order (Spark numbers them so: an operator added or removed renumbers
the ones after it). Aggregates are matched by what they compute (`max(value)`), never by position or output name:
Spark's own check compares by position and type only, so a reorder of same-typed aggregates passes it and reads the
old maxima as minima.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from dataclasses import asdict, dataclass, field, replace
from difflib import SequenceMatcher
from typing import Any

from stateops.migration.kinds import (ADD_AGGREGATE, ADD_OPERATOR, COARSER_KEY, EXACT, FINER_KEY, IMPOSSIBLE,
                                      JOIN_KEY, MERGE, NARROW_OR_MEANING, NATIVE, PARTIAL, REMOVE_AGGREGATE,
                                      REMOVE_OPERATOR, RENAME, REORDER, TWS_REWRITE, TWS_VARIABLES, WATERMARK, WIDEN,
                                      WINDOW_CHANGE, WINDOW_MULTIPLE, widens, worst)
from stateops.checkpoints.sparkstate import JOIN_COUNTS, JOIN_ROWS
from stateops.timefmt import iso_utc
from stateops.migration.shape import (AGGREGATION, CUSTOM, DEDUP, DEDUP_WITHIN_WATERMARK, JOIN, SESSION, TWS, Aggregate,
                                      OperatorShape, QueryShape)

REWRITTEN_KINDS = (AGGREGATION, DEDUP, DEDUP_WITHIN_WATERMARK)  # the kinds StateOps' writer rewrites row by row
TRANSFORMED_KINDS = (*REWRITTEN_KINDS, CUSTOM)  # one store each, no prefix key: a user's rule can give its rows
_CAST = re.compile(r"cast\((.*?) as [a-z0-9(), ]+?\)")


@dataclass(frozen=True)
class Position:
    """Where the state stands: the latest committed batch, the watermark the next batch runs with, and the
    watermark delays of the old query's settings and the job's now (milliseconds)."""

    batch: int
    watermark_ms: int
    delay_ms: int
    new_delay_ms: int | None = None

    def boundary(self, op: OperatorShape | None = None) -> dict[str, Any]:
        """From where a partial change's new part is complete: the first batch after the migration, its
        watermark, and the event time from which no input had been read (watermark + delay: the latest event time
        the state saw): windows starting at or after it, keys first seen at or after it. `settled_at_watermark_ms`:
        the watermark that evicts the last window (or dedup key) opened before it; None for keys no watermark
        evicts (an aggregation without a window)."""
        complete = self.watermark_ms + self.delay_ms
        if op is not None and op.kind == AGGREGATION:
            settled = complete + op.window.duration_us // 1000 if op.window else None
        else:
            settled = complete
        return {"batch": self.batch + 1, "watermark": _iso(self.watermark_ms), "watermark_ms": self.watermark_ms,
                "complete_from": _iso(complete), "complete_from_ms": complete, "settled_at_watermark_ms": settled}


def _iso(ms: int) -> str:
    return iso_utc(datetime.fromtimestamp(ms / 1000, timezone.utc))


@dataclass(frozen=True)
class Change:
    """One change, per operator and store, as `--json` gives it. `runnable`: StateOps' writer carries it now (a
    change classified exact or partial that it does not rewrite yet is refused by the run, said so)."""

    operator: str
    store: str
    change: str
    carried: str
    reason: str
    boundary: dict[str, Any] | None = None
    runnable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KeyPart:
    """A field of the new key: from the old key's column `source`, cast to `type` when it differs; a window column
    bucketed into windows `window_factor` times as long."""

    name: str
    source: str
    type: str
    window_factor: int = 1


@dataclass(frozen=True)
class ValuePart:
    """A field of the new value: the old value's field at `source` (by position), or Spark's initial value
    `initial` (an SQL literal) when the old state never held it; cast to `type`; `merge`: how two old keys' fields
    merge into one new key's (sum, max, min), for a coarser key."""

    type: str
    source: int | None = None
    initial: str | None = None
    merge: str = "min"


@dataclass(frozen=True)
class Rewrite:
    """One operator of the new query's state: `keep` its state files as they are (under `operator_id` now, an
    operator before it added or removed),
    `rewrite` them from operator `source_id`'s rows (keys and values by the parts; `regroup`: several old keys meet
    in one new key), or write an `empty` store (an operator added)."""

    operator_id: int
    operator_name: str
    how: str                      # keep | rewrite | empty
    source_id: int | None = None
    keys: tuple[KeyPart, ...] = ()  # none (and no values): the rows as they are (a repartition)
    values: tuple[ValuePart, ...] = ()
    regroup: bool = False
    store: str = "default"
    placement: int | None = None  # the key's leading fields Spark partitions by (a join's index after them), or all
    prefix_columns: int = 0       # the key's leading columns the operator scans by (session windows)
    transform: str | None = None  # the user's rule (module:function) makes the new rows instead
    join_key: tuple[str, ...] = ()  # a join side's new key, from its buffered rows' fields by these names

    @property
    def read_store(self) -> str:
        """The store its rows are read from: a join side's counts per key are made from its rows."""
        return self.store.replace(JOIN_COUNTS, JOIN_ROWS) if self.join_key else self.store

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rewrite":
        return cls(data["operator_id"], data["operator_name"], data["how"], data.get("source_id"),
                   tuple(KeyPart(**k) for k in data.get("keys") or ()),
                   tuple(ValuePart(**v) for v in data.get("values") or ()), bool(data.get("regroup")),
                   data.get("store", "default"), data.get("placement"), data.get("prefix_columns", 0),
                   data.get("transform"), tuple(data.get("join_key") or ()))


@dataclass(frozen=True)
class Migration:
    changes: tuple[Change, ...]
    rewrites: tuple[Rewrite, ...]
    position: Position
    notes: tuple[str, ...] = field(default=())

    @property
    def carried(self) -> str:
        return worst([c.carried for c in self.changes])

    @property
    def boundary(self) -> dict[str, Any] | None:
        """The partial changes' boundary, settled when the last of them is (never, when one never is)."""
        found = [c.boundary for c in self.changes if c.carried == PARTIAL]
        if not found:
            return None
        settled = [b["settled_at_watermark_ms"] for b in found]
        return {**found[0], "settled_at_watermark_ms": None if None in settled else max(settled)}

    def refusal(self) -> str | None:
        """Why the run will not act (the first impossible change, or one the writer does not carry yet), or
        None."""
        for c in self.changes:
            if c.carried == IMPOSSIBLE:
                return f"{c.operator}: {c.change}: {c.reason}"
        for c in self.changes:
            if not c.runnable:
                return (f"{c.operator}: {c.change} is {c.carried} in principle, but StateOps' writer does not rewrite "
                        f"{c.operator.split('(')[-1].rstrip(')')} state yet ({c.reason})")
        if all(c.carried == NATIVE for c in self.changes):
            return "nothing to migrate: " + ("the query keeps its state as it is" if not self.changes else
                                             "Spark takes every change as the state is")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"carried": self.carried, "boundary": self.boundary, "position": asdict(self.position),
                "changes": [c.to_dict() for c in self.changes], "rewrites": [r.to_dict() for r in self.rewrites],
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Migration":
        return cls(tuple(Change(**c) for c in data["changes"]), tuple(Rewrite.from_dict(r) for r in data["rewrites"]),
                   Position(**data["position"]), tuple(data.get("notes") or ()))


def classify(old: QueryShape, new: QueryShape, position: Position, transform: str | None = None) -> Migration:
    """The changes from `old` to `new` and the rewrites that carry them. `transform` (module:function): the user's
    rule for the operators whose state StateOps cannot derive (an impossible change, or one its writer does not
    carry): their changes are carried by it, said so."""
    changes: list[Change] = []
    rewrites: list[Rewrite] = []
    if position.new_delay_ms is not None and position.new_delay_ms != position.delay_ms:
        changes.append(Change("query", "-", WATERMARK, NATIVE, "the watermark delay is a setting, not state: the "
                              "restart evicts by the new one (stateops recover run JOB --mode adjust changes it "
                              "alone)"))
    for before, after in _aligned(old.operators, new.operators):
        if after is None:
            changes.append(Change(before.label, "*", REMOVE_OPERATOR, EXACT, "its state folder leaves the checkpoint "
                                  "(the archive keeps it); the operators after it are renumbered"))
            continue
        if before is None:
            changes.append(Change(after.label, "*", ADD_OPERATOR, PARTIAL, _added(after), position.boundary(after)))
            rewrites.append(Rewrite(after.operator_id, after.operator_name, "empty"))
            continue
        found, carrying = _compare(before, after, position)
        if transform and after.kind in TRANSFORMED_KINDS and any(c.carried == IMPOSSIBLE or not c.runnable
                                                                  for c in found):
            found = [replace(c, carried=EXACT, runnable=True, boundary=None,
                             reason=f"by your rule {transform} (StateOps would not: {c.reason})")
                     if c.carried == IMPOSSIBLE or not c.runnable else c for c in found]
            carrying = tuple(replace(r, how="rewrite", transform=transform) for r in carrying)
        changes += found
        rewrites += carrying
    return Migration(tuple(changes), tuple(rewrites), position)


def _aligned(old: tuple[OperatorShape, ...], new: tuple[OperatorShape, ...]):
    """(old, new) pairs: the same kind in the same plan order; (old, None) removed, (None, new) added."""
    matcher = SequenceMatcher(None, [o.kind for o in old], [n.kind for n in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            yield from zip(old[i1:i2], new[j1:j2])
            continue
        for o in old[i1:i2]:
            yield o, None
        for n in new[j1:j2]:
            yield None, n


def _added(op: OperatorShape) -> str:
    if op.kind in (DEDUP, DEDUP_WITHIN_WATERMARK):
        return ("its store starts empty: a duplicate of a row read before the migration is not recognised (rows "
                "whose first copy arrives from the boundary on are deduplicated exactly)")
    return "its store starts empty: it holds only what it reads from the boundary on"


def _compare(old: OperatorShape, new: OperatorShape, position: Position
             ) -> tuple[list[Change], tuple[Rewrite, ...]]:
    """The changes to one operator and the rewrites of its stores that carry them."""
    if new.kind in REWRITTEN_KINDS:
        found, rewrite = _rewritten(old, new, position)
        return found, (rewrite,)
    changes: list[Change] = []
    if new.kind == SESSION and old.window == new.window and old.keys == new.keys:  # its buffers: as an aggregation's
        found, rewrite = _rewritten(old, new, position)
        return [replace(c, runnable=c.carried == NATIVE) for c in found], (rewrite,)
    if new.kind == JOIN:
        return _join(old, new, position)
    if new.kind == TWS:
        changes += _tws(old, new, position)
    elif old.keys != new.keys or old.window != new.window:
        kind = WINDOW_CHANGE if old.window != new.window else FINER_KEY
        changes.append(Change(new.label, "*", kind, IMPOSSIBLE,
                              f"{_keys(old)} -> {_keys(new)}: a {new.kind} operator's state is kept per key as its "
                              "function built it, and no rewrite of it into other keys is derived from the state. "
                              "Fix: rebuild (stateops recover run JOB --mode rebuild)"))
    return changes, (Rewrite(new.operator_id, new.operator_name, "rewrite" if changes else "keep", old.operator_id),)


def _keys(op: OperatorShape) -> str:
    window = f", window {op.window.duration_us // 1_000_000} s" if op.window else ""
    return f"keys ({', '.join(op.key_names)}{window})"


def _rewritten(old: OperatorShape, new: OperatorShape, position: Position) -> tuple[list[Change], Rewrite]:
    """An aggregation or dedup: its keys and values compared, the parts of its rewrite."""
    keys, key_changes, regroup = _key_parts(old, new)
    changes = list(key_changes)
    values: tuple[ValuePart, ...] = tuple(ValuePart(c.type, i) for i, c in enumerate(old.buffer))
    if new.kind == AGGREGATION:
        value_changes, values = _aggregates(old, new, position)
        changes += value_changes
    elif regroup:  # a dedup's value (its expiry) merges by the earliest
        values = tuple(ValuePart(c.type, i, merge="min") for i, c in enumerate(old.buffer))
    if regroup and new.kind == AGGREGATION:
        unmerged = [a.function for a in old.aggregates if a.name not in MERGE]
        if unmerged:
            changes.append(Change(new.label, "default", key_changes[0].change, IMPOSSIBLE,
                                  f"{', '.join(unmerged)} keep buffers that do not merge (order or moments), so the "
                                  "old keys cannot be combined into the new ones. Fix: rebuild"))
    return changes, Rewrite(new.operator_id, new.operator_name, "rewrite" if changes else "keep", old.operator_id,
                            keys, values, regroup)


def _key_parts(old: OperatorShape, new: OperatorShape) -> tuple[tuple[KeyPart, ...], list[Change], bool]:
    """The new key's parts from the old key, the key changes, and whether old keys merge."""
    changes: list[Change] = []
    by_name = {c.name: c for c in old.keys}
    missing = [c.name for c in new.keys if c.name not in by_name]
    if missing:
        changes.append(Change(new.label, "default", FINER_KEY, IMPOSSIBLE,
                              f"{_keys(old)} -> {_keys(new)}: the state never held ({', '.join(missing)}), so it "
                              "cannot be split by it. Fix: rebuild (stateops recover run JOB --mode rebuild)"))
        return (), changes, False
    parts, regroup = [], len(new.keys) < len(old.keys)
    for column in new.keys:
        source = by_name[column.name]
        factor = 1
        if column.name == new.window_column and old.window != new.window:
            factor = _window_factor(old, new, changes)
            regroup = regroup or factor > 1
        elif source.type != column.type:
            if widens(source.type, column.type):
                changes.append(Change(new.label, "default", WIDEN, EXACT,
                                      f"key column {column.name} {source.type} -> {column.type}: cast, and each key "
                                      "placed in the partition Spark looks for it in"))
            else:
                changes.append(Change(new.label, "default", NARROW_OR_MEANING, IMPOSSIBLE,
                                      f"key column {column.name} {source.type} -> {column.type} does not hold every "
                                      "old value. Fix: rebuild"))
        parts.append(KeyPart(column.name, source.name, column.type, factor))
    if len(new.keys) < len(old.keys):
        dropped = [c.name for c in old.keys if c.name not in {p.name for p in parts}]
        changes.insert(0, Change(new.label, "default", COARSER_KEY, EXACT,
                                 f"{_keys(old)} -> {_keys(new)}: the old keys' state merged per new key (without "
                                 f"{', '.join(dropped)}) and placed in the partition Spark looks for it in"))
    elif [p.source for p in parts] != [c.name for c in old.keys] and not changes:
        changes.append(Change(new.label, "default", REORDER, EXACT,
                              f"{_keys(old)} -> {_keys(new)}: the key's columns stored in the new order, each key "
                              "placed in the partition Spark looks for it in"))
    return tuple(parts), changes, regroup


def _window_factor(old: OperatorShape, new: OperatorShape, changes: list[Change]) -> int:
    a, b = old.window, new.window
    if a and b and a.tumbling and b.tumbling and b.duration_us % a.duration_us == 0 and (
            a.start_us - b.start_us) % a.duration_us == 0:
        factor = b.duration_us // a.duration_us
        changes.append(Change(new.label, "default", WINDOW_MULTIPLE, EXACT,
                              f"tumbling window {a.duration_us // 1_000_000} s -> {b.duration_us // 1_000_000} s "
                              f"({factor} x): each old window's state merged into the window that contains it"))
        return factor
    what = ("a session window's gap" if (a and a.session) or (b and b.session) else
            "a window made finer, not a multiple of the old one, or sliding")
    changes.append(Change(new.label, "default", WINDOW_CHANGE, IMPOSSIBLE,
                          f"{_keys(old)} -> {_keys(new)}: {what}: the state holds each old window's total, not the "
                          "rows in it, so no other window can be derived. Fix: rebuild"))
    return 1


def _plain(function: str) -> str:
    """A function with the casts of its inputs taken away: `max(cast(v as bigint))` -> `max(v)`."""
    while True:
        stripped = _CAST.sub(r"\1", function)
        if stripped == function:
            return function
        function = stripped


def _aggregates(old: OperatorShape, new: OperatorShape, position: Position
                ) -> tuple[list[Change], tuple[ValuePart, ...]]:
    changes: list[Change] = []
    offsets, at = {}, 0
    for index, aggregate in enumerate(old.aggregates):
        offsets[index] = at
        at += len(aggregate.buffer)
    used: list[int] = []
    values: list[ValuePart] = []
    renamed = []
    for aggregate in new.aggregates:
        index = _match(old.aggregates, aggregate, used)
        if index is not None:
            source = old.aggregates[index]
            used.append(index)
            values += _copied(source, aggregate, offsets[index], new, changes)
            if source.output and aggregate.output and source.output != aggregate.output:
                renamed.append(f"{source.output} -> {aggregate.output}")
            continue
        derived = _derived(old.aggregates, offsets, aggregate)
        if derived is not None:
            values += derived
            changes.append(Change(new.label, "default", ADD_AGGREGATE, EXACT,
                                  f"{aggregate.function} is derived from the buffers the old aggregates kept"))
            continue
        named = next((a for a in old.aggregates if a.output and a.output == aggregate.output), None)
        if named is not None:
            changes.append(Change(new.label, "default", NARROW_OR_MEANING, IMPOSSIBLE,
                                  f"{aggregate.output} was {named.function}, now {aggregate.function}: the stored "
                                  "value means something else. Fix: rebuild, or give the new aggregate a name of its "
                                  "own (added, it is carried from the boundary on)"))
            continue
        if any(v is None for v in _initials(aggregate)):
            changes.append(Change(new.label, "default", ADD_AGGREGATE, IMPOSSIBLE,
                                  f"{aggregate.function} keeps a buffer Spark gives no initial value for, so no "
                                  "state can be made for the keys already held. Fix: rebuild"))
            continue
        values += [ValuePart(c.type, initial=v, merge=_merges(aggregate)[i])
                   for i, (c, v) in enumerate(zip(aggregate.buffer, _initials(aggregate)))]
        changes.append(Change(new.label, "default", ADD_AGGREGATE, PARTIAL,
                              f"{aggregate.function} starts from its initial value for the keys already held: "
                              "complete for windows and keys whose first row is read from the boundary on",
                              position.boundary(new)))
    for index, aggregate in enumerate(old.aggregates):
        if index not in used:
            changes.append(Change(new.label, "default", REMOVE_AGGREGATE, EXACT,
                                  f"{aggregate.function}'s buffer leaves the state"))
    if used != sorted(used):
        order = [old.aggregates[i].function for i in used]
        changes.insert(0, Change(new.label, "default", REORDER, EXACT,
                                 f"aggregates stored as ({', '.join(order)}): Spark's check would pass the new order "
                                 "and read each old buffer as another aggregate's; the buffers are stored in the new "
                                 "order"))
    if renamed:
        changes.append(Change(new.label, "default", RENAME, NATIVE,
                              f"output columns renamed ({', '.join(renamed)}): the state holds no output names"))
    return changes, tuple(values)


def _match(old: tuple[Aggregate, ...], aggregate: Aggregate, used: list[int]) -> int | None:
    for same in (lambda a: a.function == aggregate.function,
                 lambda a: a.name == aggregate.name and _plain(a.function) == _plain(aggregate.function)):
        for index, candidate in enumerate(old):
            if index not in used and same(candidate):
                return index
    return None


def _copied(source: Aggregate, aggregate: Aggregate, offset: int, new: OperatorShape,
            changes: list[Change]) -> list[ValuePart]:
    parts = []
    for i, (was, now) in enumerate(zip(source.buffer, aggregate.buffer)):
        if was.type != now.type:
            if widens(was.type, now.type):
                changes.append(Change(new.label, "default", WIDEN, EXACT,
                                      f"{source.function} -> {aggregate.function}: its buffer {was.name} {was.type} -> "
                                      f"{now.type}, cast"))
            else:
                changes.append(Change(new.label, "default", NARROW_OR_MEANING, IMPOSSIBLE,
                                      f"{source.function} -> {aggregate.function}: its buffer {was.name} {was.type} -> "
                                      f"{now.type} does not hold every old value. Fix: rebuild"))
        parts.append(ValuePart(now.type, offset + i, merge=_merges(aggregate)[i]))
    return parts


def _merges(aggregate: Aggregate) -> tuple[str, ...]:
    return MERGE.get(aggregate.name, ("min",) * len(aggregate.buffer))


def _initials(aggregate: Aggregate) -> tuple[str | None, ...]:
    return aggregate.initial if aggregate.initial else (None,) * len(aggregate.buffer)


def _derived(old: tuple[Aggregate, ...], offsets: dict[int, int], aggregate: Aggregate) -> list[ValuePart] | None:
    """A new aggregate whose buffer the old ones already keep: `sum(x)` or `count(x)` beside an `avg(x)` (its
    buffer is sum and count of x), `avg(x)` from a `sum(x)` and a `count(x)`."""
    inputs = aggregate.inputs
    by = {(a.name, a.inputs): i for i, a in enumerate(old)}
    avg = by.get(("avg", inputs))
    if aggregate.name in ("sum", "count") and avg is not None:
        at = offsets[avg] + (0 if aggregate.name == "sum" else 1)
        if old[avg].buffer[at - offsets[avg]].type == aggregate.buffer[0].type:
            return [ValuePart(aggregate.buffer[0].type, at, merge="sum")]
    total, count = by.get(("sum", inputs)), by.get(("count", inputs))
    if aggregate.name == "avg" and total is not None and count is not None and all(
            widens(old[i].buffer[0].type, c.type) or old[i].buffer[0].type == c.type
            for i, c in zip((total, count), aggregate.buffer)):
        return [ValuePart(aggregate.buffer[0].type, offsets[total], merge="sum"),
                ValuePart(aggregate.buffer[1].type, offsets[count], merge="sum")]
    return None


def _join(old: OperatorShape, new: OperatorShape, position: Position
          ) -> tuple[list[Change], tuple[Rewrite, ...]]:
    """A join's changes: a column buffered that the state never held (impossible), a buffered column's type widened
    (exact) or narrowed (impossible), the join re-keyed by buffered columns (inner: exact; outer: partial, its
    matched flags belonging to the old key). Carried by rewriting each side's rows (re-keyed, re-indexed, cast) and
    their counts per key from them."""
    changes = []
    before = {c.name: c for c in old.values}
    extra = sorted(c.name for c in new.values if c.name not in before)
    if extra:
        changes.append(Change(new.label, "*", FINER_KEY, IMPOSSIBLE,
                              f"the join now buffers ({', '.join(extra)}), which its state never held. Fix: "
                              "rebuild"))
    for c in new.values:
        was = before.get(c.name)
        if was is None or was.type == c.type:
            continue
        if widens(was.type, c.type):
            changes.append(Change(new.label, "*", WIDEN, EXACT, f"buffered column {c.name} {was.type} -> {c.type}: "
                                  "each buffered row's value cast, which loses nothing"))
        else:
            changes.append(Change(new.label, "*", NARROW_OR_MEANING, IMPOSSIBLE,
                                  f"buffered column {c.name} {was.type} -> {c.type} may not hold every value the "
                                  "state holds. Fix: rebuild"))
    if old.join_keys != new.join_keys and new.join_keys:
        sides = zip(("left", "right"), new.join_keys)
        missing = [f"{side}.{column}" for side, columns in sides for column in columns
                   if f"{side}.{column}" not in before]
        if missing:
            changes.append(Change(new.label, "*", JOIN_KEY, IMPOSSIBLE,
                                  f"the new join key ({', '.join(missing)}) is not among the rows the state buffers. "
                                  "Fix: rebuild"))
        elif new.join_type and new.join_type.lower().startswith("inner"):
            changes.append(Change(new.label, "*", JOIN_KEY, EXACT,
                                  f"{_join_keys(old)} -> {_join_keys(new)}: each side's buffered rows re-keyed by "
                                  "the new columns (the state holds the whole input row)"))
        else:
            changes.append(Change(new.label, "*", JOIN_KEY, PARTIAL,
                                  f"{_join_keys(old)} -> {_join_keys(new)}: the rows re-keyed, but an outer join's "
                                  "matched flags belong to the old key", position.boundary(new), runnable=False))
    if not changes:
        return changes, (Rewrite(new.operator_id, new.operator_name, "keep", old.operator_id),)
    rewrites = []
    for side, keys in zip(("left", "right"), new.join_keys or old.join_keys):
        kept = [c for c in old.values if c.name.startswith(side + ".")]
        values = tuple(ValuePart(c.type, kept.index(before[c.name])) for c in new.values
                       if c.name.startswith(side + ".") and c.name in before)
        for store, placement in ((JOIN_ROWS, -1), (JOIN_COUNTS, None)):
            rewrites.append(Rewrite(new.operator_id, new.operator_name, "rewrite", old.operator_id,
                                    values=values, store=f"{side}-{store}", placement=placement,
                                    join_key=tuple(keys)))
    return changes, tuple(rewrites)


def _join_keys(op: OperatorShape) -> str:
    left, right = op.join_keys or ((), ())
    return f"({', '.join(left)} = {', '.join(right)})"


def _tws(old: OperatorShape, new: OperatorShape, position: Position) -> list[Change]:
    changes = []
    before = {c.name: c.type for c in old.values}
    after = {c.name: c.type for c in new.values}
    removed, added = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    if removed:
        changes.append(Change(new.label, "*", TWS_VARIABLES, NATIVE,
                              f"state variables ({', '.join(removed)}) removed: their column families are no longer "
                              "read (the processor's deleteIfExists drops them)"))
    if added:
        renamed = [f"{r} -> {a}" for r in removed for a in added if before[r] == after[a]]
        rename = (f"; if {' or '.join(renamed)} is a rename, that state would be lost: a variable's rename is not "
                  "carried yet" if renamed else "")
        changes.append(Change(new.label, "*", TWS_VARIABLES, PARTIAL,
                              f"state variables ({', '.join(added)}) added: each starts empty for every key, so it is "
                              f"complete only for keys first seen from the boundary on{rename}",
                              position.boundary(new), runnable=False))
    retyped = [name for name in set(before) & set(after) if before[name] != after[name]]
    if retyped or old.keys != new.keys:
        what = (f"variables {', '.join(sorted(retyped))} re-typed" if retyped else
                f"{_keys(old)} -> {_keys(new)}")
        changes.append(Change(new.label, "*", TWS_REWRITE, EXACT,
                              f"{what}: each column family rewritten in the new layout", runnable=False))
    return changes
