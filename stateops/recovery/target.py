"""What the runbook needs to know about a job, as data: the jobs layer builds it from the job's spec (the
core never imports the job catalog)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from stateops.control.overrides import WatermarkBounds
from stateops.checkpoints.kafka_offsets import KafkaSource
from stateops.roots import Roots


@dataclass(frozen=True)
class JobTarget:
    job: str
    checkpoint: str
    sink_table: str
    output_mode: str                 # append | update
    row_key: tuple[str, ...]         # merge keys (update) or idempotent key (append): no duplicates allowed
    output_time_column: str | None   # where an output row's event-time span starts
    watermark_delay: str             # in force now
    bounds: WatermarkBounds
    shuffle_partitions: int          # for a new checkpoint (spec, config file or override)
    archive_root: str
    landing: tuple[str, ...]         # the input folders (file sources), in input order; () for Kafka
    inputs: int                      # input streams (each with its own watermark)
    roots: Roots
    kafka: KafkaSource | None = None  # Kafka jobs: the brokers a replay's records must still be on
    state_store: str | None = None    # the job's state_store: a rebuild's new checkpoint takes it (else the old one's)
    # the state store settings STATEOPS_SPARK_CONF sets (stateops.checkpoints.state_store): a rebuild's new checkpoint
    # takes them
    state_conf: Mapping[str, str] = field(default_factory=dict)
