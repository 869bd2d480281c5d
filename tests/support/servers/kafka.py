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
import subprocess
import tempfile
import time
from typing import Iterator

import pytest

from stateops.jobs.demo.kafka_input import create_topics, produce  # noqa: F401 - the tests' producer is the CLI's
from tests.support import ROOT
from tests.support.servers.ports import free_port

JARS = os.path.join(ROOT, ".jars", "kafka-broker", ".pom-sha256")


def jars_missing() -> str | None:
    """What is missing of the broker's jars (.jars/kafka-broker) and the Spark connector's (`stateops jars fetch`),
    None when both are there."""
    from stateops.jvm.jars import JarsFolder

    for present, what in ((os.path.isfile(JARS), "the Kafka broker jars (.jars/kafka-broker)"),
                          (bool(JarsFolder.of().jars()), "the Spark Kafka connector jars (stateops jars fetch)")):
        if not present:
            return (f"{what} are missing: install Maven 3.8+ and run bash scripts/setup (it fetches them from "
                    "Maven Central)")
    return None


def require_jars() -> None:
    """Skip, saying what to do, when scripts/setup could not fetch the broker or the Spark connector."""
    missing = jars_missing()
    if missing:
        pytest.skip(missing)


@contextlib.contextmanager
def kafka_broker(timeout: float = 90.0) -> Iterator[str]:
    """Start `scripts/kafka` on free ports; yield its bootstrap address; SIGTERM it at the end."""
    from stateops.jobs.demo.kafka_input import wait_for_broker

    port, controller = free_port(), free_port()
    env = {**os.environ, "KAFKA_PORT": str(port), "KAFKA_CONTROLLER_PORT": str(controller)}
    with tempfile.TemporaryFile() as log:  # a file, not a pipe nobody drains: the broker never blocks on it
        process = subprocess.Popen(["bash", os.path.join(ROOT, "scripts", "kafka")], env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        bootstrap = f"127.0.0.1:{port}"
        try:
            try:
                wait_for_broker(bootstrap, timeout)
            except Exception:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                log.seek(0)
                raise RuntimeError(f"the Kafka broker did not start on {bootstrap}: "
                                   f"{log.read().decode(errors='replace')[-2000:]}") from None
            yield bootstrap
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def fresh_topics(bootstrap: str, names) -> None:
    """Empty topics of these names (LogAppendTime), deleting earlier ones first: the built-in jobs read the topic
    of each input's name, and one broker serves every test of the process."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = [n for n in names if n in admin.list_topics(timeout=30).topics]
    if existing:
        for future in admin.delete_topics(existing, operation_timeout=30).values():
            future.result(60)
        deadline = time.monotonic() + 60
        while set(existing) & set(admin.list_topics(timeout=30).topics):
            assert time.monotonic() < deadline, f"topics {existing} were not deleted"
            time.sleep(0.2)
    deadline = time.monotonic() + 60
    while True:  # the broker may still be removing a deleted topic's log: creating it again fails until it is done
        try:
            create_topics(bootstrap, names)
            return
        except Exception:  # noqa: BLE001 - KafkaException(TOPIC_ALREADY_EXISTS / marked for deletion) meanwhile
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


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
