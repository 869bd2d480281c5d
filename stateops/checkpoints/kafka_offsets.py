"""What Kafka still holds of what a checkpoint would replay: a rewind restarts a Kafka query from the offsets its
checkpoint recorded, and records Kafka's retention has deleted since cannot be read again.

Spark's Kafka source with `failOnDataLoss` (on in StateOps) would fail on them at restart, after the state
was already cut; with it off it would skip them silently. So the runbook asks the brokers first (the
partitions' log start offsets, with confluent-kafka) and refuses a plan that needs deleted records, naming the
partitions and offsets. Brokers that cannot be asked refuse the plan too: an unverified replay could lose data.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.errors import StateOpsError
from stateops.storage import filesystem

# Consumer settings of Spark's Kafka source (`kafka.*` options) that librdkafka does not take (JVM-only).
_JVM_ONLY = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
             "ssl.truststore.location", "ssl.truststore.password", "ssl.keystore.location", "ssl.keystore.password",
             "ssl.truststore.type", "ssl.keystore.type")


@dataclass(frozen=True)
class KafkaSource:
    """A job's Kafka brokers and the consumer options it passes to Spark (`kafka_options`)."""

    bootstrap_servers: str
    options: Mapping[str, str] = field(default_factory=dict, hash=False)

    def client_config(self) -> dict[str, str]:
        """The `kafka.*` options a librdkafka client understands, for the same brokers."""
        config = {"bootstrap.servers": self.bootstrap_servers}
        for key, value in self.options.items():
            name = key[len("kafka."):] if key.startswith("kafka.") else None
            if name and name not in _JVM_ONLY and name != "bootstrap.servers":
                config[name] = value
        return config


def recorded(offsets: list[Any]) -> dict[str, dict[str, int]]:
    """{topic: {partition: next offset to read}} of the Kafka sources in one `offsets/N` entry."""
    out: dict[str, dict[str, int]] = {}
    for source in offsets:
        if isinstance(source, dict) and "logOffset" not in source:
            for topic, parts in source.items():
                if isinstance(parts, dict):
                    out.setdefault(topic, {}).update({str(p): int(o) for p, o in parts.items() if isinstance(o, int)})
    return out


def _watermark_offsets(source: KafkaSource, topics: list[str], timeout: float
                       ) -> dict[str, dict[str, tuple[int, int]]]:
    """{topic: {partition: (oldest offset held, next offset to be written)}}; StateOpsError when the brokers
    cannot say."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        consumer = Consumer({**source.client_config(), "group.id": "stateops-offset-check",
                             "enable.auto.commit": False})
    except KafkaException as err:
        raise StateOpsError(f"cannot ask the Kafka brokers {source.bootstrap_servers} ({err}). Fix: check "
                            "kafka_bootstrap_servers and kafka_options") from None
    try:
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if meta is None or meta.error is not None:
                raise StateOpsError(f"topic {topic} is not on {source.bootstrap_servers}"
                                    f"{f' ({meta.error})' if meta is not None else ''}")
            out[topic] = {str(p): tuple(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout))
                          for p in meta.partitions}
        return out
    except KafkaException as err:
        raise StateOpsError(f"the Kafka brokers {source.bootstrap_servers} did not answer ({err}). Fix: check "
                            "that they are reachable; what a replay needs or a query has left to read cannot be "
                            "checked without them") from None
    finally:
        consumer.close()


def log_starts(source: KafkaSource, topics: list[str], timeout: float = 20.0) -> dict[str, dict[str, int]]:
    """{topic: {partition: the oldest offset the brokers still hold}}; StateOpsError when they cannot say."""
    return {t: {p: low for p, (low, _) in parts.items()}
            for t, parts in _watermark_offsets(source, topics, timeout).items()}


def log_ends(source: KafkaSource, topics: list[str], timeout: float = 20.0) -> dict[str, dict[str, int]]:
    """{topic: {partition: the offset the next record will get}}: what is available to read."""
    return {t: {p: high for p, (_, high) in parts.items()}
            for t, parts in _watermark_offsets(source, topics, timeout).items()}


def unread(read: Mapping[str, Mapping[str, int]], ends: Mapping[str, Mapping[str, int]]) -> list[str]:
    """`topic/partition: offsets A..B` for every partition holding records past what `read` recorded (a
    partition `read` does not name yet: from offset 0)."""
    behind = []
    for topic, parts in sorted(ends.items()):
        for partition, end in sorted(parts.items(), key=lambda p: int(p[0])):
            start = read.get(topic, {}).get(partition, 0)
            if end > start:
                behind.append(f"{topic}/{partition}: offsets {start}..{end - 1}")
    return behind


def deleted(needed: Mapping[str, Mapping[str, int]], starts: Mapping[str, Mapping[str, int]]) -> list[str]:
    """`topic/partition: offsets A..B` for every partition whose records from `needed` on are partly gone."""
    gone = []
    for topic, parts in sorted(needed.items()):
        for partition, offset in sorted(parts.items(), key=lambda p: int(p[0])):
            start = starts.get(topic, {}).get(partition)
            if start is not None and start > offset:
                gone.append(f"{topic}/{partition}: offsets {offset}..{start - 1} (the log now starts at {start})")
    return gone


def initial(checkpoint: str) -> dict[str, dict[str, int]]:
    """{topic: {partition: offset}} where the checkpoint's Kafka sources started: Spark's Kafka source writes the
    offsets it resolved `startingOffsets` to into `sources/<i>/0` (a NUL byte, `v1`, then the JSON) before the
    first batch, and never changes them. Empty for a checkpoint without a Kafka source."""
    out: dict[str, dict[str, int]] = {}
    opened = Checkpoint(checkpoint)
    for index in opened.logged_sources():
        first = opened.source_log_files(index).get(0)
        if first is None:
            continue
        fs, path = filesystem(first)
        with fs.open(path, "rb") as handle:
            lines = handle.read().lstrip(b"\x00").decode("utf-8", "replace").splitlines()
        try:
            entry = json.loads(lines[-1]) if len(lines) > 1 and lines[0] == "v1" else None
        except ValueError:
            continue
        if isinstance(entry, dict) and "path" not in entry:  # a file source's log lines name paths
            out.update(recorded([entry]))
    return out
