"""explain-key on a join that ran more than 100 micro-batches, so Spark purged offsets/ and commits/.

Input: the generator's orders and payments, 105 small files each (one file per micro-batch, so micro-batch
b reads file b of each input), with its payment cases (never paid, paid too late, paid out of bounds), plus
late orders this test places one minute behind the watermark the oracle replays (tests/support/oracle.py): within
the join's 5-minute bound of a payment waiting in state, so only the plain watermark drops them. Expected
reasons and batches come from the generator's manifest and the oracle's watermark replay, never from
explain-key; the oracle itself is first checked against the job's output table.
"""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from stateops.explain import explain_key
from tests.support.explain_homes import LONG_JOIN_FILES, iso

pytestmark = [pytest.mark.spark, pytest.mark.long]

FILES = LONG_JOIN_FILES
BOUND_MS = 5 * 60_000


def _keys(run, case, where):
    """Order ids of a manifest case whose order the oracle has in a batch for which `where` holds."""
    chosen = [k for k, c in sorted(run["cases"].items()) if c == case and where(run["batch_of"][("orders", k)][0])]
    assert chosen, f"the generator produced no {case} order there"
    return chosen


def _is_late(run, side: str, order_id: str) -> bool:
    """The oracle: the row is at or behind the watermark of the batch before its own."""
    batch, moment = run["batch_of"][(side, order_id)]
    return moment <= run["late_marks"][batch]


def test_offsets_and_commits_are_really_purged(long_join_home):
    checkpoint = long_join_home["checkpoint"]
    offsets, commits = checkpoint.offset_batches(), checkpoint.committed_batches()
    assert commits[-1] >= FILES - 1 and len(offsets) <= 101 and offsets[0] > 3 and commits[0] > 3
    sources = os.listdir(os.path.join(checkpoint.path, "sources", "0"))
    assert any(name.endswith(".compact") for name in sources)


def test_old_never_paid_orders_are_purged_by_the_watermark_at_the_batch_the_oracle_says(spark, long_join_home):
    first_retained = long_join_home["checkpoint"].offset_batches()[0]
    marks = long_join_home["marks"]
    for order_id in _keys(long_join_home, "never_paid", lambda batch: batch < first_retained - 1):
        batch, order_ms = long_join_home["batch_of"][("orders", order_id)]
        evicted = next(b for b in range(batch, len(marks)) if marks[b] >= order_ms + BOUND_MS)
        result = explain_key(spark, long_join_home["target"], order_id)
        assert result.reason == "purged_by_watermark", result.explanation
        assert [r["batch_id"] for r in result.inputs] == [batch]
        assert f"batch {batch} " in result.explanation  # read then (the change feed may cover its eviction)
        assert f"at batch {evicted} (watermark {iso(marks[evicted])})" in result.explanation


def test_late_payments_are_arrived_too_late_old_and_recent(spark, long_join_home):
    first_retained = long_join_home["checkpoint"].offset_batches()[0]
    # The manifest's paid-too-late payments land three files late; the oracle confirms each is late (a
    # stalled watermark can let one through, and then the join emits it).
    too_late = [k for k in _keys(long_join_home, "paid_too_late", lambda batch: True)
                if _is_late(long_join_home, "payments", k)]
    old = [k for k in too_late if long_join_home["batch_of"][("payments", k)][0] < first_retained - 1][0]
    recent = [k for k in too_late if long_join_home["batch_of"][("orders", k)][0] > first_retained + 50][-1]
    for order_id in (old, recent):
        batch = long_join_home["batch_of"][("payments", order_id)][0]
        result = explain_key(spark, long_join_home["target"], order_id)
        assert result.reason == "arrived_too_late", result.explanation
        assert [(r["input"], r["batch_id"]) for r in result.inputs] == [
            ("orders", long_join_home["batch_of"][("orders", order_id)][0]), ("payments", batch)]
        assert result.explanation.startswith(f"payments row of {order_id}")
        assert (f"read in batch {batch}, when the watermark of the batch before was already "
                f"{iso(long_join_home['late_marks'][batch])}") in result.explanation


def test_late_orders_within_the_join_bound_are_arrived_too_late(spark, long_join_home):
    for order_id, placed in long_join_home["late_orders"].items():
        assert _is_late(long_join_home, "orders", order_id) and not _is_late(long_join_home, "payments", order_id)
        batch, late_mark = placed, long_join_home["late_marks"][placed]
        payment_batch, payment_ms = long_join_home["batch_of"][("payments", order_id)]
        assert long_join_home["batch_of"][("orders", order_id)][0] == batch and payment_batch == batch - 1
        assert 0 <= payment_ms - long_join_home["batch_of"][("orders", order_id)][1] <= BOUND_MS
        result = explain_key(spark, long_join_home["target"], order_id)
        assert result.reason == "arrived_too_late", result.explanation
        assert result.explanation.startswith(f"orders row of {order_id}")
        assert f"read in batch {batch}, when the watermark of the batch before was already {iso(late_mark)}" \
            in result.explanation
        assert "payments row" in result.explanation and "purged by the watermark" in result.explanation


def test_old_paid_order_is_emitted(spark, long_join_home):
    paid = _keys(long_join_home, "paid", lambda batch: batch < 3)[0]
    assert explain_key(spark, long_join_home["target"], paid).reason == "emitted"


def test_without_the_progress_table_old_batches_are_undetermined_not_guessed(spark, long_join_home):
    """The checkpoint alone no longer knows which batch read an old order nor its watermark: say so."""
    target = replace(long_join_home["target"], progress_table=None)
    first_retained = long_join_home["checkpoint"].offset_batches()[0]
    old = _keys(long_join_home, "never_paid", lambda batch: batch < first_retained - 1)[0]
    result = explain_key(spark, target, old)
    assert result.reason == "undetermined", result.explanation
    assert "cannot be told" in result.explanation and result.inputs[0]["batch_id"] is None
    recent = sorted(long_join_home["late_orders"])[-1]
    assert explain_key(spark, target, recent).reason == "arrived_too_late"
