"""What kind of state a store holds and which of its columns the watermark evicts by (pure, no JVM).

Works on Spark schema JSON (`StructType.jsonValue()`), which both the statestore reader (deep audit) and
the checkpoint's own `_metadata/schema` files (fast audit) provide. Spark tags the event-time column it
evicts by with the field metadata `spark.watermarkDelayMs`; that tag is the ground truth for "this
store is evicted by the watermark". A `dropDuplicates` whose keys carry no such column never evicts.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

WATERMARK_META = "spark.watermarkDelayMs"
VALUES_STORES = ("keyWithIndexToValue", "keyWithTsToValues")  # a join side's rows, several per join key (formats
# 1-3: keyed by join key and index; 4: by join key and event time, `__event_time`)
NUM_VALUES_STORE = "keyToNumValues"  # a join side's keys, each with its number of rows (formats 1-3)
JOIN_KEY_TIME = "__event_time"  # format 4's event-time part of a values store's key
_STRUCT_START = re.compile(r'\{\s*"type"\s*:\s*"struct"')

JOIN = "symmetricHashJoin"
KINDS = {
    "stateStoreSave": "aggregation",
    "dedupe": "dedup",
    "dedupeWithinWatermark": "dedup_within_watermark",
    "sessionWindowStateStoreSaveExec": "session",
    JOIN: "join",
    "applyInPandasWithState": "custom",
    "flatMapGroupsWithState": "custom",
    "transformWithStateExec": "tws",
    "transformWithStateInPandasExec": "tws",
    "transformWithStateInPySparkExec": "tws",
}


@dataclass(frozen=True)
class EventTime:
    """Where a row's event time is: `side` (key/value), field path, and its shape.

    shape: window (struct, compare `end`), timestamp, micros (long, e.g. expiresAtMicros),
    millis (long, e.g. timeoutTimestamp; 0 or negative means unset).
    """

    side: str
    path: tuple[str, ...]
    shape: str
    join_grace: bool = False

    @property
    def column(self) -> str:
        return ".".join((self.side, *self.path) + (("end",) if self.shape == "window" else ()))


@dataclass(frozen=True)
class StoreProfile:
    kind: str
    event_time: EventTime | None
    watermarked: bool  # some column carries the watermark tag: this operator's input has a watermark
    has_matched: bool  # join value store with the `matched` flag
    counts_join_values: bool = False  # a join side's keyToNumValues store: value.value = rows per join key
    keys_carry_time: bool = False  # a join side's values store keyed by (join key, event time): format 4


def kind_of(operator_name: str) -> str:
    return KINDS.get(operator_name, "unknown")


def _fields(schema: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((schema or {}).get("fields", []))


def _tagged(schema: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return [f for f in _fields(schema) if WATERMARK_META in (f.get("metadata") or {})]


def _is_window(field: Mapping[str, Any]) -> bool:
    dtype = field.get("type")
    return isinstance(dtype, Mapping) and any(sub.get("name") == "end" for sub in _fields(dtype))


def _field(schema: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    return next((f for f in _fields(schema) if f.get("name") == name), None)


def _tagged_time(schema, side: str, join_grace: bool = False) -> EventTime | None:
    for field in _tagged(schema):
        if _is_window(field):
            return EventTime(side, (field["name"],), "window", join_grace)
        if field.get("type") in ("timestamp", "timestamp_ntz"):
            return EventTime(side, (field["name"],), "timestamp", join_grace)
    return None


def profile(operator_name: str, store_name: str, key_schema: Mapping[str, Any] | None,
            value_schema: Mapping[str, Any] | None) -> StoreProfile:
    """Classify one store from its operator name, store name and key/value schemas."""
    kind = kind_of(operator_name)
    watermarked = bool(_tagged(key_schema) or _tagged(value_schema))
    event_time: EventTime | None = None
    has_matched = False
    if kind in ("aggregation", "dedup"):
        event_time = _tagged_time(key_schema, "key")
    elif kind == "dedup_within_watermark" and _field(value_schema, "expiresAtMicros"):
        event_time = EventTime("value", ("expiresAtMicros",), "micros")
    elif kind == "session":
        event_time = _tagged_time(value_schema, "value") or _tagged_time(key_schema, "key")
    elif kind == "join" and store_name.endswith(VALUES_STORES):
        event_time = _tagged_time(value_schema, "value", join_grace=True)
        has_matched = _field(value_schema, "matched") is not None
    elif kind == "custom" and _field(value_schema, "timeoutTimestamp"):
        event_time = EventTime("value", ("timeoutTimestamp",), "millis")
    counts_join_values = (kind == "join" and store_name.endswith(NUM_VALUES_STORE)
                          and _field(value_schema, "value") is not None)
    keys_carry_time = kind == "join" and _field(key_schema, JOIN_KEY_TIME) is not None
    return StoreProfile(kind, event_time, watermarked, has_matched, counts_join_values, keys_carry_time)


def parse_schema_file(data: bytes) -> tuple[dict | None, dict | None]:
    """Key and value schema JSON from a checkpoint's `state/<op>/0/[<store>/]_metadata/schema` file.

    The file is binary framing (version, chunk counts, UTF lengths) around two JSON documents; scanning
    for the JSON objects is robust to the framing of schema format versions 1 and 2.
    """
    text = data.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    found: list[dict] = []
    pos = 0
    while len(found) < 2:
        match = _STRUCT_START.search(text, pos)
        if not match:
            break
        try:
            obj, pos = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            pos = match.start() + 1
            continue
        found.append(obj)
    return (found[0] if found else None, found[1] if len(found) > 1 else None)
