"""The four example jobs, defined as any user's job is (a JobSpec each; their transformations:
jobs/examples/transforms.py). `[catalog] builtin_jobs = false` in the config file leaves them out."""
from __future__ import annotations

from stateops.checkpoints.state_store import MEMORY

from stateops.jobs.definition.spec import ExplainSpec, InputSpec, JobSpec, StreamJoin

# user_sessions' inactivity gap (jobs/examples/transforms.py builds the session window with it); kept here so that
# loading the examples imports no Spark.
SESSION_GAP = "15 minutes"

EVENTS = InputSpec(
    "events", "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE", "event_time"
)
ORDERS = InputSpec("orders", "order_id STRING, user_id STRING, order_time TIMESTAMP, amount DOUBLE", "order_time")
PAYMENTS = InputSpec(
    "payments", "payment_id STRING, order_id STRING, payment_time TIMESTAMP, amount DOUBLE", "payment_time"
)

# The four standard patterns, defined as any user's job is (their transformations: jobs/examples/transforms.py).
BUILTIN: tuple[JobSpec, ...] = (
    JobSpec(
        name="user_activity", inputs=(EVENTS,), transformation="stateops.jobs.examples.transforms:user_activity",
        output_mode="update", sink_table="user_activity", merge_keys=("window_start", "window_end", "user_id"),
        explain=ExplainSpec(key_columns={"events": "user_id"}, output_key_columns=("user_id",)),
        output_time_column="window_start",
        watermark_delay="10 minutes", watermark_min="5 minutes", watermark_max="2 hours",
        state_store=MEMORY,  # its dedup ids fit the heap: a quarter of RocksDB's state time (docs/design.md)
        description="Dedup by event_id within the watermark, then 5-minute windows per user (count, sum).",
    ),
    JobSpec(
        name="user_sessions", inputs=(EVENTS,), transformation="stateops.jobs.examples.transforms:user_sessions",
        output_mode="append", sink_table="user_sessions",
        # A row stays on time until the watermark passes it by the gap (its session is still open).
        explain=ExplainSpec(key_columns={"events": "user_id"}, output_key_columns=("user_id",),
                            late_margin=SESSION_GAP),
        idempotent_key=("user_id", "session_start"), output_time_column="session_start",
        watermark_delay="30 minutes", watermark_min="15 minutes", watermark_max="6 hours",
        description="Session windows per user with a 15-minute inactivity gap.",
    ),
    JobSpec(
        name="order_payments", inputs=(ORDERS, PAYMENTS), transformation="stateops.jobs.examples.transforms:order_payments",
        output_mode="append", sink_table="order_payments",
        join=StreamJoin(left="orders", right="payments", lower="0 seconds", upper="5 minutes"),
        explain=ExplainSpec(key_columns={"orders": "order_id", "payments": "order_id"},
                            output_key_columns=("order_id",)),
        idempotent_key=("order_id", "payment_id"), output_time_column="order_time",
        watermark_delay="2 minutes", watermark_min="1 minute", watermark_max="30 minutes",
        state_store=MEMORY,  # both sides' rows fit the heap: a third of RocksDB's state time (docs/design.md)
        description="Orders joined with their payment made within 5 minutes (the join's bound).",
    ),
    JobSpec(
        name="user_actions", inputs=(EVENTS,), transformation="stateops.jobs.examples.transforms:user_actions",
        output_mode="append", sink_table="user_actions",
        explain=ExplainSpec(key_columns={"events": "user_id"}, output_key_columns=("user_id",)),
        idempotent_key=("user_id", "first_event_time"), output_time_column="first_event_time",
        watermark_delay="10 minutes", watermark_min="5 minutes", watermark_max="2 hours",
        description="Running action count and last action per user; a final row after 30 quiet minutes.",
    ),
)
