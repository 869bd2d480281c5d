"""The verdict: why a key is (or is not) in state and not emitted, as a table of pure rules per kind of state.

`RULES[kind]` lists (reason, rule) in order; a rule returns its explanation, or None when it does not apply,
and the first rule that applies gives the reason. Pure (no Spark, no files), so every reason is unit-tested
on plain data.

Spark's rules that the verdict replays (Spark 4, one global watermark, README "Late rows and restarts"):
- an input row is dropped as late when event time (+ margin, e.g. a session's gap) <= the watermark of the
  batch *before* the one that read it (the plain watermark, for both sides of a join);
- a join keeps a row only while a future row of the other side can still match it (stateops.joins): an
  order until the watermark passes order_time + upper bound, a payment until it passes payment_time - lower
  bound; a row that is not late but already behind that at its own batch is joined against the state and
  not kept;
- the first batch of a restarted run may admit late rows an uninterrupted run would drop.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from stateops.explain.model import Evidence
from stateops.explain.times import ms_text, parse_time, plus, to_ms, to_us
from stateops.timefmt import iso_millis, signed_duration

Rule = Callable[[Evidence], "str | None"]


def judge(evidence: Evidence) -> tuple[str, str]:
    """(reason, explanation) from the first rule of the evidence's kind that applies."""
    for reason, rule in RULES[evidence.kind]:
        text = rule(evidence)
        if text is not None:
            return reason, text
    raise AssertionError("never_arrived applies to any evidence")  # pragma: no cover


# ---------------------------------------------------------------- shared facts


def _wm(ev: Evidence, batch: int) -> int | None:
    """batchWatermarkMs of a batch (0 before the first), None when no longer known."""
    return 0 if batch < 0 else ev.watermarks.get(batch)


def _feed_start(ev: Evidence) -> int | None:
    return ev.feed.get("start_batch_id")


@dataclass(frozen=True)
class Arrival:
    """One input row of the key and what the watermark did to it."""

    row: dict[str, Any]
    side: str | None              # join side (left/right); None for other kinds
    time: datetime | None
    batch: int | None             # the micro-batch that read it; None when no longer known
    late_wm: int | None           # the watermark it was checked against; None when unknown
    late: bool | None             # dropped as late? None when that cannot be known

    @property
    def known(self) -> bool:
        return self.late is not None


def _side(ev: Evidence, input_name: str) -> str | None:
    if ev.join is None:
        return None
    return "left" if input_name == ev.join.left else "right" if input_name == ev.join.right else None


def arrivals(ev: Evidence) -> list[Arrival]:
    """The key's input rows (of a join: of its two sides) with their lateness."""
    out = []
    for row in ev.inputs:
        side = _side(ev, row.get("input", ""))
        if ev.join is not None and side is None:
            continue
        moment, batch = parse_time(row.get("event_time")), row.get("batch_id")
        late_wm = _wm(ev, batch - 1) if batch is not None else None
        late = None
        if moment is not None and late_wm is not None:
            late = to_us(moment) + ev.late_margin_seconds * 1_000_000 <= late_wm * 1000
        out.append(Arrival(row, side, moment, batch, late_wm, late))
    return out


def _restart_note(ev: Evidence, arrival: Arrival) -> str:
    start = _feed_start(ev)
    if arrival.batch in ev.run_starts and (start is None or arrival.batch < start):
        return (f" Batch {arrival.batch} was the first of a restarted run, where Spark may admit late rows; "
                f"the change feed no longer covers it, so it may instead have been stored and evicted.")
    return ""


# ---------------------------------------------------------------- join


_SIDES = ("left", "right")


def _other(side: str) -> str:
    return "right" if side == "left" else "left"


def _side_of(store_name: str) -> str | None:
    for side in _SIDES:
        if store_name.startswith(side + "-"):
            return side
    return None


def _names(ev: Evidence) -> dict[str, str]:
    return {"left": ev.join.left, "right": ev.join.right}


def _times(ev: Evidence) -> dict[str, str]:
    return {"left": ev.join.left_time, "right": ev.join.right_time}


# A row put into state, as Spark's change feed names it: `update`, or `append` for a value added to a key's list (a
# join's values store in state format 4, keyed by join key and event time).
PUTS = ("update", "append")


