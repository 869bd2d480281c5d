"""A user's windowed job (count, max and min of `value` per 5-minute window and user) and the changed queries the
migration tests move it to, as a module of user code and the config file that registers it: the Spark migration
tests and the migration's kill trials share them."""
from __future__ import annotations

import os

from tests.support.scenarios import KAFKA_PER_TRIGGER

JOB, FRESH = "clicks", "clicks_fresh"
MODULE_NAME = "migrated_queries"

MODULE = '''
from pyspark.sql import functions as F


def _windows(events, length, keys, *aggregates):
    """(name, aggregate) pairs, output in their order (a final select in another order would be folded into the
    aggregate by Spark's optimizer, putting the state's fields back in the old order)."""
    grouped = events.groupBy(F.window("event_time", length), *keys)
    return (grouped.agg(F.count(F.lit(1)).alias("events"), *(column.alias(name) for name, column in aggregates))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    (F.col(keys[0]) if keys else F.lit("all")).alias("group_key"), "events",
                    *(name for name, _ in aggregates)))


def hi_lo(events):
    return _windows(events, "5 minutes", ["user_id"], ("hi", F.max("value")), ("lo", F.min("value")))


def lo_hi(events):  # reordered: Spark's check passes it and would read the old maxima as minima
    return _windows(events, "5 minutes", ["user_id"], ("lo", F.min("value")), ("hi", F.max("value")))


def hi_lo_total(events):  # an aggregate added: complete from the boundary on
    return _windows(events, "5 minutes", ["user_id"], ("hi", F.max("value")), ("lo", F.min("value")),
                    ("total", F.sum("value")))


def hi_only(events):  # an aggregate removed
    return _windows(events, "5 minutes", ["user_id"], ("hi", F.max("value")))


def lo_hi_float(events):  # reordered, and `hi` written as float where the table holds double
    return lo_hi(events).withColumn("hi", F.col("hi").cast("float"))


def hi_lo_15(events):  # the tumbling window three times as long
    return _windows(events, "15 minutes", ["user_id"], ("hi", F.max("value")), ("lo", F.min("value")))


def hi_lo_by_action(events):  # a key the state never held
    return _windows(events, "5 minutes", ["user_id", "action"], ("hi", F.max("value")), ("lo", F.min("value")))


def hi_lo_deduped(events):  # a dedup added before the aggregation
    return hi_lo(events.dropDuplicatesWithinWatermark(["event_id"]))


def lo_hi_deduped(events):  # reordered behind the same dedup: the dedup's state kept as it is
    return lo_hi(events.dropDuplicatesWithinWatermark(["event_id"]))


def hi_lo_uid(events):  # the key column renamed before the grouping: StateOps cannot tell it from another column
    return _windows(events.withColumnRenamed("user_id", "uid"), "5 minutes", ["uid"], ("hi", F.max("value")),
                    ("lo", F.min("value")))


def renamed_key(state, operator):  # the user's rule for it (--transform): the same values under the new name
    key = F.struct(F.col("key.window").alias("window"), F.col("key.user_id").alias("uid"))
    return state.select(key.alias("key"), "value")


def failing_rule(state, operator):  # a rule that fits the new query's schema and fails as its rows are written
    value = F.when(F.col("value").isNotNull(), F.raise_error(F.lit("the rule failed"))).otherwise(F.col("value"))
    return renamed_key(state, operator).select("key", value.alias("value"))


def key_as_number(state, operator):  # a rule whose key does not fit the new query's state
    key = F.struct(F.col("key.window").alias("window"), F.length("key.user_id").alias("uid"))
    return state.select(key.alias("key"), "value")
'''

CONFIG = """
[catalog]
builtin_jobs = false
{jobs}
"""
JOB_LINES = """
[jobs.{job}]
transformation = "migrated_queries:{transformation}"
watermark_delay = "10 minutes"
watermark_min = "5 minutes"
watermark_max = "2 hours"
output_mode = "update"
merge_keys = ["window_start", "window_end", "group_key"]
output_time_column = "window_start"

[[jobs.{job}.inputs]]
name = "events"
schema = "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE"
time_column = "event_time"
"""


def write_code(folder: str) -> str:
    """The user module in `folder` (once); the folder."""
    path = os.path.join(folder, f"{MODULE_NAME}.py")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        with open(path, "w") as out:
            out.write(MODULE)
    return folder


def config(folder, state_store: str | None = None, kafka: str | None = None, **transformations: str) -> str:
    """The config file in `folder` registering each job with its transformation of the module (on `state_store`;
    reading the broker `kafka`'s topic `events`, KAFKA_PER_TRIGGER records a batch, when given); its path."""
    path = folder / f"clicks-{'-'.join(transformations.values())}.toml"  # one file per query: each stays as written
    extra = f'state_store = "{state_store}"\n' if state_store else ""
    if kafka:
        extra += (f'source = "kafka"\nkafka_bootstrap_servers = "{kafka}"\n'
                  f'kafka_options = {{ maxOffsetsPerTrigger = "{KAFKA_PER_TRIGGER}" }}\n')
    path.write_text(CONFIG.format(jobs="".join(JOB_LINES.format(job=job, transformation=t).replace(
        "output_mode =", extra + "output_mode =") for job, t in transformations.items())))
    return str(path)
