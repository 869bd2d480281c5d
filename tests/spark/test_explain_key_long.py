"""explain-key on a join that ran more than 100 micro-batches, so Spark purged offsets/ and commits/.

Input: the generator's orders and payments, 105 small files each (one file per micro-batch, so micro-batch
b reads file b of each input), with its payment cases (never paid, paid too late, paid out of bounds), plus
late orders this test places one minute behind the watermark the oracle replays (tests/oracle.py): within
the join's 5-minute bound of a payment waiting in state, so only the plain watermark drops them. Expected
reasons and batches come from the generator's manifest and the oracle's watermark replay, never from
explain-key; the oracle itself is first checked against the job's output table.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from stateops.checkpoint import Checkpoint
from stateops.explain import explain_key
from stateops.layout import Layout

from jobs.catalog import get_job
from jobs.targets import explain_target
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from tests import oracle
from tests.delta_rows import table_rows

pytestmark = pytest.mark.spark

FILES = 105  # > 100 (minBatchesToRetain): offsets/ and commits/ of the first batches are purged
CONFIG = GeneratorConfig(events=0, orders=3 * FILES, files=FILES, seed=6, never_paid_share=0.15,
                         paid_too_late_share=0.15)
BOUND_MS = 5 * 60_000
LATE_ORDER_BATCHES = (4, 101)  # one long purged from offsets/, one still retained


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _append_keeping_order(path: str, record: dict) -> None:
    """Add a line to a landing file without moving it in the order Spark (and the oracle) read files."""
    stat = os.stat(path)
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _replay(layout: Layout, delay_ms: int):
    orders = oracle.typed_batches(layout.landing("orders"), "orders")
    payments = oracle.typed_batches(layout.landing("payments"), "payments")
    marks = oracle.join_watermarks(orders, payments, delay_ms)
    late_marks = [0, *marks[:-1]]  # a row of batch i is checked against the watermark of batch i - 1
    batch_of = {}
    for name, batches in (("orders", orders), ("payments", payments)):
        for index, rows in enumerate(batches):
            for row in rows:
                batch_of[(name, row["order_id"])] = (index, row["t"])
    return orders, payments, marks, late_marks, batch_of


@pytest.fixture(scope="module")
def long_join(spark, tmp_path_factory):
    layout = Layout(str(tmp_path_factory.mktemp("explain_long") / "stateops"))
    generated = generate(layout, CONFIG)
    spec = get_job("order_payments")
    delay_ms = spec.watermark_seconds * 1000
    _, _, marks, late_marks, _ = _replay(layout, delay_ms)
    late_orders = {}
    for batch in LATE_ORDER_BATCHES:
        # The order lands in file `batch` a minute behind the watermark it is checked against; its payment,
        # a minute ahead of it, lands one file earlier and waits in state. Neither moves any watermark.
        watermark = late_marks[batch]
        order_id = f"o9{batch:05d}"
        _append_keeping_order(generated.files["orders"][batch], {
            "order_id": order_id, "user_id": "u0001", "order_time": _iso(watermark - 60_000), "amount": 10.0})
        _append_keeping_order(generated.files["payments"][batch - 1], {
            "payment_id": f"p9{batch:05d}", "order_id": order_id, "payment_time": _iso(watermark + 60_000),
            "amount": 10.0})
        late_orders[order_id] = batch
    orders, payments, replayed_marks, late_marks, batch_of = _replay(layout, delay_ms)
    assert replayed_marks == marks, "the placed rows must not move the watermark"

    run_job(spark, spec, layout)
    got = table_rows(layout.table("order_payments"), ["order_id", "payment_id", "order_time", "payment_time"])
    assert sorted(got) == sorted(oracle.order_payments(orders, payments, delay_ms)), \
        "the oracle's replay must match this run before it can judge explain-key"
    target = explain_target(spec, layout)
    return {"layout": layout, "target": target, "cases": generated.payment_cases, "marks": marks,
            "late_marks": late_marks, "batch_of": batch_of, "late_orders": late_orders,
            "checkpoint": Checkpoint.open(target.checkpoint)}


def _keys(run, case, where):
    """Order ids of a manifest case whose order the oracle has in a batch for which `where` holds."""
    chosen = [k for k, c in sorted(run["cases"].items()) if c == case and where(run["batch_of"][("orders", k)][0])]
    assert chosen, f"the generator produced no {case} order there"
    return chosen


def _is_late(run, side: str, order_id: str) -> bool:
    """The oracle: the row is at or behind the watermark of the batch before its own."""
    batch, moment = run["batch_of"][(side, order_id)]
    return moment <= run["late_marks"][batch]


def test_offsets_and_commits_are_really_purged(long_join):
    checkpoint = long_join["checkpoint"]
    offsets, commits = checkpoint.offset_batches(), checkpoint.committed_batches()
    assert commits[-1] >= FILES - 1 and len(offsets) <= 101 and offsets[0] > 3 and commits[0] > 3
    sources = os.listdir(os.path.join(checkpoint.path, "sources", "0"))
    assert any(name.endswith(".compact") for name in sources)


def test_old_never_paid_orders_are_purged_by_the_watermark_at_the_batch_the_oracle_says(spark, long_join):
    first_retained = long_join["checkpoint"].offset_batches()[0]
    marks = long_join["marks"]
    for order_id in _keys(long_join, "never_paid", lambda batch: batch < first_retained - 1):
        batch, order_ms = long_join["batch_of"][("orders", order_id)]
        evicted = next(b for b in range(batch, len(marks)) if marks[b] >= order_ms + BOUND_MS)
        result = explain_key(spark, long_join["target"], order_id)
        assert result.reason == "purged_by_watermark", result.explanation
        assert [r["batch_id"] for r in result.inputs] == [batch]
        assert f"batch {batch} " in result.explanation  # read then (the change feed may cover its eviction)
        assert f"at batch {evicted} (watermark {_iso(marks[evicted])})" in result.explanation


def test_late_payments_are_arrived_too_late_old_and_recent(spark, long_join):
    first_retained = long_join["checkpoint"].offset_batches()[0]
    # The manifest's paid-too-late payments land three files late; the oracle confirms each is late (a
    # stalled watermark can let one through, and then the join emits it).
    too_late = [k for k in _keys(long_join, "paid_too_late", lambda batch: True)
                if _is_late(long_join, "payments", k)]
    old = [k for k in too_late if long_join["batch_of"][("payments", k)][0] < first_retained - 1][0]
    recent = [k for k in too_late if long_join["batch_of"][("orders", k)][0] > first_retained + 50][-1]
    for order_id in (old, recent):
        batch = long_join["batch_of"][("payments", order_id)][0]
        result = explain_key(spark, long_join["target"], order_id)
        assert result.reason == "arrived_too_late", result.explanation
        assert [(r["input"], r["batch_id"]) for r in result.inputs] == [
            ("orders", long_join["batch_of"][("orders", order_id)][0]), ("payments", batch)]
        assert result.explanation.startswith(f"payments row of {order_id}")
        assert (f"read in batch {batch}, when the watermark of the batch before was already "
                f"{_iso(long_join['late_marks'][batch])}") in result.explanation


def test_late_orders_within_the_join_bound_are_arrived_too_late(spark, long_join):
    for order_id, placed in long_join["late_orders"].items():
        assert _is_late(long_join, "orders", order_id) and not _is_late(long_join, "payments", order_id)
        batch, late_mark = placed, long_join["late_marks"][placed]
        payment_batch, payment_ms = long_join["batch_of"][("payments", order_id)]
        assert long_join["batch_of"][("orders", order_id)][0] == batch and payment_batch == batch - 1
        assert 0 <= payment_ms - long_join["batch_of"][("orders", order_id)][1] <= BOUND_MS
        result = explain_key(spark, long_join["target"], order_id)
        assert result.reason == "arrived_too_late", result.explanation
        assert result.explanation.startswith(f"orders row of {order_id}")
        assert f"read in batch {batch}, when the watermark of the batch before was already {_iso(late_mark)}" \
            in result.explanation
        assert "payments row" in result.explanation and "purged by the watermark" in result.explanation


def test_old_paid_order_is_emitted(spark, long_join):
    paid = _keys(long_join, "paid", lambda batch: batch < 3)[0]
    assert explain_key(spark, long_join["target"], paid).reason == "emitted"


def test_without_the_progress_table_old_batches_are_undetermined_not_guessed(spark, long_join):
    """The checkpoint alone no longer knows which batch read an old order nor its watermark: say so."""
    target = replace(long_join["target"], progress_table=None)
    first_retained = long_join["checkpoint"].offset_batches()[0]
    old = _keys(long_join, "never_paid", lambda batch: batch < first_retained - 1)[0]
    result = explain_key(spark, target, old)
    assert result.reason == "undetermined", result.explanation
    assert "cannot be told" in result.explanation and result.inputs[0]["batch_id"] is None
    recent = sorted(long_join["late_orders"])[-1]
    assert explain_key(spark, target, recent).reason == "arrived_too_late"
