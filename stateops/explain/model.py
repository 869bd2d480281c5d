"""What explain-key works on and returns: the target job, the evidence gathered, the explanation.

Pure data (no Spark): the evidence is built by `evidence.py` and judged by `verdict.py`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from stateops.errors import StateOpsError
from stateops.joins import JoinBound
from stateops.checkpoints.kafka_offsets import KafkaSource

# Stable reason names (README and the --json contract name them); one line each.
REASONS: dict[str, str] = {
    "emitted": "the key's result is in the output table",
    "matched": "the state shows the key was matched (so the join emitted it); the output table was not checked",
    "matched_outside_bound": "both sides arrived, but their event times break the join's time condition",
    "arrived_too_late": "a row of the key arrived after the watermark had passed it and was dropped as late",
    "waiting_for_match": "in a join store, no matching row on the other side yet",
    "purged_by_watermark": "was in state and was evicted by the watermark without being matched/emitted",
    "deleted": "custom state: was in state and was removed without being emitted; by a timeout, a TTL or the job's "
               "own remove(), which the change feed does not record",
    "never_arrived": "not in state, not in the change feed (and not in the input or the output)",
    "waiting_for_watermark": "in state; the watermark has not yet passed its event time (window still open)",
    "eviction_pending": "in state although its event time is behind the watermark: should have been evicted",
    "in_state": "in state; the state row carries no event time to relate to the watermark",
    "undetermined": "read, but the batch that read it (or its watermark) is no longer known: late or evicted "
                    "cannot be told",
}

# Kinds of state a job keeps; each has its own verdict rules (verdict.RULES).
KINDS = ("join", "window", "session", "custom")


class ExplainError(StateOpsError):
    """The key cannot be explained as asked (bad batch id, state not retained, unreadable store)."""


@dataclass(frozen=True)
class JoinSpec:
    """A stream-stream inner join: its two inputs, their event-time columns, and its time bound."""

    left: str
    right: str
    left_time: str
    right_time: str
    bound: JoinBound


@dataclass(frozen=True)
class InputSource:
    """One input of the job: where it lands (a file source) or the brokers of its topic (a Kafka source, the
    topic named after the input unless `topic_name` says), how to parse it, which column holds the key."""

    name: str
    path: str | None
    schema: str
    time_column: str
    key_column: str | None = None
    future_tolerance_seconds: int | None = None  # a time further ahead of its arrival is a dead letter
    kafka: KafkaSource | None = None
    topic_name: str | None = None  # a Kafka input's topic when not the input's name (an adopted job)

    @property
    def topic(self) -> str:
        return self.topic_name or self.name


@dataclass(frozen=True)
class ExplainTarget:
    job: str
    checkpoint: str
    output_table: str | None = None
    output_app_id: str | None = None  # Delta transaction app id of the writer: maps batch ids to versions
    output_key_columns: tuple[str, ...] = ()
    inputs: tuple[InputSource, ...] = ()
    join: JoinSpec | None = None
    kind: str = "window"
    late_margin_seconds: int = 0  # an input row is late once event time + margin <= the previous watermark
    progress_table: str | None = None  # the progress ops table: every batch's watermark and source offsets

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ExplainError(f"kind: {self.kind!r} is not a kind of state; use one of {KINDS}")
        if (self.kind == "join") != (self.join is not None):
            raise ExplainError(f"job {self.job}: a join needs kind 'join' and a JoinSpec, and only a join has one")


@dataclass(frozen=True)
class Evidence:
    """Everything known about one key at one batch; the verdict is a pure function of this.

    inputs: rows of the key the query read, each {"input", "batch_id" (micro-batch, None when no longer
    known), "source_batch_id" (file sources), "partition" and "offset" (Kafka sources), "event_time", "row"}.
    watermarks: micro-batch -> batchWatermarkMs, for every batch the checkpoint or the progress table still knows.
    history: change-feed events of the key. output: the key's rows in the output table, None when that cannot
    be determined.
    """

    kind: str
    key: str
    batch_id: int
    watermarks: Mapping[int, int]
    in_state: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    output: list[dict[str, Any]] | None = None
    feed: dict[str, Any] = field(default_factory=dict)
    join: JoinSpec | None = None
    output_table: str | None = None
    late_margin_seconds: int = 0
    run_starts: frozenset[int] = frozenset()  # batches that were the first of a (re)started run
    inputs_read: bool = False  # whether the input was searched for the key (inputs holds what was found)
    dead_letters: int = 0  # lines of the key the stateful query never saw (unparsable, or too far ahead)


@dataclass
class KeyExplanation:
    job: str
    key: str
    batch_id: int
    watermark: str | None
    in_state: list[dict[str, Any]]
    reason: str
    explanation: str
    checkpoint: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)  # change feed events of the key
    inputs: list[dict[str, Any]] = field(default_factory=list)   # input rows of the key
    output_rows: list[dict[str, Any]] = field(default_factory=list)
    change_feed: dict[str, Any] = field(default_factory=dict)    # start/end batch, or the error

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), default=str, **kwargs)
