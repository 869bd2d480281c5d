"""What a query's state holds and means, per stateful operator, as plain data: the shape the migration compares
(stateops.migration.classify) and rewrites by (stateops.migration.rewrite).

Spark's schema files say only the types of a store's key and value, by position (their names are ignored by its
own check). A shape adds what produced each part, read from the planned query (stateops.jobs.runtime.state_shapes)
and kept beside the checkpoint by every run (ops/<job>/state_meaning.json, `shapes`): the key columns, the window a
key is bucketed by, each aggregate's function, its input and the buffer fields it keeps in the value, the output
name it is known by; a join's key columns, type and buffered columns; a dedup's key columns.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

AGGREGATION, DEDUP, DEDUP_WITHIN_WATERMARK, SESSION, JOIN, CUSTOM, TWS = (
    "aggregation", "dedup", "dedup_within_watermark", "session", "join", "custom", "tws")


@dataclass(frozen=True)
class Column:
    """A key or value field of a store: its name and Spark's simpleString of its type."""

    name: str
    type: str


@dataclass(frozen=True)
class Window:
    """The time window a key column buckets by, in microseconds (a tumbling window has slide == duration); a
    session window's gap as its duration with `session`."""

    duration_us: int
    slide_us: int
    start_us: int = 0
    session: bool = False

    @property
    def tumbling(self) -> bool:
        return not self.session and self.slide_us == self.duration_us


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of an aggregation: `function` as Spark prints it without expression ids (`max(value)`), its
    name (`max`), its input expressions, the buffer fields it keeps in the stored value (in order), the output
    column it is known by (None when the query does not name it), and Spark's initial buffer values."""

    function: str
    name: str
    inputs: tuple[str, ...]
    buffer: tuple[Column, ...]
    output: str | None = None
    initial: tuple[str | None, ...] = ()  # Spark's initial value of each buffer field, as SQL (none: imperative)


@dataclass(frozen=True)
class OperatorShape:
    """One stateful operator as its query plans it. `keys`: the grouping (or dedup, join) key columns in the key's
    order; `window`: the window of the key column `window_column`; `aggregates`: an aggregation's, in the order its
    buffers are stored; `values`: the columns a join side buffers (`left.amount`), a transformWithState's
    variables (`name: type`); `join_type` for a join; `stores`: the store (or column family) names."""

    operator_id: int
    operator_name: str
    kind: str
    keys: tuple[Column, ...]
    stores: tuple[str, ...] = ("default",)
    window: Window | None = None
    window_column: str | None = None
    aggregates: tuple[Aggregate, ...] = ()
    values: tuple[Column, ...] = ()
    join_type: str | None = None
    join_keys: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (left key columns, right key columns)

    @property
    def label(self) -> str:
        return f"operator {self.operator_id} ({self.operator_name})"

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.keys)

    @property
    def buffer(self) -> tuple[Column, ...]:
        """The stored value's fields, in order (an aggregation's buffers)."""
        return tuple(c for a in self.aggregates for c in a.buffer)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "OperatorShape":
        def columns(items) -> tuple[Column, ...]:
            return tuple(Column(**c) for c in items or ())

        window = data.get("window")
        joins = data.get("join_keys")
        return cls(
            operator_id=int(data["operator_id"]), operator_name=data["operator_name"], kind=data["kind"],
            keys=columns(data.get("keys")), stores=tuple(data.get("stores") or ("default",)),
            window=Window(**window) if window else None, window_column=data.get("window_column"),
            aggregates=tuple(Aggregate(a["function"], a["name"], tuple(a["inputs"]), columns(a["buffer"]),
                                       a.get("output"), tuple(a.get("initial") or ()))
                             for a in data.get("aggregates") or ()),
            values=columns(data.get("values")), join_type=data.get("join_type"),
            join_keys=(tuple(joins[0]), tuple(joins[1])) if joins else None)


@dataclass(frozen=True)
class QueryShape:
    """Every stateful operator of a query, in operator-id order."""

    operators: tuple[OperatorShape, ...] = field(default=())

    def to_list(self) -> list[dict[str, Any]]:
        return [op.to_dict() for op in self.operators]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]] | None) -> "QueryShape":
        return cls(tuple(sorted((OperatorShape.from_dict(i) for i in items or ()), key=lambda o: o.operator_id)))
