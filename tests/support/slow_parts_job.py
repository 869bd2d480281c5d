"""A user's job whose batches are each made slow in one part on purpose (tests/spark/test_batch_parts.py): the
second file's parse (a Python function in the query's stateless steps sleeps per row), the third file's state
updates (its applyInPandasWithState function, which writes each user's running row every batch, sleeps per user),
and, by the test's fault, batch 3's sink."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.examples.builtin import EVENTS
from stateops.jobs.examples.transforms import ACTIONS_OUTPUT, ACTIONS_STATE, track_actions

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
FILES, EVENTS_PER_FILE, USERS = 4, 100, 5
PARSE_PAUSE = 0.02   # per row of the second file: 2 s in its one task
STATE_PAUSE = 0.8    # per user of the third file: 4 s of task time over 2 partitions
SINK_PAUSE = 2.0     # before batch 3's commit


def _file_of(event_time: datetime) -> int:
    return int((event_time.replace(tzinfo=timezone.utc) - START) / timedelta(minutes=10))


def _slow_parse(action, event_time):  # no hints: PySpark would read them as a pandas UDF's
    if _file_of(event_time) == 1:
        time.sleep(PARSE_PAUSE)
    return action


def _slow_state(key, batches, state):
    def paused(frames):
        for frame in frames:
            if not frame.empty and _file_of(frame["event_time"].min().to_pydatetime()) == 2:
                time.sleep(STATE_PAUSE)
            yield frame
    yield from track_actions(key, paused(batches), state)
    if state.exists:  # and the user's running row: every batch writes output (the slow sink's batch has some)
        yield _running_row(key[0], state.get)


def _running_row(user_id: str, kept: tuple):
    import pandas as pd

    count, last_action, first_ms, last_ms = kept
    return pd.DataFrame({"user_id": [user_id], "action_count": [int(count)], "last_action": [last_action],
                         "first_event_time": [pd.Timestamp(first_ms, unit="ms")],
                         "last_event_time": [pd.Timestamp(last_ms, unit="ms")]})


def slow_parts(events):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    parse = F.udf(_slow_parse, "string")
    return (events.withColumn("action", parse("action", "event_time")).groupBy("user_id")
            .applyInPandasWithState(_slow_state, ACTIONS_OUTPUT, ACTIONS_STATE, "append",
                                    GroupStateTimeout.EventTimeTimeout))


SPEC = JobSpec(name="slow_parts", inputs=(EVENTS,), transformation="tests.support.slow_parts_job:slow_parts",
               output_mode="append", sink_table="slow_parts", watermark_delay="10 minutes", watermark_min="1 minute",
               watermark_max="1 hour", shuffle_partitions=2, idempotent_key=("user_id", "first_event_time"),
               output_time_column="first_event_time")