def _state_rows(ev: Evidence) -> list[dict]:
    """Join rows in state (keyWithIndexToValue, or format 4's keyWithTsToValues: the row and its matched flag)."""
    return [r for r in ev.in_state if not r["store_name"].endswith("keyToNumValues")
            and isinstance(r.get("value"), dict)]


def _updates(ev: Evidence) -> list[dict]:
    return [e for e in ev.history if e["change_type"] in PUTS and isinstance(e.get("value"), dict)
            and "keyToNumValues" not in e["store_name"]]


def _deletes(ev: Evidence) -> list[dict]:
    return [e for e in ev.history if e["change_type"] == "delete" and "keyToNumValues" not in e["store_name"]]


def _stored(ev: Evidence) -> dict[str, set[datetime]]:
    """Event times per side that the state or its change feed shows were stored."""
    times, stored = _times(ev), {"left": set(), "right": set()}
    for r in _state_rows(ev) + _updates(ev):
        side = _side_of(r["store_name"])
        moment = parse_time(r["value"].get(times[side])) if side else None
        if moment is not None:
            stored[side].add(moment)
    return stored


def _keep_until(ev: Evidence, side: str, moment: datetime) -> datetime:
    """While the watermark is below this, a future row of the other side can still match."""
    return plus(moment, ev.join.bound.wait_seconds(side))


def _not_kept(ev: Evidence, a: Arrival) -> bool:
    """Not late, but already behind its side's state watermark at its batch: joined, then not stored."""
    wm = _wm(ev, a.batch) if a.batch is not None else None
    return (a.late is False and a.time is not None and wm is not None
            and to_ms(_keep_until(ev, a.side, a.time)) <= wm)


def _eviction_batch(ev: Evidence, side: str, moment: datetime, after: int) -> int | None:
    """The first batch from `after` on whose watermark passed the row's keep-until time (it was evicted)."""
    until = to_ms(_keep_until(ev, side, moment))
    for batch in sorted(b for b in ev.watermarks if b >= after):
        if ev.watermarks[batch] >= until:
            return batch
    return None


def join_emitted(ev: Evidence) -> str | None:
    if not ev.output:
        return None
    return (f"{len(ev.output)} joined row(s) for {ev.key} are in the output table {ev.output_table} "
            f"as of batch {ev.batch_id}.")


def join_matched(ev: Evidence) -> str | None:
    if not any(r["value"].get("matched") for r in _state_rows(ev) + _updates(ev)):
        return None
    first = min((e["batch_id"] for e in _updates(ev) if e["value"].get("matched")), default=ev.batch_id)
    return (f"the join state marks {ev.key} as matched (batch {first}); an inner join emits a row when it "
            f"matches. The output table was not available to confirm it.")


def _seen(ev: Evidence) -> dict[str, list[datetime]]:
    stored = _stored(ev)
    for a in arrivals(ev):
        if a.time is not None:
            stored[a.side].add(a.time)
    return {side: sorted(times) for side, times in stored.items()}


def join_outside_bound(ev: Evidence) -> str | None:
    seen, join, times = _seen(ev), ev.join, _times(ev)
    if not (seen["left"] and seen["right"]):
        return None
    low, high = join.bound.lower_seconds, join.bound.upper_seconds
    pairs = [(lt, rt) for lt in seen["left"] for rt in seen["right"]]
    outside = [(lt, rt) for lt, rt in pairs if not low <= (rt - lt).total_seconds() <= high]
    if len(outside) != len(pairs):
        return None
    lt, rt = outside[0]
    bound = f"[{signed_duration(low)}, {signed_duration(high)}]"
    return (f"both sides arrived for {ev.key}: {join.left} {times['left']}={iso_millis(lt)} and {join.right} "
            f"{times['right']}={iso_millis(rt)}, {signed_duration((rt - lt).total_seconds())} apart; the join needs "
            f"{times['right']} - {times['left']} within {bound}, so they never match and both are purged "
            f"once the watermark passes them.")


def _other_side_story(ev: Evidence, other: str) -> str:
    names = _names(ev)
    if any(_side_of(r["store_name"]) == other for r in _state_rows(ev)):
        return f" The {names[other]} row is still in state at batch {ev.batch_id} but will never match."
    deleted = [e for e in _deletes(ev) if _side_of(e["store_name"]) == other]
    if deleted:
        return (f" The {names[other]} row had waited in state and was purged by the watermark at batch "
                f"{deleted[0]['batch_id']}.")
    for a in arrivals(ev):
        if a.side == other and a.late is False and not _not_kept(ev, a) and a.time is not None:
            evicted = _eviction_batch(ev, other, a.time, a.batch)
            when = f"at batch {evicted}" if evicted is not None else "later"
            return (f" The {names[other]} row, read in batch {a.batch}, had waited in state and was purged by "
                    f"the watermark {when}.")
    return ""


