"""The transformations of the four example jobs (stateops.jobs.examples.builtin), written as any user's job is.

Each takes its input streams by name (already parsed and watermarked: stateops.jobs.definition.transformation) and returns
the stateful streaming DataFrame.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.examples.builtin import SESSION_GAP

if TYPE_CHECKING:  # Spark and pandas are imported where a query is built or a batch runs, not where the catalog
    import pandas as pd  # loads the job: `stateops jobs list` imports neither
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.state import GroupState

ACTIVITY_WINDOW = "5 minutes"
ACTION_TIMEOUT_MS = 30 * 60 * 1000


def user_activity(events: DataFrame) -> DataFrame:
    """Dedup by event_id within the watermark (evicting), then 5-minute windows per user."""
    from pyspark.sql import functions as F

    events = events.dropDuplicatesWithinWatermark(["event_id"])
    return (
        events.groupBy(F.window("event_time", ACTIVITY_WINDOW), "user_id")
        .agg(F.count(F.lit(1)).alias("events"), F.sum("value").alias("value_sum"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "user_id", "events", "value_sum")
    )


def user_sessions(events: DataFrame) -> DataFrame:
    """Session windows per user, closed after 15 minutes of inactivity."""
    from pyspark.sql import functions as F

    return (
        events.groupBy(F.session_window("event_time", SESSION_GAP), "user_id")
        .agg(F.count(F.lit(1)).alias("events"), F.min("event_time").alias("first_event_time"),
             F.max("event_time").alias("last_event_time"))
        .select(F.col("session_window.start").alias("session_start"),
                F.col("session_window.end").alias("session_end"),
                "user_id", "events", "first_event_time", "last_event_time")
    )


def order_payments(orders: DataFrame, payments: DataFrame, spec: JobSpec) -> DataFrame:
    """Inner join of orders and payments: the payment within the spec's join bound after the order."""
    from pyspark.sql import functions as F

    bound = spec.join_bound  # lower <= payment_time - order_time <= upper
    condition = F.expr(
        f"o.order_id = p.order_id AND p.payment_time >= o.order_time + interval {bound.lower_seconds} seconds "
        f"AND p.payment_time <= o.order_time + interval {bound.upper_seconds} seconds"
    )
    return orders.alias("o").join(payments.alias("p"), condition, "inner").select(
        F.col("o.order_id").alias("order_id"), F.col("o.user_id").alias("user_id"),
        F.col("o.order_time").alias("order_time"), F.col("o.amount").alias("order_amount"),
        F.col("p.payment_id").alias("payment_id"), F.col("p.payment_time").alias("payment_time"),
        F.col("p.amount").alias("payment_amount"),
    )


ACTIONS_OUTPUT = ("user_id STRING, action_count LONG, last_action STRING, "
                  "first_event_time TIMESTAMP, last_event_time TIMESTAMP")
ACTIONS_STATE = "action_count LONG, last_action STRING, first_ms LONG, last_ms LONG"


def _final_row(user_id: str, state: tuple) -> pd.DataFrame:
    import pandas as pd

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


def user_actions(events: DataFrame) -> DataFrame:
    """applyInPandasWithState with an event-time timeout: one final row per user activity."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return events.groupBy("user_id").applyInPandasWithState(
        track_actions, ACTIONS_OUTPUT, ACTIONS_STATE, "append", GroupStateTimeout.EventTimeTimeout
    )
