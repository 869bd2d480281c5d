"""The explain-key verdict rules, one case per reason for each kind of state, on plain data (no JVM).

Shapes of state rows and change events are those Spark's state reader returns for the four jobs (see
tests/spark/test_explain_key*.py for the real thing). The timeline: batch b reads the event-time slice
[10b, 10b + 10) minutes, and its watermark is 10b - 2 minutes (0 for batch 0): the plain watermark a row
of batch b is checked against is that of batch b - 1.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from stateops.explain import REASONS, Evidence, JoinSpec
from stateops.explain.times import to_ms
from stateops.timefmt import iso_millis
from stateops.explain.verdict import RULES, judge
from stateops.joins import JoinBound

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
JOIN = JoinSpec("orders", "payments", "order_time", "payment_time", JoinBound(lower_seconds=0, upper_seconds=300))
WATERMARKS = {b: (to_ms(T0 + timedelta(minutes=10 * b - 2)) if b else 0) for b in range(20)}
FEED = {"start_batch_id": 10, "end_batch_id": 19}


def ts(minutes: float) -> str:
    return iso_millis(T0 + timedelta(minutes=minutes))


def ms(minutes: float) -> int:
    return to_ms(T0 + timedelta(minutes=minutes))


def evidence(kind: str, **fields) -> Evidence:
    base = dict(kind=kind, key="o1" if kind == "join" else "u1", batch_id=19, watermarks=WATERMARKS,
                output=[], feed=FEED, inputs_read=True, output_table="out",
                join=JOIN if kind == "join" else None,
                late_margin_seconds=15 * 60 if kind == "session" else 0)
    base.update(fields)
    return Evidence(**base)


# ---------------------------------------------------------------- join rows


def order(batch, minutes, input_name="orders"):
    return {"input": input_name, "batch_id": batch, "source_batch_id": batch, "event_time": ts(minutes),
            "row": {"order_id": "o1"}}


def payment(batch, minutes):
    return order(batch, minutes, "payments")


def join_state(side, minutes, matched=False):
    column = "order_time" if side == "left" else "payment_time"
    return {"operator_id": 0, "operator_name": "symmetricHashJoin", "store_name": f"{side}-keyWithIndexToValue",
            "partition_id": 1, "key": {"field0": "o1", "index": 0},
            "value": {"order_id": "o1", column: ts(minutes), "matched": matched}}


def join_change(side, batch, change, minutes=None):
    column = "order_time" if side == "left" else "payment_time"
    value = {"order_id": "o1", column: ts(minutes), "matched": False} if change == "update" else None
    return {"operator_id": 0, "store_name": f"{side}-keyWithIndexToValue", "batch_id": batch,
            "change_type": change, "partition_id": 1, "key": {"field0": "o1", "index": 0}, "value": value}


JOIN_CASES = {
    "emitted": (evidence("join", output=[{"order_id": "o1"}]), ["output table out"]),
    "matched": (evidence("join", output=None, in_state=[join_state("left", 185, matched=True)]),
                ["matched", "not available"]),
    "matched_outside_bound": (evidence("join", inputs=[order(10, 105), payment(11, 113)],
                                       history=[join_change("left", 10, "update", 105),
                                                join_change("right", 11, "update", 113)]),
                              ["8m00.0s apart"]),
    # A late payment: the order waited in state and was purged; the payment was read after the watermark.
    "arrived_too_late": (evidence("join", inputs=[order(10, 105), payment(13, 107)],
                                  history=[join_change("left", 10, "update", 105), join_change("left", 12, "delete")]),
                         ["payments row", "batch 13", ts(118), "dropped it as late",
                          "purged by the watermark at batch 12"]),
    "waiting_for_match": (evidence("join", in_state=[join_state("left", 185)]),
                          ["orders join state", ts(190)]),
    "purged_by_watermark": (evidence("join", inputs=[order(15, 155)],
                                     history=[join_change("left", 15, "update", 155),
                                              join_change("left", 16, "delete")]),
                            ["entered the orders join state at batch 15", "evicted unmatched at batch 16"]),
    # Read before the retained offsets/, with no progress row: which batch read it is unknown.
    "undetermined": (evidence("join", inputs=[{**order(None, 35), "source_batch_id": 3}]),
                     ["source batch 3 of input orders", "cannot be told"]),
    "never_arrived": (evidence("join"), ["not in the input read so far and not in the output"]),
}


def test_each_join_reason():
    for reason, (ev, phrases) in JOIN_CASES.items():
        got, text = judge(ev)
        assert got == reason, (reason, text)
        for phrase in phrases:
            assert phrase in text, (reason, phrase, text)


def test_a_late_order_within_the_join_bound_is_arrived_too_late():
    """Spark drops join input against the previous batch's plain watermark on both sides: an order 1 minute
    behind it is dropped, although it is within the 5-minute bound of a payment waiting in state."""
    ev = evidence("join", inputs=[payment(11, 109), order(12, 107)],
                  history=[join_change("right", 11, "update", 109), join_change("right", 12, "delete")])
    reason, text = judge(ev)
    assert reason == "arrived_too_late", text
    assert text.startswith("orders row of o1") and f"already {ts(108)}" in text
    assert "payments row had waited in state and was purged by the watermark at batch 12" in text


def test_an_order_behind_the_state_watermark_of_its_batch_is_not_kept():
    """Not late (watermark before its batch 98), but at its batch the watermark 108 is past order_time + 5m."""
    reason, text = judge(evidence("join", inputs=[order(11, 100.5)]))
    assert reason == "arrived_too_late" and "did not keep it" in text, text


def test_an_old_never_paid_order_is_purged_at_the_batch_the_watermark_passed_it():
    ev = evidence("join", inputs=[order(3, 35)])  # keep until 40; watermark 38 at batch 4, 48 at batch 5
    reason, text = judge(ev)
    assert reason == "purged_by_watermark", text
    assert "read in batch 3 on time" in text and f"passed {ts(40)} at batch 5" in text
    assert "change feed starts at batch 10" in text


def test_an_eviction_in_the_feed_of_a_row_stored_before_it_says_when_it_was_read():
    ev = evidence("join", inputs=[order(9, 95)], history=[join_change("left", 10, "delete")])
    reason, text = judge(ev)
    assert reason == "purged_by_watermark" and "entered the orders join state at batch 9 and" in text, text
    reason, text = judge(evidence("join", history=[join_change("left", 10, "delete")]))
    assert "entered the orders join state before batch 10" in text, text


def test_a_batch_whose_watermark_is_unknown_is_undetermined():
    watermarks = {b: m for b, m in WATERMARKS.items() if b != 2}
    reason, text = judge(evidence("join", watermarks=watermarks, inputs=[order(3, 35)]))
    assert reason == "undetermined" and "batch 3, whose previous watermark is unknown" in text, text


def test_a_late_row_in_the_first_batch_of_a_restart_says_it_may_have_been_admitted():
    ev = evidence("join", inputs=[order(3, 35), payment(6, 36)], run_starts=frozenset({6}))
    reason, text = judge(ev)
    assert reason == "arrived_too_late" and "first of a restarted run" in text, text
    covered = evidence("join", inputs=[order(14, 144), payment(16, 146)], run_starts=frozenset({16}))
    reason, text = judge(covered)
    assert reason == "arrived_too_late" and "restarted" not in text, text  # the feed covers batch 16


def test_never_arrived_counts_the_dead_letters_of_the_key():
    reason, text = judge(evidence("custom", dead_letters=2))
    assert reason == "never_arrived" and "2 line(s) of it in the input went to the dead-letter table" in text


def test_a_row_found_in_state_is_never_judged_late():
    ev = evidence("join", inputs=[order(13, 107)], in_state=[join_state("left", 107)])
    assert judge(ev)[0] == "waiting_for_match"


# ---------------------------------------------------------------- windows, sessions, custom state


def event(batch, minutes):
    return {"input": "events", "batch_id": batch, "source_batch_id": batch, "event_time": ts(minutes),
            "row": {"user_id": "u1"}}


def window_row(end):
    return {"operator_id": 0, "operator_name": "stateStoreSave", "store_name": "default", "partition_id": 2,
            "key": {"window": {"start": ts(end - 5), "end": ts(end)}, "user_id": "u1"},
            "value": {"count": 2, "sum": 30.0}}


def session_row(end):
    return {"operator_id": 0, "operator_name": "sessionWindowStateStoreSaveExec", "store_name": "default",
            "partition_id": 0, "key": {"user_id": "u1", "sessionStartTime": ts(end - 20)},
            "value": {"session_window": {"start": ts(end - 20), "end": ts(end)}, "user_id": "u1", "count": 3,
                      "min": ts(end - 20), "max": ts(end - 15)}}


def custom_row(timeout):
    return {"operator_id": 0, "operator_name": "applyInPandasWithState", "store_name": "default",
            "partition_id": 3, "key": {"user_id": "u1"},
            "value": {"groupState": {"action_count": 4, "last_action": "buy", "first_ms": ms(100),
                                     "last_ms": ms(150)}, "timeoutTimestamp": timeout}}


def dedup_row():
    """dropDuplicates without a watermark: the state row has no event time at all."""
    return {"operator_id": 1, "operator_name": "dedupe", "store_name": "default", "partition_id": 0,
            "key": {"event_id": "e1", "user_id": "u1"}, "value": None}


def change(batch, kind):
    return {"operator_id": 0, "store_name": "default", "batch_id": batch, "change_type": kind,
            "partition_id": 0, "key": {"user_id": "u1"}, "value": None}


STATE_ROWS = {
    "window": {"ahead": window_row(190), "behind": window_row(180), "timeless": dedup_row()},
    "session": {"ahead": session_row(200), "behind": session_row(180), "timeless": None},
    "custom": {"ahead": custom_row(ms(200)), "behind": custom_row(ms(180)), "timeless": custom_row(-1)},
}


def state_cases(kind: str) -> dict[str, tuple[Evidence, list[str]]]:
    rows = STATE_ROWS[kind]
    cases = {
        "waiting_for_watermark": (evidence(kind, in_state=[rows["ahead"]]), ["ahead of the watermark", ts(188)]),
        "eviction_pending": (evidence(kind, in_state=[rows["ahead"], rows["behind"]]),
                             ["already behind the watermark", "should have been evicted"]),
        "emitted": (evidence(kind, output=[{"user_id": "u1"}]), ["1 row(s) for it are in the output"]),
        # custom state is deleted by its own code (a timeout, a TTL, remove()): not said to be the watermark's doing
        "deleted" if kind == "custom" else "purged_by_watermark": (
            evidence(kind, history=[change(15, "update"), change(16, "delete")], inputs=[event(15, 151)]),
            ["deleted at batch 16", "a timeout, a TTL or the job's own remove()"] if kind == "custom"
            else ["removed at batch 16"]),
        # Every row of the key was read after the watermark had passed it (even with a session's gap).
        "arrived_too_late": (evidence(kind, inputs=[event(13, 100), event(14, 110)]),
                             ["every row of u1", "(2) was dropped as late", "batch 13", ts(118)]),
        "undetermined": (evidence(kind, inputs=[event(None, 35)]), ["cannot be told"]),
        "never_arrived": (evidence(kind), ["not in the input read so far"]),
    }
    if rows["timeless"] is not None:
        cases["in_state"] = (evidence(kind, in_state=[rows["timeless"]]), ["no event time in the state row"])
    return cases


@pytest.mark.parametrize("kind", ["window", "session", "custom"])
def test_each_state_reason(kind):
    for reason, (ev, phrases) in state_cases(kind).items():
        got, text = judge(ev)
        assert got == reason, (kind, reason, text)
        for phrase in phrases:
            assert phrase in text, (kind, reason, phrase, text)


@pytest.mark.parametrize("kind", ["window", "session", "custom"])
def test_a_key_read_on_time_but_gone_was_purged_before_the_retained_changes(kind):
    reason, text = judge(evidence(kind, inputs=[event(3, 35)]))
    assert reason == ("deleted" if kind == "custom" else "purged_by_watermark"), text
    assert "read on time (last in batch 3" in text, text


def test_a_session_row_stays_on_time_for_the_gap_after_its_event_time():
    """Late once event time + 15m <= the previous watermark (108 at batch 12): 90 is late, 100 is not."""
    assert judge(evidence("session", inputs=[event(12, 90)]))[0] == "arrived_too_late"
    assert judge(evidence("session", inputs=[event(12, 100)]))[0] == "purged_by_watermark"
    assert judge(evidence("custom", inputs=[event(12, 100)]))[0] == "arrived_too_late"


def test_one_row_on_time_is_not_arrived_too_late():
    reason, _ = judge(evidence("custom", inputs=[event(13, 100), event(14, 141)]))
    assert reason == "deleted"


def test_every_rule_reason_is_documented_and_covered():
    covered = {"join": set(JOIN_CASES)} | {k: set(state_cases(k)) for k in ("window", "session", "custom")}
    for kind, rules in RULES.items():
        reasons = {reason for reason, _ in rules}
        assert reasons <= set(REASONS)
        assert reasons - covered[kind] <= {"in_state"}, (kind, reasons - covered[kind])
    assert set(REASONS) == {r for rules in RULES.values() for r, _ in rules}