def join_too_late(ev: Evidence) -> str | None:
    stored, names, times = _stored(ev), _names(ev), _times(ev)
    for a in arrivals(ev):
        if a.time is None or a.time in stored[a.side]:
            continue
        what = f"{names[a.side]} row of {ev.key} ({times[a.side]}={iso_millis(a.time)})"
        if a.late:
            story = (f"{what} was read in batch {a.batch}, when the watermark of the batch before was already "
                     f"{ms_text(a.late_wm)}: at or behind it, so Spark dropped it as late data."
                     + _restart_note(ev, a))
        elif _not_kept(ev, a):
            until = _keep_until(ev, a.side, a.time)
            story = (f"{what} was read in batch {a.batch}: not late (watermark before it {ms_text(a.late_wm)}), "
                     f"but the batch's watermark {ms_text(_wm(ev, a.batch))} had passed {iso_millis(until)}, after "
                     f"which no {names[_other(a.side)]} row can match, so Spark joined it against the state "
                     f"and did not keep it.")
        else:
            continue
        return story + _other_side_story(ev, _other(a.side))
    return None


def join_waiting(ev: Evidence) -> str | None:
    rows = _state_rows(ev)
    if not rows:
        return None
    r, names, times = rows[0], _names(ev), _times(ev)
    side = _side_of(r["store_name"]) or "left"
    moment = parse_time(r["value"].get(times[side]))
    until = iso_millis(_keep_until(ev, side, moment)) if moment else "its bound"
    return (f"{ev.key} is in the {names[side]} join state (operator {r['operator_id']}, store "
            f"{r['store_name']}, partition {r['partition_id']}) at batch {ev.batch_id}, unmatched: no "
            f"{names[_other(side)]} row has arrived. Watermark {ms_text(_wm(ev, ev.batch_id))}; it is purged once "
            f"the watermark passes {until}.")


def join_purged(ev: Evidence) -> str | None:
    deletes = _deletes(ev)
    if not deletes:
        return None
    d, names = deletes[-1], _names(ev)
    side = _side_of(d["store_name"]) or "left"
    # When it entered: the change feed, else the batch that read it (the feed may start after that).
    added = [e["batch_id"] for e in _updates(ev) if _side_of(e["store_name"]) == side] or [
        a.batch for a in arrivals(ev) if a.side == side and a.late is False]
    when = f"at batch {min(added)}" if added else f"before batch {_feed_start(ev)}"
    return (f"{ev.key} entered the {names[side]} join state {when} and was evicted unmatched at batch "
            f"{d['batch_id']} (watermark {ms_text(_wm(ev, d['batch_id']))}); no {names[_other(side)]} row "
            f"arrived in time.")


def join_purged_earlier(ev: Evidence) -> str | None:
    names, times = _names(ev), _times(ev)
    for a in arrivals(ev):
        if a.late is not False or a.time is None:
            continue
        until = _keep_until(ev, a.side, a.time)
        evicted = _eviction_batch(ev, a.side, a.time, a.batch)
        when = (f"at batch {evicted} (watermark {ms_text(_wm(ev, evicted))})" if evicted is not None
                else "(the batch is no longer known)")
        return (f"{names[a.side]} row of {ev.key} ({times[a.side]}={iso_millis(a.time)}) was read in batch {a.batch} on "
                f"time (watermark before it {ms_text(a.late_wm)}) and kept in the {names[a.side]} join state; no "
                f"{names[_other(a.side)]} row matched it, and the watermark passed {iso_millis(until)} {when}, which "
                f"evicted it. {_retained(ev)}")
    return None


def _retained(ev: Evidence) -> str:
    start = _feed_start(ev)
    return f"The retained change feed starts at batch {start}." if start is not None else ""


