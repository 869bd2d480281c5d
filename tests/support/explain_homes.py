"""Homes for the explain-key tests (tests/spark/test_explain_key*.py), each built once per module by a fixture
of tests/spark/conftest.py: a join with every payment case, a user dropped as late by the jobs without a join,
and a join of more than 100 micro-batches."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.targets import explain_target
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.layout import Layout
from tests.support import oracle
from tests.support.delta_rows import table_rows

EXPLAIN_JOIN_INPUT = GeneratorConfig(events=0, orders=120, files=6, seed=11)


def build_explain_join(spark, root) -> tuple:
    """order_payments run bounded (one file per micro-batch) over the generator's orders and payments with all four
    payment cases. Returns (layout, explain target, payment cases, order id -> (order time, batch), checkpoint)."""
    layout = Layout(os.path.join(str(root), "stateops"))
    generated = generate(layout, EXPLAIN_JOIN_INPUT)
    spec = get_job("order_payments")
    run_job(spark, spec, layout, settings=read_settings())
    orders = {}
    for path in generated.files["orders"]:
        batch = int(os.path.basename(path).rsplit("-", 1)[1].split(".")[0])  # one file per micro-batch
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                orders[row["order_id"]] = (datetime.fromisoformat(row["order_time"].replace("Z", "+00:00")), batch)
    target = explain_target(spec, layout)
    return layout, target, generated.payment_cases, orders, Checkpoint.open(target.checkpoint)


LATE_USER_INPUT = GeneratorConfig(events=240, files=4, users=20, seed=21)
LATE_USER = "u9999"
LATE_USER_JOBS = ("user_activity", "user_sessions", "user_actions")


def build_late_user_homes(spark, root) -> tuple:
    """The generator's events plus one event of LATE_USER two hours behind the first file's, in the last file;
    user_activity, user_sessions and user_actions run over them. Returns (layout, the oracle's typed batches)."""
    layout = Layout(os.path.join(str(root), "stateops"))
    generated = generate(layout, LATE_USER_INPUT)
    last = generated.files["events"][-1]
    stat = os.stat(last)
    with open(last, "a") as handle:  # two hours behind the first file's events, in the last file
        handle.write(json.dumps({"event_id": "e-late-1", "user_id": LATE_USER, "event_time":
                                 "2025-12-31T22:00:00.000Z", "action": "buy", "value": 5.0}) + "\n")
    os.utime(last, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # keep the order Spark reads files in
    for job in LATE_USER_JOBS:
        run_job(spark, get_job(job), layout, settings=read_settings())
    return layout, oracle.typed_batches(layout.landing("events"), "events")


LONG_JOIN_FILES = FILES = 105  # > 100 (minBatchesToRetain): offsets/ and commits/ of the first batches are purged
LONG_JOIN_INPUT = GeneratorConfig(events=0, orders=3 * FILES, files=FILES, seed=6, never_paid_share=0.15,
                         paid_too_late_share=0.15)
LONG_JOIN_LATE_ORDER_BATCHES = LATE_ORDER_BATCHES = (4, 101)  # one long purged from offsets/, one still retained


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _append_keeping_order(path: str, record: dict) -> None:
    """Add a line to a landing file without moving it in the order Spark (and the oracle) read files."""
    stat = os.stat(path)
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def replay(layout: Layout, delay_ms: int):
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


def build_long_join(spark, root) -> dict:
    """order_payments over LONG_JOIN_FILES files of orders and payments (more than minBatchesToRetain, so Spark
    purged offsets/ and commits/ of the first batches), plus late orders placed a minute behind the watermark
    the oracle replays (in batches LONG_JOIN_LATE_ORDER_BATCHES), each with a payment a minute ahead of it one
    file earlier; the table checked against the oracle before it can judge explain-key."""
    layout = Layout(os.path.join(str(root), "stateops"))
    generated = generate(layout, LONG_JOIN_INPUT)
    spec = get_job("order_payments")
    delay_ms = spec.watermark_seconds * 1000
    _, _, marks, late_marks, _ = replay(layout, delay_ms)
    late_orders = {}
    for batch in LATE_ORDER_BATCHES:
        # The order lands in file `batch` a minute behind the watermark it is checked against; its payment,
        # a minute ahead of it, lands one file earlier and waits in state. Neither moves any watermark.
        watermark = late_marks[batch]
        order_id = f"o9{batch:05d}"
        _append_keeping_order(generated.files["orders"][batch], {
            "order_id": order_id, "user_id": "u0001", "order_time": iso(watermark - 60_000), "amount": 10.0})
        _append_keeping_order(generated.files["payments"][batch - 1], {
            "payment_id": f"p9{batch:05d}", "order_id": order_id, "payment_time": iso(watermark + 60_000),
            "amount": 10.0})
        late_orders[order_id] = batch
    orders, payments, replayed_marks, late_marks, batch_of = replay(layout, delay_ms)
    assert replayed_marks == marks, "the placed rows must not move the watermark"

    run_job(spark, spec, layout, settings=read_settings())
    got = table_rows(layout.table("order_payments"), ["order_id", "payment_id", "order_time", "payment_time"])
    assert sorted(got) == sorted(oracle.order_payments(orders, payments, delay_ms)), \
        "the oracle's replay must match this run before it can judge explain-key"
    target = explain_target(spec, layout)
    return {"layout": layout, "target": target, "cases": generated.payment_cases, "marks": marks,
            "late_marks": late_marks, "batch_of": batch_of, "late_orders": late_orders,
            "checkpoint": Checkpoint.open(target.checkpoint)}
