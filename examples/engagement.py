"""A user's own StateOps job, end to end: deduplicate events, then keep per-user state with
transformWithStateInPandas (Spark 4's successor to applyInPandasWithState), each state variable with a TTL.

Registered without touching StateOps, by examples/engagement.toml (STATEOPS_CONFIG) with this folder on
PYTHONPATH:

    [jobs.user_engagement]
    transformation = "engagement:user_engagement"

StateOps parses the `events` input, keeps bad lines in the dead-letter table and puts the watermark on
`event_time` before calling `user_engagement(events)`. Output: the user's totals so far (update mode, a
MERGE on user_id). The TTL bounds the state: a user not seen for ENGAGEMENT_TTL of processing time leaves
it, and starts from zero if they come back. TTL needs the ProcessingTime time mode; StateOps' bounded runs
of such a query skip Spark's empty batches (jobs/runtime/plan.py), so they end when the input is consumed.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import TimerValues

ENGAGEMENT_TTL = timedelta(days=7)
SUMMARY = "events LONG, value_sum DOUBLE, first_ms LONG, last_ms LONG"
OUTPUT = ("user_id STRING, events LONG, value_sum DOUBLE, first_event_time TIMESTAMP, last_event_time TIMESTAMP, "
          "top_action STRING, top_action_events LONG")


class Engagement(StatefulProcessor):
    """Per user: totals in a value state, events per action in a map state; both expire after the TTL."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        ttl_ms = int(ENGAGEMENT_TTL.total_seconds() * 1000)
        self.summary = handle.getValueState("summary", SUMMARY, ttl_ms)
        self.actions = handle.getMapState("actions", "action STRING", "events LONG", ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        events, value_sum, first_ms, last_ms = self.summary.get() if self.summary.exists() else (0, 0.0, None, None)
        for pdf in rows:
            millis = pdf["event_time"].astype("datetime64[ms]").astype("int64")
            events += len(pdf)
            value_sum += float(pdf["value"].sum())
            first_ms = int(millis.min()) if first_ms is None else min(first_ms, int(millis.min()))
            last_ms = int(millis.max()) if last_ms is None else max(last_ms, int(millis.max()))
            for action, count in pdf["action"].value_counts().items():
                before = self.actions.getValue((action,))
                self.actions.updateValue((action,), ((before[0] if before else 0) + int(count),))
        self.summary.update((events, value_sum, first_ms, last_ms))
        # The most frequent action; ties go to the alphabetically first.
        (top_action,), (top_events,) = min(self.actions.iterator(), key=lambda item: (-item[1][0], item[0][0]))
        yield pd.DataFrame({
            "user_id": [key[0]], "events": [events], "value_sum": [value_sum],
            "first_event_time": [pd.Timestamp(first_ms, unit="ms")],
            "last_event_time": [pd.Timestamp(last_ms, unit="ms")],
            "top_action": [top_action], "top_action_events": [top_events],
        })

    def close(self) -> None:
        pass


def user_engagement(events: DataFrame) -> DataFrame:
    """Drop duplicate event ids within the watermark, then the per-user totals so far."""
    return (events.dropDuplicatesWithinWatermark(["event_id"]).groupBy("user_id")
            .transformWithStateInPandas(Engagement(), OUTPUT, "Update", "ProcessingTime"))
