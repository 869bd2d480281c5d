"""Input for Kafka jobs, with confluent-kafka (the maintained client): topics named after the inputs, created
with `message.timestamp.type=LogAppendTime` (a record's arrival is then the broker's clock, which the
dead-letter rule for poison timestamps compares event time with), and records produced from raw lines.
Used by `stateops generate --kafka`, `bash scripts/kafka-demo` and the Kafka tests."""
from __future__ import annotations

import time
from typing import Iterable

from stateops.errors import StateOpsError


def wait_for_broker(bootstrap: str, timeout: float = 60.0) -> None:
    """Return once the broker answers; StateOpsError after `timeout` seconds."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # no line per refused connection
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=2)
            return
        except Exception as err:  # noqa: BLE001 - KafkaException until the broker answers
            if time.monotonic() > deadline:
                raise StateOpsError(f"no Kafka broker answers on {bootstrap} after {timeout:g} s ({err}). Fix: start "
                                    "one (bash scripts/kafka) or pass the right HOST:PORT") from None
            time.sleep(0.5)


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 2) -> list[str]:
    """Create the topics that do not exist yet (LogAppendTime); returns the ones created."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    wanted = [n for n in names if n not in existing]
    if not wanted:
        return []
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config={"message.timestamp.type": "LogAppendTime"}) for name in wanted])
    for future in futures.values():
        future.result(30)
    return wanted


def produce(bootstrap: str, topic: str, values: Iterable[bytes]) -> int:
    """Send `values` (raw bytes, one record each) and wait until the broker has them all; returns the count.

    Records go round-robin over the topic's partitions in the order given, so the same values always make the
    same partitions (the generator's promise: a seed and config make the same batches). The client's own
    partitioner spreads keyless records by chance, and with `maxOffsetsPerTrigger` a batch is cut per
    partition: which rows met in a batch, and so which were late, changed from one production to the next."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    deadline = time.monotonic() + 30
    # a topic just created reaches the broker's metadata a moment later: until then it lists no partition
    while not (partitions := len(producer.list_topics(topic, timeout=30).topics[topic].partitions)):
        if time.monotonic() > deadline:
            raise StateOpsError(f"topic {topic} does not exist on {bootstrap}: create it first (create_topics)")
        time.sleep(0.2)
    count = 0
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, partition=count % partitions)
                break
            except BufferError:  # the client's queue is full (100,000 records): let the broker catch up
                producer.poll(0.5)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise StateOpsError(f"{topic}: records were left unsent to {bootstrap} after 60 s")
    return count


def produce_files(bootstrap: str, topic: str, paths: Iterable[str]) -> int:
    """Every non-blank line of `paths`, in order, as one record each (the generator's files to their topic)."""
    from stateops.storage import filesystem

    lines: list[bytes] = []
    for path in paths:
        fs, local = filesystem(path)
        with fs.open(local, "rb") as handle:
            lines += [line for line in handle.read().splitlines() if line.strip()]
    return produce(bootstrap, topic, lines)
