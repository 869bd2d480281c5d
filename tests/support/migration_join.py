"""A user's stream-stream join (orders with the payment made within 5 minutes, on the in-memory store: the join's four
stores) and the changed queries the join migration tests move it to, as a module of user code, the config that
registers it, and its input: orders and payments that both carry the user, a payment in four made by another user
than the order's (the re-keyed join on (order_id, user_id) leaves those out), payments landing up to four minutes
after their order, so that orders buffered before a migration meet their payments after it."""
from __future__ import annotations

import json
import os
import random
import time
from datetime import datetime, timedelta, timezone

from stateops.layout import Layout

JOB, FRESH = "paid", "paid_fresh"
MODULE_NAME = "migrated_joins"
FILES, BEFORE = 6, 4  # files per input; the first BEFORE before the migration

MODULE = '''
from functools import reduce

from pyspark.sql import functions as F


def _paid(orders, payments, keys, buffered="float"):
    """Orders joined with their payment within 5 minutes on `keys`; the amounts buffered as `buffered` (each
    amount is a whole number: a float holds it exactly), output as double either way."""
    o = orders.withColumn("amount", F.col("amount").cast(buffered)).alias("o")
    p = payments.withColumn("amount", F.col("amount").cast(buffered)).alias("p")
    condition = reduce(lambda a, b: a & b, [F.col(f"o.{k}") == F.col(f"p.{k}") for k in keys]) & F.expr(
        "p.payment_time >= o.order_time AND p.payment_time <= o.order_time + interval 5 minutes")
    return o.join(p, condition, "inner").select(
        F.col("o.order_id").alias("order_id"), F.col("o.user_id").alias("user_id"),
        F.col("o.order_time").alias("order_time"), F.col("o.amount").cast("double").alias("order_amount"),
        F.col("p.payment_id").alias("payment_id"), F.col("p.user_id").alias("payer_id"),
        F.col("p.payment_time").alias("payment_time"), F.col("p.amount").cast("double").alias("payment_amount"))


def by_order(orders, payments):
    return _paid(orders, payments, ["order_id"])


def by_order_and_user(orders, payments):  # re-keyed: a payment by another user no longer matches
    return _paid(orders, payments, ["order_id", "user_id"])


def by_order_double(orders, payments):  # the buffered amounts widened to double
    return _paid(orders, payments, ["order_id"], "double")


def by_order_and_region(orders, payments):  # re-keyed by a column the state never buffered
    region = F.substring("user_id", 2, 1)
    return _paid(orders.withColumn("region", region), payments.withColumn("region", region), ["order_id", "region"])
'''

CONFIG = """
[catalog]
builtin_jobs = false
{jobs}
"""
JOB_LINES = """
[jobs.{job}]
transformation = "migrated_joins:{transformation}"
state_store = "memory"
watermark_delay = "2 minutes"
watermark_min = "1 minute"
watermark_max = "30 minutes"
output_mode = "append"
idempotent_key = ["order_id", "payment_id"]
output_time_column = "order_time"
join = {{ left = "orders", right = "payments", upper = "5 minutes" }}

[[jobs.{job}.inputs]]
name = "orders"
schema = "order_id STRING, user_id STRING, order_time TIMESTAMP, amount DOUBLE"
time_column = "order_time"

[[jobs.{job}.inputs]]
name = "payments"
schema = "payment_id STRING, order_id STRING, user_id STRING, payment_time TIMESTAMP, amount DOUBLE"
time_column = "payment_time"
"""
COLUMNS = ["order_id", "user_id", "order_time", "order_amount", "payment_id", "payer_id", "payment_time",
           "payment_amount"]


def write_code(folder: str) -> str:
    """The user module in `folder` (once); the folder."""
    path = os.path.join(folder, f"{MODULE_NAME}.py")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as out:
            out.write(MODULE)
    return folder


def config(folder, **transformations: str) -> str:
    """The config file in `folder` registering each job with its transformation of the module; its path."""
    path = folder / f"paid-{'-'.join(transformations.values())}.toml"
    path.write_text(CONFIG.format(jobs="".join(JOB_LINES.format(job=job, transformation=t)
                                               for job, t in transformations.items())))
    return str(path)


def _slices(seed: int = 7, per_file: int = 24) -> dict[str, list[list[str]]]:
    """Each input's lines per file: file i holds the orders of minutes [10 i, 10 i + 10) and the payments whose
    time falls there."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = {"orders": [[] for _ in range(FILES)], "payments": [[] for _ in range(FILES)]}
    for i in range(FILES):
        for n in range(per_file):
            number = i * per_file + n
            user = f"u{rng.randrange(6)}"
            at = t0 + timedelta(minutes=10 * i, milliseconds=rng.randrange(10 * 60 * 1000))
            order = {"order_id": f"o{number:04d}", "user_id": user, "order_time": at.isoformat(),
                     "amount": float(rng.randrange(5, 500))}
            out["orders"][i].append(json.dumps(order))
            paid = at + timedelta(seconds=rng.randrange(5, 240))
            payer = user if number % 4 else f"u{(int(user[1:]) + 1) % 6}"
            slot = int((paid - t0) / timedelta(minutes=10))
            if slot < FILES:
                out["payments"][slot].append(json.dumps({
                    "payment_id": f"p{number:04d}", "order_id": order["order_id"], "user_id": payer,
                    "payment_time": paid.isoformat(), "amount": float(rng.randrange(5, 500))}))
    return out


def write_input(layout: Layout, files: range) -> None:
    """Files `files` of both inputs into the landing zone, each file later than the last (Spark reads them in
    modification order, one per batch and input)."""
    slices = _slices()
    for source, by_file in slices.items():
        root = layout.landing(source)
        os.makedirs(root, exist_ok=True)
        start = max([time.time(), *(os.path.getmtime(os.path.join(root, f)) + 1 for f in os.listdir(root))])
        for n, i in enumerate(files):
            path = os.path.join(root, f"{source}-{i:05d}.json")
            with open(path, "w") as handle:
                handle.write("".join(line + "\n" for line in by_file[i]))
            os.utime(path, (start + n, start + n))
