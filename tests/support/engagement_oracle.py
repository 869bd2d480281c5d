"""The oracle of the example user job (examples/engagement.py), in plain Python: what its Delta table and
its state must hold after it has read the landing files (or given batches: Kafka records as batches read them).

Replays the files one batch each, as tests/support/oracle.py does: an event is dropped when it is late (its time
at or behind the watermark of the batch before) or when its event_id is still in the dedup state (kept
until the watermark passes its time plus the delay). Every other event counts for its user. The TTL
(7 days of processing time) never expires within a test. Nothing imports Spark.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from tests.support import oracle

DELAY_MS = 10 * 60_000


Input = str | list[list[dict]]  # a landing folder (one file per batch), or the typed rows of each batch


def kept_events(source: Input, delay_ms: int = DELAY_MS) -> list[dict]:
    """The events that pass the watermark and the deduplication, in batch order."""
    batches = oracle.typed_batches(source, "events") if isinstance(source, str) else source
    marks = oracle._watermarks(batches, delay_ms)
    seen: dict[str, int] = {}  # event_id -> time + delay; evicted once the watermark passes it
    kept = []
    for batch, previous in zip(batches, [0, *marks[:-1]]):
        seen = {k: v for k, v in seen.items() if v > previous}
        for row in batch:
            if row["t"] <= previous or row["event_id"] in seen:
                continue
            seen[row["event_id"]] = row["t"] + delay_ms
            kept.append(row)
    return kept


def engagement(source: Input, delay_ms: int = DELAY_MS) -> dict[str, tuple]:
    """user_id -> (events, value_sum rounded to 6 places, first ms, last ms, top action, its events)."""
    by_user: dict[str, list[dict]] = defaultdict(list)
    for row in kept_events(source, delay_ms):
        by_user[row["user_id"]].append(row)
    result = {}
    for user, rows in by_user.items():
        actions = Counter(r["action"] for r in rows)
        top, top_events = min(actions.items(), key=lambda item: (-item[1], item[0]))
        result[user] = (len(rows), round(sum(r["value"] for r in rows), 6), min(r["t"] for r in rows),
                        max(r["t"] for r in rows), top, top_events)
    return result


def state_rows(source: Input, delay_ms: int = DELAY_MS) -> dict[str, int]:
    """Rows each state variable holds: `summary` one per user, `actions` one per user and action."""
    kept = kept_events(source, delay_ms)
    return {"summary": len({r["user_id"] for r in kept}),
            "actions": len({(r["user_id"], r["action"]) for r in kept})}


def table(layout) -> dict[str, tuple]:
    """The user job's Delta table (under `layout`, any storage) in engagement()'s terms."""
    from stateops.delta import open_table

    rows = open_table(layout.table("user_engagement")).to_pyarrow_table().to_pylist()
    return {r["user_id"]: (r["events"], round(r["value_sum"], 6), int(r["first_event_time"].timestamp() * 1000),
                           int(r["last_event_time"].timestamp() * 1000), r["top_action"], r["top_action_events"])
            for r in rows}