def undetermined(ev: Evidence) -> str | None:
    unknown = [a for a in arrivals(ev) if not a.known]
    if not unknown:
        return None
    a = unknown[0]
    read = (f"offset {a.row['offset']} of {a.row.get('input')}/{a.row.get('partition')}" if "offset" in a.row
            else f"source batch {a.row.get('source_batch_id')} of input {a.row.get('input')}")
    where = read if a.batch is None else f"batch {a.batch}, whose previous watermark is unknown"
    return (f"{ev.key} was read ({len(unknown)} row(s), first in {where}) but is neither in state, nor in the "
            f"retained change feed (from batch {_feed_start(ev)}), nor in the output. Spark keeps offsets/ for "
            f"its last 100 batches only, and the progress table has no row telling which batch read it or the "
            f"watermark it met: whether it was dropped as late or stored and evicted cannot be told.")


def never_arrived(ev: Evidence) -> str:
    places = ["not in the change feed"]
    if ev.inputs_read:
        places.append("not in the input read so far")
    if ev.output is not None:
        places.append("not in the output")
    note = f" (change feed unavailable: {ev.feed['error']})" if ev.feed.get("error") else ""
    if ev.dead_letters:
        note += (f"; {ev.dead_letters} line(s) of it in the input went to the dead-letter table (unparsable, or "
                 f"a time too far ahead of its arrival), which the stateful query never sees")
    where = places[0] if len(places) == 1 else f"{', '.join(places[:-1])} and {places[-1]}"
    return f"{ev.key} is not in state at batch {ev.batch_id}, {where}{note}."


# ---------------------------------------------------------------- windows, sessions, custom state


def time_hint(row: dict) -> tuple[str, datetime] | None:
    """The event time that decides eviction: a window end in the key, else the latest time in the row
    (a session's end, a timeout or expiry timestamp)."""
    def walk(value: Any, path: str) -> Iterable[tuple[str, Any]]:
        if isinstance(value, dict):
            for k, v in value.items():
                yield from walk(v, f"{path}.{k}" if path else k)
        else:
            yield path, value

    key_leaves = list(walk(row.get("key"), "key"))
    for path, value in key_leaves:
        if path.endswith(".end") and parse_time(value):
            return path, parse_time(value)
    candidates = []
    for path, value in key_leaves + list(walk(row.get("value"), "value")):
        name = path.rsplit(".", 1)[-1].lower()
        if isinstance(value, str) and parse_time(value) and len(value) >= 19:
            candidates.append((path, parse_time(value)))
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0 and (
                "timeout" in name or "expire" in name):
            divisor = 1_000_000 if "micro" in name else 1000
            candidates.append((path, datetime.fromtimestamp(value / divisor, tz=timezone.utc)))
    return max(candidates, key=lambda c: c[1]) if candidates else None


def _state_reason(ev: Evidence, row: dict) -> str:
    hint, wm = time_hint(row), _wm(ev, ev.batch_id)
    if hint is None:
        return "in_state"
    return "waiting_for_watermark" if not wm or to_ms(hint[1]) > wm else "eviction_pending"


def _state_story(ev: Evidence) -> str:
    wm_text = ms_text(_wm(ev, ev.batch_id))
    parts = []
    for r in ev.in_state:
        hint, reason = time_hint(r), _state_reason(ev, r)
        where = (f"operator {r['operator_id']} ({r['operator_name']}) store {r['store_name']} "
                 f"partition {r['partition_id']}")
        if reason == "in_state":
            parts.append(f"{where}: no event time in the state row (watermark {wm_text})")
        elif reason == "waiting_for_watermark":
            parts.append(f"{where}: {hint[0]}={iso_millis(hint[1])} is ahead of the watermark {wm_text}; it is "
                         f"finalized/evicted when the watermark passes it")
        else:
            parts.append(f"{where}: {hint[0]}={iso_millis(hint[1])} is already behind the watermark {wm_text}; "
                         f"it should have been evicted")
    text = f"{ev.key} is in state at batch {ev.batch_id} in {len(ev.in_state)} row(s): " + "; ".join(parts) + "."
    if ev.output:
        text += f" {len(ev.output)} row(s) for it are already in the output table (update mode or earlier results)."
    return text


def _in_state_as(reason: str) -> Rule:
    """The state rule for one reason; reasons rank eviction_pending > waiting_for_watermark > in_state."""
    ranked = ("eviction_pending", "waiting_for_watermark", "in_state")

    def rule(ev: Evidence) -> str | None:
        found = {_state_reason(ev, r) for r in ev.in_state}
        best = next((r for r in ranked if r in found), None)
        return _state_story(ev) if best == reason else None

    rule.__name__ = f"state_{reason}"
    return rule


