"""What a Kafka replay needs against what the brokers still hold (stateops/kafka_offsets.py), on offsets as
Spark writes them in `offsets/N`."""
from __future__ import annotations

import pytest

from stateops.kafka_offsets import KafkaSource, deleted, recorded

pytestmark = pytest.mark.unit


def test_recorded_offsets_are_the_kafka_sources_of_an_offset_entry():
    entry = [{"events": {"0": 120, "1": 98}}, {"logOffset": 4}, None, {"orders": {"0": 7}}]
    assert recorded(entry) == {"events": {"0": 120, "1": 98}, "orders": {"0": 7}}
    assert recorded([{"logOffset": 4}]) == {}


def test_deleted_names_each_partition_and_the_offsets_gone():
    needed = {"events": {"0": 120, "1": 98, "10": 5}}
    starts = {"events": {"0": 150, "1": 98, "10": 0, "2": 40}}
    assert deleted(needed, starts) == ["events/0: offsets 120..149 (the log now starts at 150)"]
    assert deleted(needed, {"events": {"0": 0, "1": 0, "10": 6}}) == \
        ["events/10: offsets 5..5 (the log now starts at 6)"]


def test_the_client_takes_the_jobs_consumer_settings_librdkafka_knows():
    source = KafkaSource("b1:9092,b2:9092", {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                                             "kafka.sasl.jaas.config": "org.apache...;", "maxOffsetsPerTrigger": "9",
                                             "kafka.bootstrap.servers": "elsewhere:1"})
    assert source.client_config() == {"bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL",
                                      "sasl.mechanism": "PLAIN"}
