"""The stateful transformations of the four standard jobs. Each takes the parsed input streams by name."""
from __future__ import annotations

from typing import Callable, Iterator, Mapping

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from stateops.durations import parse_seconds, spark_interval
from stateops.joins import JoinBound

from jobs.spec import JobSpec

ACTIVITY_WINDOW = "5 minutes"
SESSION_GAP = "15 minutes"
PAYMENT_WITHIN = "5 minutes"
ACTION_TIMEOUT_MS = 30 * 60 * 1000

# The time bound of each join transformation, from the same constants as its join condition: the audit
# (overdue join rows) and explain-key (late or waiting rows) read it here.
JOIN_BOUNDS = {
    "order_payments": JoinBound(lower_seconds=0, upper_seconds=parse_seconds(PAYMENT_WITHIN)),
}

Streams = Mapping[str, DataFrame]


def _watermarked(streams: Streams, spec: JobSpec, name: str) -> DataFrame:
    inp = next(i for i in spec.inputs if i.name == name)
    return streams[name].withWatermark(inp.time_column, spark_interval(spec.watermark_seconds))


def user_activity(streams: Streams, spec: JobSpec) -> DataFrame:
    """Dedup by event_id within the watermark (evicting), then 5-minute windows per user."""
    events = _watermarked(streams, spec, "events").dropDuplicatesWithinWatermark(["event_id"])
    return (
        events.groupBy(F.window("event_time", ACTIVITY_WINDOW), "user_id")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("value").alias("value_sum"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "user_id", "events", "value_sum")
    )


def user_sessions(streams: Streams, spec: JobSpec) -> DataFrame:
    """Session windows per user, closed after 15 minutes of inactivity."""
    events = _watermarked(streams, spec, "events")
    return (
        events.groupBy(F.session_window("event_time", SESSION_GAP), "user_id")
        .agg(F.count(F.lit(1)).alias("events"), F.min("event_time").alias("first_event_time"),
             F.max("event_time").alias("last_event_time"))
        .select(F.col("session_window.start").alias("session_start"),
                F.col("session_window.end").alias("session_end"),
                "user_id", "events", "first_event_time", "last_event_time")
    )


def order_payments(streams: Streams, spec: JobSpec) -> DataFrame:
    """Inner join of orders and payments: the payment within 5 minutes after the order."""
    orders = _watermarked(streams, spec, "orders").alias("o")
    payments = _watermarked(streams, spec, "payments").alias("p")
    condition = F.expr(
        f"o.order_id = p.order_id AND p.payment_time >= o.order_time "
        f"AND p.payment_time <= o.order_time + interval {PAYMENT_WITHIN}"
    )
    return orders.join(payments, condition, "inner").select(
        F.col("o.order_id").alias("order_id"), F.col("o.user_id").alias("user_id"),
        F.col("o.order_time").alias("order_time"), F.col("o.amount").alias("order_amount"),
        F.col("p.payment_id").alias("payment_id"), F.col("p.payment_time").alias("payment_time"),
        F.col("p.amount").alias("payment_amount"),
    )


ACTIONS_OUTPUT = ("user_id STRING, action_count LONG, last_action STRING, "
                  "first_event_time TIMESTAMP, last_event_time TIMESTAMP")
ACTIONS_STATE = "action_count LONG, last_action STRING, first_ms LONG, last_ms LONG"


def _final_row(user_id: str, state: tuple) -> pd.DataFrame:
    count, last_action, first_ms, last_ms = state
    return pd.DataFrame({
        "user_id": [user_id], "action_count": [int(count)], "last_action": [last_action],
        "first_event_time": [pd.Timestamp(first_ms, unit="ms")],
        "last_event_time": [pd.Timestamp(last_ms, unit="ms")],
    })


def track_actions(key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """Running action count and last action per user; one final row when the user goes quiet.

    Event-time timeout (not processing time) so bounded availableNow runs end.
    """
    user_id = key[0]
    if state.hasTimedOut:
        yield _final_row(user_id, state.get)
        state.remove()
        return
    watermark = state.getCurrentWatermarkMs()
    current = state.get if state.exists else None
    if current is not None and current[3] + ACTION_TIMEOUT_MS < watermark:
        # The timeout had passed but new data came first: close the old activity, then start anew.
        yield _final_row(user_id, current)
        current = None
    count, last_action, first_ms, last_ms = current or (0, None, None, None)
    for pdf in batches:
        if pdf.empty:
            continue
        millis = pdf["event_time"].astype("datetime64[ms]").astype("int64")
        latest = int(millis.idxmax())
        count += len(pdf)
        if last_ms is None or millis.loc[latest] > last_ms:
            last_ms, last_action = int(millis.loc[latest]), str(pdf.loc[latest, "action"])
        first_ms = int(millis.min()) if first_ms is None else min(first_ms, int(millis.min()))
    state.update((count, last_action, first_ms, last_ms))
    state.setTimeoutTimestamp(max(last_ms + ACTION_TIMEOUT_MS, watermark + 1))


def user_actions(streams: Streams, spec: JobSpec) -> DataFrame:
    events = _watermarked(streams, spec, "events")
    return events.groupBy("user_id").applyInPandasWithState(
        track_actions, ACTIONS_OUTPUT, ACTIONS_STATE, "append", GroupStateTimeout.EventTimeTimeout
    )


def join_bound(spec: JobSpec) -> JoinBound | None:
    """The join time bound of a job's transformation (None: the job has no stream-stream join)."""
    return JOIN_BOUNDS.get(spec.transformation)


TRANSFORMATIONS: dict[str, Callable[[Streams, JobSpec], DataFrame]] = {
    "user_activity": user_activity,
    "user_sessions": user_sessions,
    "order_payments": order_payments,
    "user_actions": user_actions,
}
