"""Explain a key on a real order_payments checkpoint: one key per generated payment case, right reason each.

No mocks: the generator writes orders/payments with all four cases, the real job runs bounded (one file per
micro-batch), and explain_key reads the checkpoint with Spark's state reader. Expected reasons come from
the generator's cases and the watermark arithmetic (an order is evicted once the watermark passes
order_time + 5 minutes).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from stateops.explain import REASONS, ExplainError, explain_key
from stateops.checkpoints.state_store import of_checkpoint


pytestmark = pytest.mark.spark

BOUND = timedelta(minutes=5)
STABLE_KEYS = {"job", "key", "batch_id", "watermark", "in_state", "reason", "explanation"}


def _first(cases: dict, case: str, orders: dict, where=lambda order_id: True) -> str:
    chosen = [k for k, c in sorted(cases.items()) if c == case and where(k)]
    assert chosen, f"the generator produced no usable {case} order"
    return chosen[0]


def _expected_never_paid(order_time: datetime, watermark: datetime | None) -> str:
    return "purged_by_watermark" if watermark is not None and order_time + BOUND < watermark else "waiting_for_match"


def _clear_of_watermark(order_time: datetime, watermark: datetime | None) -> bool:
    return watermark is None or abs((order_time + BOUND - watermark).total_seconds()) > 1


def test_each_generated_case_gets_its_reason(spark, explain_join):
    layout, target, cases, orders, checkpoint = explain_join
    assert {"paid", "never_paid", "paid_too_late", "paid_out_of_bounds"} <= set(cases.values())
    latest = checkpoint.latest_committed_batch()
    wm_latest = checkpoint.watermark(latest)

    # paid: matched and written to the output table.
    paid = _first(cases, "paid", orders)
    result = explain_key(spark, target, paid)
    assert STABLE_KEYS <= set(json.loads(result.to_json()))
    assert result.batch_id == latest and result.reason == "emitted", result.explanation
    assert result.output_rows and all(r["order_id"] == paid for r in result.output_rows)

    # never_paid, at the batch it arrived (in state, waiting) and at the latest batch (by the arithmetic).
    never = _first(cases, "never_paid", orders, lambda k: (
        _clear_of_watermark(orders[k][0], wm_latest)
        and _clear_of_watermark(orders[k][0], checkpoint.watermark(orders[k][1]))))
    order_time, arrived = orders[never]
    early = explain_key(spark, target, never, batch_id=arrived)
    assert early.reason == _expected_never_paid(order_time, checkpoint.watermark(arrived)) == "waiting_for_match"
    rows = "keyWithTsToValues" if of_checkpoint(checkpoint.path)[0].join_format == 4 else "keyWithIndexToValue"
    assert [r["store_name"] for r in early.in_state] == [f"left-{rows}"]
    state_row = early.in_state[0]
    assert state_row["operator_id"] == 0 and isinstance(state_row["partition_id"], int)
    assert state_row["value"]["order_id"] == never and state_row["value"]["matched"] is False
    late = explain_key(spark, target, never)
    assert late.reason == _expected_never_paid(order_time, wm_latest), late.explanation
    assert late.reason == "purged_by_watermark" and not late.in_state
    assert any(e["change_type"] == "delete" for e in late.history)


    # paid_too_late: the payment was read after the watermark had passed it and was dropped as late.
    too_late = _first(cases, "paid_too_late", orders)
    result = explain_key(spark, target, too_late)
    assert result.reason == "arrived_too_late", result.explanation
    payments = [r for r in result.inputs if r["input"] == "payments"]
    assert payments and payments[0]["batch_id"] >= orders[too_late][1] + 3
    assert "payments" in result.explanation and "late" in result.explanation

    # paid_out_of_bounds: both sides arrived, 6-9 minutes apart, outside the 5-minute condition.
    outside = _first(cases, "paid_out_of_bounds", orders)
    result = explain_key(spark, target, outside)
    assert result.reason == "matched_outside_bound", result.explanation
    assert {e["store_name"] for e in result.history if e["change_type"] in ("update", "append")} == {
        f"left-{rows}", f"right-{rows}"}

    # A key that never existed.
    assert explain_key(spark, target, "o999999").reason == "never_arrived"

    # Time travel: before its order's file was read, a paid order had not arrived (and was not yet output).
    later_paid = _first(cases, "paid", orders, lambda k: orders[k][1] >= 2)
    before = explain_key(spark, target, later_paid, batch_id=orders[later_paid][1] - 1)
    assert before.reason == "never_arrived" and not before.output_rows, before.explanation
    assert all(r in REASONS for r in ("emitted", "waiting_for_match", "purged_by_watermark", "arrived_too_late",
                                      "matched_outside_bound", "never_arrived"))


def test_batch_that_is_not_committed_is_a_clear_error(spark, explain_join):
    _, target, _, _, checkpoint = explain_join
    with pytest.raises(ExplainError, match=r"batch 99 is not a committed batch .*committed: 0\.\."):
        explain_key(spark, target, "o000001", batch_id=99)
