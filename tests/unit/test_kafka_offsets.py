"""What a Kafka replay needs against what the brokers still hold (stateops/checkpoints/kafka_offsets.py), on offsets as
Spark writes them in `offsets/N`."""
from __future__ import annotations

import pytest

from stateops.explain.kafka_input import KafkaBatches
from stateops.checkpoints.kafka_offsets import KafkaSource, deleted, initial, recorded, unread

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


def test_initial_offsets_are_read_from_the_kafka_sources_first_log_entry(tmp_path):
    """`sources/<i>/0` as Spark 4.2's Kafka source writes it (bytes copied from a test checkpoint): a NUL byte,
    `v1`, the JSON; a file source's log in another index is not mistaken for one."""
    (tmp_path / "sources" / "0").mkdir(parents=True)
    (tmp_path / "sources" / "0" / "0").write_bytes(b'\x00v1\n{"events":{"0":0,"1":17}}')
    (tmp_path / "sources" / "1").mkdir()
    (tmp_path / "sources" / "1" / "0").write_text('v1\n{"path":"file:///l/a.json","timestamp":1,"batchId":0}')
    assert initial(str(tmp_path)) == {"events": {"0": 0, "1": 17}}
    assert initial(str(tmp_path / "nowhere")) == {}


def test_the_batch_that_read_a_record_is_the_first_ending_past_it_when_the_one_before_is_known():
    batches = KafkaBatches(ends={0: {"events": {"0": 10, "1": 4}}, 1: {"events": {"0": 25, "1": 4}},
                                 5: {"events": {"0": 60, "1": 9}}, 6: {"events": {"0": 70, "1": 9, "2": 3}}})
    assert [batches.micro_batch_of("events", "0", o) for o in (0, 9, 10, 24)] == [0, 0, 1, 1]
    assert batches.micro_batch_of("events", "0", 30) is None  # batches 2..4 are no longer known
    assert batches.micro_batch_of("events", "0", 65) == 6
    assert batches.micro_batch_of("events", "2", 0) == 6  # a partition that appeared in batch 6
    assert batches.micro_batch_of("events", "0", 70) is None and batches.micro_batch_of("orders", "0", 0) is None


def test_unread_names_each_partition_with_records_past_what_was_read():
    read = {"events": {"0": 120, "1": 98}}
    assert unread(read, {"events": {"0": 120, "1": 100, "2": 3}}) == ["events/1: offsets 98..99",
                                                                     "events/2: offsets 0..2"]
    assert unread(read, {"events": {"0": 120, "1": 98}}) == []
