"""A real Apache Kafka broker (KRaft, single node) on loopback for the Kafka tests, started by `scripts/kafka`
(the script users run), on free ports, and stopped with SIGTERM as a user would stop it.

Records are produced with confluent-kafka, the maintained client; topics are created with
`message.timestamp.type=LogAppendTime`, so a record's timestamp is the broker's arrival time (the
dead-letter rule for poison timestamps compares event time with arrival).
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from typing import Iterable, Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JARS = os.path.join(ROOT, ".jars", "kafka-broker", ".pom-sha256")
CONNECTOR = os.path.join(ROOT, ".jars", "spark", ".pom-sha256")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def require_jars() -> None:
    """Skip, saying what to do, when scripts/setup could not fetch the broker or the Spark connector."""
    for stamp, what in ((JARS, "the Kafka broker jars (.jars/kafka-broker)"),
                        (CONNECTOR, "the Spark Kafka connector jars (.jars/spark)")):
        if not os.path.isfile(stamp):
            pytest.skip(f"{what} are missing: install Maven 3.8+ and run bash scripts/setup (it fetches them "
                        "from Maven Central)")


@contextlib.contextmanager
def kafka_broker(timeout: float = 90.0) -> Iterator[str]:
    """Start `scripts/kafka` on free ports; yield its bootstrap address; SIGTERM it at the end."""
    from confluent_kafka.admin import AdminClient

    port, controller = _free_port(), _free_port()
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller)}
    process = subprocess.Popen(["bash", os.path.join(ROOT, "scripts", "kafka")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": bootstrap})
        while True:
            try:
                admin.list_topics(timeout=2)
                break
            except Exception:  # noqa: BLE001 - KafkaException until the broker answers
                if process.poll() is not None or time.monotonic() > deadline:
                    err = process.stderr.read().decode(errors="replace")[-2000:] if process.poll() is not None else ""
                    raise RuntimeError(f"the Kafka broker did not start on {bootstrap}: {err}")
                time.sleep(0.5)
        yield bootstrap
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config={"message.timestamp.type": "LogAppendTime"}) for name in names])
    for future in futures.values():
        future.result(30)


def produce(bootstrap: str, topic: str, values: Iterable[bytes], keys: Iterable[bytes | None] | None = None) -> int:
    """Send `values` (raw bytes, one record each) and wait until the broker has them all; returns the count."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    count = 0
    for value, key in zip(values, keys if keys is not None else iter(lambda: None, 0)):
        producer.produce(topic, value=value, key=key)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "records were left unsent"
    return count


def records(bootstrap: str, topic: str) -> list[tuple[int, int, int, bytes]]:
    """Every record of `topic` now: (partition, offset, timestamp in ms, value bytes), read with the client."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "stateops-tests", "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions}
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        wanted = sum(high - low for low, high in ends.values())
        out: list[tuple[int, int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(out) < wanted and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                out.append((message.partition(), message.offset(), message.timestamp()[1], message.value()))
        assert len(out) == wanted, f"read {len(out)} of {wanted} records of {topic}"
        return sorted(out)
    finally:
        consumer.close()
