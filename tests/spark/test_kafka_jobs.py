"""Every built-in job on a real Kafka broker (scripts/kafka, KRaft, loopback), one topic per input, equal to the
batch recomputation over the records each micro-batch read.

The generator's input (late, duplicate and malformed events, poison timestamps in 2099) plus a record of invalid
UTF-8 is produced to topics with LogAppendTime: a record's arrival is its broker timestamp. Each job reads with
`maxOffsetsPerTrigger`, so a run makes several batches and the watermark drops late rows between them. The
oracle (tests/oracle.py) gets the records of each batch from the checkpoint: `offsets/N` holds, per topic and
partition, the next offset to read after batch N.
"""
from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.runner import run_job
from stateops.layout import Layout
from tests import oracle
from tests.delta_rows import table_rows
from tests.kafka_server import create_topics, kafka_broker, produce, records, require_jars

pytestmark = pytest.mark.spark

INPUT = GeneratorConfig(events=1200, files=4, users=120, late_share=0.05, late_minutes=90, duplicate_share=0.05,
                        malformed_share=0.03, future_share=0.02, orders=120, seed=21, minutes_per_file=20)
TOPICS = ("events", "orders", "payments")
BAD_BYTES = b'{"event_id": "e-\xff", "user_id": "u-1"} \xc3\x28'
PER_TRIGGER = "350"


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> str:
    """A broker with the generator's lines produced file by file, each input to the topic of its name."""
    require_jars()
    scratch = Layout(str(tmp_path_factory.mktemp("kafka-input") / "stateops"))
    generate(scratch, INPUT)
    with kafka_broker() as bootstrap:
        create_topics(bootstrap, TOPICS)
        for topic in TOPICS:
            lines = [line.encode() for _, batch in oracle.landing_batches(scratch.landing(topic)) for line in batch]
            produce(bootstrap, topic, lines + ([BAD_BYTES] if topic == "events" else []))
        yield bootstrap


def _config(tmp_path, bootstrap: str, job: str) -> str:
    path = tmp_path / "kafka.toml"
    path.write_text(f'[jobs.{job}]\nsource = "kafka"\nkafka_bootstrap_servers = "{bootstrap}"\n'
                    f'kafka_options = {{ maxOffsetsPerTrigger = "{PER_TRIGGER}" }}\n')
    return str(path)


def _batches(checkpoint: str, topic: str, every: list[tuple[int, int, int, bytes]]) -> list[list[dict]]:
    """The typed rows each batch read: records between the previous batch's offsets and its own."""
    folder = os.path.join(checkpoint, "offsets")
    ends = []
    for batch in sorted(int(n) for n in os.listdir(folder) if n.isdigit()):
        with open(os.path.join(folder, str(batch))) as handle:
            sources = [json.loads(line) for line in handle.read().splitlines()[2:] if line.startswith("{")]
        [offsets] = [s[topic] for s in sources if topic in s]
        ends.append({int(p): o for p, o in offsets.items()})
    out, start = [], {}
    for end in ends:
        rows = [oracle.parse_line(topic, value.decode("utf-8", "replace"), stamp)
                for partition, offset, stamp, value in every if start.get(partition, 0) <= offset < end.get(partition, 0)]
        out.append([r for r in rows if r is not None])
        start = end
    return out


def _rejected(topic: str, every) -> list[bytes]:
    return sorted(v for _, _, stamp, v in every if oracle.parse_line(topic, v.decode("utf-8", "replace"), stamp) is None)


def _run(spark, tmp_path, broker: str, job: str):
    layout = Layout(str(tmp_path / "stateops"))
    spec = load_jobs(_config(tmp_path, broker, job), layout)[job]
    assert spec.source == "kafka"
    result = run_job(spark, spec, layout)
    every = {i.name: records(broker, i.name) for i in spec.inputs}
    batches = {i.name: _batches(spec.checkpoint_path(layout), i.name, every[i.name]) for i in spec.inputs}
    dead = table_rows(layout.deadletter_table(job), ["input", "raw_bytes"])
    assert sorted((i, bytes(b)) for i, b in dead) == sorted((i.name, v) for i in spec.inputs
                                                             for v in _rejected(i.name, every[i.name]))
    return spec, layout, result, batches


@pytest.fixture(params=["delta-rs", "spark"])
def writer(request, spark):
    """The Delta writer of the runs (jobs.session DELTA_WRITER_CONF): the MERGE job runs on both."""
    from jobs.session import DELTA_WRITER_CONF

    before = spark.conf.get(DELTA_WRITER_CONF, "delta-rs")
    spark.conf.set(DELTA_WRITER_CONF, request.param)
    yield request.param
    spark.conf.set(DELTA_WRITER_CONF, before)


def test_user_activity_on_kafka_matches_the_oracle(spark, broker, writer, tmp_path):
    spec, layout, result, batches = _run(spark, tmp_path, broker, "user_activity")
    assert result.batches_skipped == 0
    engines = {str(c.get("engineInfo", c.get("clientVersion", ""))) for c in DeltaTable(layout.table("user_activity"))
               .history() if c.get("operation") == "MERGE"}
    assert engines and all(("Delta-Lake" in e) == (writer == "spark") for e in engines), engines
    assert result.batches >= 3, "maxOffsetsPerTrigger splits the run into several batches"
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    expected = oracle.user_activity(batches["events"], spec.watermark_seconds * 1000)
    assert expected and set(got) == expected and len(got) == len(set(got))
    assert sum(r[3] for r in expected) < sum(len(b) for b in batches["events"]), "the watermark dropped late rows"
    dead = table_rows(layout.deadletter_table("user_activity"), ["raw", "raw_bytes", "error"])
    assert any(bytes(b) == BAD_BYTES and "\ufffd" in raw for raw, b, _ in dead)
    assert any("future_tolerance" in error for *_, error in dead), "poison timestamps are dead letters"


def test_user_sessions_on_kafka_matches_the_oracle(spark, broker, tmp_path):
    spec, layout, _, batches = _run(spark, tmp_path, broker, "user_sessions")
    got = table_rows(layout.table("user_sessions"), ["session_start", "session_end", "user_id", "events",
                                                     "first_event_time", "last_event_time"])
    expected = oracle.user_sessions(batches["events"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)


def test_order_payments_on_kafka_matches_the_oracle(spark, broker, tmp_path):
    spec, layout, _, batches = _run(spark, tmp_path, broker, "order_payments")
    got = table_rows(layout.table("order_payments"), ["order_id", "payment_id", "order_time", "payment_time"])
    expected = oracle.order_payments(batches["orders"], batches["payments"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)


def test_user_actions_on_kafka_matches_the_oracle(spark, broker, tmp_path):
    spec, layout, _, batches = _run(spark, tmp_path, broker, "user_actions")
    got = table_rows(layout.table("user_actions"),
                     ["user_id", "action_count", "last_action", "first_event_time", "last_event_time"])
    expected = oracle.user_actions(batches["events"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)