def state_emitted(ev: Evidence) -> str | None:
    if not ev.output:
        return None
    return f"{ev.key} is not in state at batch {ev.batch_id}; {len(ev.output)} row(s) for it are in the output."


def state_purged(ev: Evidence) -> str | None:
    deletes = [e for e in ev.history if e["change_type"] == "delete"]
    if not deletes:
        return None
    d = deletes[-1]
    return (f"{ev.key} was in state (operator {d['operator_id']} store {d['store_name']}) and was removed at batch "
            f"{d['batch_id']} (watermark {ms_text(_wm(ev, d['batch_id']))}); no output row for it was found.")


def state_deleted(ev: Evidence) -> str | None:
    """Custom state (transformWithState, applyInPandasWithState) is removed by the job's own code: on a timeout, a
    TTL or its own remove(), none of which the change feed records (a delete is a delete)."""
    text = state_purged(ev)
    return None if text is None else text.replace(
        " and was removed at batch", " and was deleted at batch").replace(
        "; no output row", ": by a timeout, a TTL or the job's own remove() (the change feed does not say which); no "
        "output row")


def _margin(ev: Evidence) -> str:
    if not ev.late_margin_seconds:
        return ""
    return (f" (a row stays on time for {signed_duration(ev.late_margin_seconds)} after its event time: "
            f"the {ev.kind} stays open that long)")


def state_too_late(ev: Evidence) -> str | None:
    found = arrivals(ev)
    if not found or not all(a.late for a in found):
        return None
    a = found[0]
    return (f"every row of {ev.key} that the query read ({len(found)}) was dropped as late: the first "
            f"({a.row.get('input')} event time {iso_millis(a.time)}) was read in batch {a.batch}, when the watermark of "
            f"the batch before was already {ms_text(a.late_wm)}{_margin(ev)}. Nothing of it reached the state."
            + _restart_note(ev, a))


def state_purged_earlier(ev: Evidence) -> str | None:
    on_time = [a for a in arrivals(ev) if a.late is False]
    if not on_time:
        return None
    a = on_time[-1]
    return (f"{ev.key} was read on time (last in batch {a.batch}, event time {iso_millis(a.time)}, watermark before it "
            f"{ms_text(a.late_wm)}) but is neither in state at batch {ev.batch_id}, nor in the output, nor in the "
            f"retained change feed: it was stored and evicted before the retained changes. {_retained(ev)}")




JOIN_RULES: tuple[tuple[str, Rule], ...] = (
    ("emitted", join_emitted),
    ("matched", join_matched),
    ("matched_outside_bound", join_outside_bound),
    ("arrived_too_late", join_too_late),
    ("waiting_for_match", join_waiting),
    ("purged_by_watermark", join_purged),
    ("undetermined", undetermined),
    ("purged_by_watermark", join_purged_earlier),
    ("never_arrived", never_arrived),
)

STATE_RULES: tuple[tuple[str, Rule], ...] = (
    ("eviction_pending", _in_state_as("eviction_pending")),
    ("waiting_for_watermark", _in_state_as("waiting_for_watermark")),
    ("in_state", _in_state_as("in_state")),
    ("emitted", state_emitted),
    ("purged_by_watermark", state_purged),
    ("arrived_too_late", state_too_late),
    ("purged_by_watermark", state_purged_earlier),
    ("undetermined", undetermined),
    ("never_arrived", never_arrived),
)


def state_deleted_earlier(ev: Evidence) -> str | None:
    text = state_purged_earlier(ev)
    return None if text is None else text.replace("it was stored and evicted before", "it was stored and deleted "
                                                  "(a timeout, a TTL or the job's own remove()) before")


# Windows and sessions leave state only when the watermark passes them; custom state when its own code says so.
CUSTOM_RULES: tuple[tuple[str, Rule], ...] = tuple(
    ("deleted", {state_purged: state_deleted, state_purged_earlier: state_deleted_earlier}[rule])
    if reason == "purged_by_watermark" else (reason, rule) for reason, rule in STATE_RULES)

RULES: dict[str, tuple[tuple[str, Rule], ...]] = {
    "join": JOIN_RULES,
    "window": STATE_RULES,
    "session": STATE_RULES,
    "custom": CUSTOM_RULES,
}
