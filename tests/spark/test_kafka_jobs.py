"""Every built-in job on a real Kafka broker (scripts/kafka, KRaft, loopback), one topic per input, equal to the
batch recomputation over the records each micro-batch read.

The generator's input (late, duplicate and malformed events, poison timestamps in 2099) plus a record of invalid
UTF-8 is produced to topics with LogAppendTime: a record's arrival is its broker timestamp. Each job reads with
`maxOffsetsPerTrigger`, so a run makes several batches and the watermark drops late rows between them. The
oracle (tests/support/oracle.py) gets the records of each batch from the checkpoint: `offsets/N` holds, per topic and
partition, the next offset to read after batch N.
"""
from __future__ import annotations

import json
import os

import pytest
from deltalake import DeltaTable

from click.testing import CliRunner

from stateops.jobs.definition.environment import Environment, load_jobs, read_settings
from stateops.jobs.runtime.runner import run_job
from stateops import progress
from stateops.cli.main import main
from stateops.layout import Layout
from tests.support import kafka_oracle, oracle
from tests.support.audit_queries import state_rows
from tests.support.delta_rows import table_rows
from tests.support.delta_writers import spark_writer_in_long_tier
from tests.support.scenarios import KAFKA_BAD_BYTES as BAD_BYTES, KAFKA_PER_TRIGGER as PER_TRIGGER, kafka_config, KAFKA_CHAIN_STORE
from tests.support.servers.kafka import records

pytestmark = pytest.mark.spark


def _run(spark, tmp_path, broker: str, job: str, layout: Layout | None = None):
    """The job over the module's topics (in a new home, or on from `layout`'s checkpoint), its dead letters
    checked; returns (spec, layout, the run's result, the records each batch read per input)."""
    layout = layout or Layout(str(tmp_path / "stateops"))
    store = KAFKA_CHAIN_STORE if job == "user_activity" else None  # the chain on the module's home
    spec = load_jobs(kafka_config(tmp_path, broker, job, store), layout)[job]
    assert spec.source == "kafka"
    result = run_job(spark, spec, layout, settings=read_settings())
    every = {i.name: records(broker, i.name) for i in spec.inputs}
    batches = {i.name: kafka_oracle.batches(spec.checkpoint_path(layout), i.name, every[i.name]) for i in spec.inputs}
    dead = table_rows(layout.deadletter_table(job), ["input", "raw_bytes"])
    assert sorted((i, bytes(b)) for i, b in dead) == sorted((i.name, v) for i in spec.inputs
                                                             for v in kafka_oracle.rejected(i.name, every[i.name]))
    return spec, layout, result, batches



@pytest.mark.long  # the default run: a job run on Kafka against the batch recomputation over Spark's own rows (test_line_parser's hostile Kafka values); the oracles on files (test_jobs_oracle)
@spark_writer_in_long_tier("each_delta_writer")
def test_user_activity_on_kafka_matches_the_oracle(spark, kafka_topics, kafka_user_activity, each_delta_writer,
                                                  tmp_path):
    """The MERGE job runs on both Delta writers (the other jobs on the default); on the Spark writer in the long
    tier (the default run's Kafka kill trials alternate the writers). On the default writer, the module's run
    (`kafka_user_activity`, which the runbook tests below go on from) is the one checked, run on once more."""
    broker, writer = kafka_topics, each_delta_writer
    built = kafka_user_activity if writer == "delta-rs" else None
    spec, layout, result, batches = _run(spark, tmp_path, broker, "user_activity", built)
    assert result.batches_skipped == 0
    engines = {str(c.get("engineInfo", c.get("clientVersion", ""))) for c in DeltaTable(layout.table("user_activity"))
               .history() if c.get("operation") == "MERGE"}
    assert engines and all(("Delta-Lake" in e) == (writer == "spark") for e in engines), engines
    assert sum(1 for rows in batches["events"] if rows) >= 3, "maxOffsetsPerTrigger splits the run into several batches"
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    expected = oracle.user_activity(batches["events"], spec.watermark_seconds * 1000)
    assert expected and set(got) == expected and len(got) == len(set(got))
    assert sum(r[3] for r in expected) < sum(len(b) for b in batches["events"]), "the watermark dropped late rows"
    dead = table_rows(layout.deadletter_table("user_activity"), ["raw", "raw_bytes", "error"])
    assert any(bytes(b) == BAD_BYTES and "\ufffd" in raw for raw, b, _ in dead)
    assert any("future_tolerance" in error for *_, error in dead), "poison timestamps are dead letters"
    # Lag: every record was in the topic when the run began, so after batch N the query is the topic's size
    # minus what batches 0..N read behind (the last batch: 0), per partition in the progress rows.
    every = records(broker, "events")
    ends = kafka_oracle.batch_ends(spec.checkpoint_path(layout), "events")
    partitions = set(ends[-1])  # every partition of the topic, records or not (the producer may fill only one)
    size = {p: 1 + max((o for q, o, *_ in every if q == p), default=-1) for p in partitions}
    rows = sorted((r for r in progress.read(layout, "user_activity").to_pylist() if r["query_name"] == "user_activity"),
                  key=lambda r: r["batch_id"])
    assert [json.loads(r["kafka_lag_json"]) for r in rows] == [
        {f"events/{p}": size[p] - end.get(p, 0) for p in partitions} for end in ends]
    assert [r["kafka_lag"] for r in rows][-1] == 0 and rows[0]["kafka_lag"] > 0
    status = CliRunner().invoke(main, ["--home", layout.home, "--config", str(tmp_path / "kafka.toml"), "jobs",
                                       "status", "user_activity", "--json"])
    assert status.exit_code == 0, status.output
    assert json.loads(status.output)["kafka_lag"] == {"total": 0, "partitions": {f"events/{p}": 0 for p in partitions},
                                                      "batch_id": rows[-1]["batch_id"]}


@pytest.mark.long  # Kafka in the default run: a job run on Kafka (test_line_parser); each job on files
def test_user_sessions_on_kafka_matches_the_oracle(spark, kafka_topics, tmp_path):
    broker = kafka_topics
    spec, layout, _, batches = _run(spark, tmp_path, broker, "user_sessions")
    got = table_rows(layout.table("user_sessions"), ["session_start", "session_end", "user_id", "events",
                                                     "first_event_time", "last_event_time"])
    expected = oracle.user_sessions(batches["events"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)


@pytest.mark.long  # the default run: a job run on Kafka (test_line_parser), the join on files (test_jobs_oracle)
def test_order_payments_on_kafka_matches_the_oracle(spark, kafka_topics, tmp_path):
    broker = kafka_topics
    spec, layout, _, batches = _run(spark, tmp_path, broker, "order_payments")
    got = table_rows(layout.table("order_payments"), ["order_id", "payment_id", "order_time", "payment_time"])
    expected = oracle.order_payments(batches["orders"], batches["payments"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)

    # explain-key reads the key's records by offset range: an order that has no joined row, at a middle batch
    checkpoint = spec.checkpoint_path(layout)
    ends = {topic: kafka_oracle.batch_ends(checkpoint, topic) for topic in ("orders", "payments")}
    batch = len(ends["orders"]) // 2
    read = {topic: [(p, o, oracle.parse_line(topic, v.decode("utf-8", "replace"), stamp))
                    for p, o, stamp, v in records(broker, topic) if o < ends[topic][batch].get(p, 0)]
            for topic in ends}
    joined = {row[0] for row in got}
    key = min(row["order_id"] for _, _, row in read["orders"] if row and row["order_id"] not in joined)
    done = CliRunner().invoke(main, ["--home", layout.home, "--config", str(tmp_path / "kafka.toml"), "explain-key",
                                     "order_payments", "--key", key, "--batch-id", str(batch), "--json"])
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)
    assert [(r["input"], r["batch_id"], r["partition"], r["offset"]) for r in found["inputs"]] == sorted(
        ((topic, next(i for i, end in enumerate(ends[topic]) if end.get(p, 0) > o), p, o)
         for topic, rows in read.items() for p, o, row in rows if row and row["order_id"] == key),
        key=lambda r: (r[1], r[2], r[3], r[0]))
    assert found["reason"] != "never_arrived" and found["batch_id"] == batch


@pytest.mark.long  # Kafka in the default run: a job run on Kafka (test_line_parser); each job on files
def test_user_actions_on_kafka_matches_the_oracle(spark, kafka_topics, tmp_path):
    broker = kafka_topics
    spec, layout, _, batches = _run(spark, tmp_path, broker, "user_actions")
    got = table_rows(layout.table("user_actions"),
                     ["user_id", "action_count", "last_action", "first_event_time", "last_event_time"])
    expected = oracle.user_actions(batches["events"], spec.watermark_seconds * 1000)
    assert expected and sorted(got) == sorted(expected)


@pytest.mark.long  # the default run: this job from outside the package on files (test_user_job), Kafka here
def test_a_users_own_job_on_kafka_matches_its_oracle(spark, kafka_topics, tmp_path, importable):
    """examples/engagement.py (dedup, then transformWithStateInPandas), registered by examples/engagement.toml
    from outside the package, reading the topic `events`: its table equals tests/support/engagement_oracle.py over the
    records each batch read, and its state (Spark's state reader) holds the rows the oracle says."""
    import shutil

    from tests.support import ROOT as root, engagement_oracle

    broker = kafka_topics
    folder = tmp_path / "user_code"
    folder.mkdir()
    shutil.copy(os.path.join(root, "examples", "engagement.py"), folder / "engagement.py")
    importable(folder)
    config = tmp_path / "engagement-kafka.toml"
    with open(os.path.join(root, "examples", "engagement.toml")) as handle:
        text = handle.read()
    config.write_text(text.replace("[[jobs.user_engagement.inputs]]",
                                   f'source = "kafka"\nkafka_bootstrap_servers = "{broker}"\n'
                                   f'kafka_options = {{ maxOffsetsPerTrigger = "{PER_TRIGGER}" }}\n\n'
                                   "[[jobs.user_engagement.inputs]]", 1))
    layout = Layout(str(tmp_path / "stateops"))
    spec = load_jobs(str(config), layout)["user_engagement"]
    assert spec.source == "kafka"
    result = run_job(spark, spec, layout, settings=read_settings())
    assert result.batches >= 3
    batches = kafka_oracle.batches(spec.checkpoint_path(layout), "events", records(broker, "events"))
    rows = DeltaTable(layout.table("user_engagement")).to_pyarrow_table().to_pylist()
    got = {r["user_id"]: (r["events"], round(r["value_sum"], 6), int(r["first_event_time"].timestamp() * 1000),
                          int(r["last_event_time"].timestamp() * 1000), r["top_action"], r["top_action_events"])
           for r in rows}
    assert got and got == engagement_oracle.engagement(batches)


@pytest.mark.long  # the default run: the rewind's plan and refusals and a Kafka rebuild's coverage
# (tests/unit/test_recovery_preflight.py), a rebuild on files (test_recovery)
def test_rewind_and_rebuild_on_a_kafka_job_replay_from_the_recorded_offsets(spark, kafka_topics, kafka_user_activity,
                                                                          tmp_path, monkeypatch):
    """`recover --mode rewind` to batch 1 restarts from the offsets offsets/1 recorded and reads the same records
    again; `recover --mode rebuild` with a longer delay starts a fresh checkpoint where the old one started
    (sources/0/0) and replays every record. After each, the table equals the oracle over the records the
    checkpoint's batches read (the rebuild's: its upserts over the rows it does not emit again); the rebuild
    admits the rows the shorter delay dropped as late. (Runs before the tests that add records to `events`.)"""
    from stateops.jobs.runtime.recovery import recover
    from stateops.checkpoints import kafka_offsets
    from stateops.recovery import RecoveryRequest

    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    broker = kafka_topics
    spec, layout, _, _ = _run(spark, tmp_path, broker, "user_activity", kafka_user_activity)
    checkpoint, config = spec.checkpoint_path(layout), str(tmp_path / "kafka.toml")
    columns = ["window_start", "window_end", "user_id", "events", "value_sum"]
    ends, started = kafka_oracle.batch_ends(checkpoint, "events"), kafka_offsets.initial(checkpoint)
    assert len(ends) >= 4 and started == {"events": {str(p): 0 for p in ends[0]}}

    environment = Environment.from_env(layout=layout, config_path=config)
    report = recover(environment, RecoveryRequest("user_activity", "rewind", to_batch=1, reason="replay",
                                                  confirm="user_activity", dry_run=False), spark=spark)
    assert report.outcome == "succeeded", report.error
    assert kafka_oracle.batch_ends(checkpoint, "events") == ends, "the replay read the same records, batch by batch"
    batches = kafka_oracle.batches(checkpoint, "events", records(broker, "events"))
    got = table_rows(layout.table("user_activity"), columns)
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)

    before = set(got)
    environment = Environment.from_env(layout=layout, config_path=config)
    report = recover(environment, RecoveryRequest("user_activity", "rebuild", watermark_delay="2 hours",
                                                  reason="late data", confirm="user_activity", dry_run=False),
                     spark=spark)
    assert report.outcome == "succeeded", report.error
    total = sum(ends[-1].values())
    assert any(f"replays the {total} records the old checkpoint read" in note for note in report.notes), report.notes
    assert kafka_offsets.initial(checkpoint) == started and kafka_oracle.batch_ends(checkpoint, "events")[-1] == ends[-1]
    batches = kafka_oracle.batches(checkpoint, "events", records(broker, "events"))
    expected = oracle.user_activity(batches, 120 * 60_000)
    assert expected != oracle.user_activity(batches, spec.watermark_seconds * 1000), "the longer delay matters"
    got = table_rows(layout.table("user_activity"), columns)
    # The MERGE sink upserts what the rebuild emits; a row of the old table the replay does not emit again stays
    # (docs/operations.md), e.g. a window whose events the longer delay now deduplicates against older ones.
    emitted = {r[:3] for r in expected}
    assert len(got) == len(set(got)) and set(got) == expected | {r for r in before if r[:3] not in emitted}


@pytest.mark.long  # the default run: adjust acting from Dagster on files (test_recovery_dagster), rewind and rebuild
# on this Kafka job from its recorded offsets (same module), the caught-up verdict (tests/unit/test_recovery_caught_up.py)
def test_the_adjust_runbook_on_a_kafka_job_restarts_where_it_stopped(spark, kafka_topics, kafka_user_activity, tmp_path,
                                                                      monkeypatch):
    """`recover --mode adjust` on a Kafka job: stop (nothing runs), archive, the new delay, restart on the same
    checkpoint, which reads the records produced since from the offsets it recorded, verified; the table
    equals the oracle with the delay switching at the restart. (Adds records to `events`: the tests after this
    one compute their oracles from whatever the topic holds.)"""
    from stateops.jobs.definition.catalog import Catalog
    from stateops.jobs.runtime.recovery import job_target, recover
    from stateops.recovery import RecoveryRequest
    from stateops.recovery.observation import observe_reading

    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    broker = kafka_topics
    spec, layout, _, _ = _run(spark, tmp_path, broker, "user_activity", kafka_user_activity)
    checkpoint = spec.checkpoint_path(layout)
    ends = kafka_oracle.batch_ends(checkpoint, "events")
    target = job_target(spec, Catalog.load(layout, str(tmp_path / "kafka.toml")))
    assert observe_reading(layout, target, "r", False, None).unread == ()  # the verifier's "read everything"
    more = tmp_path / "more"
    done = CliRunner().invoke(main, ["--home", str(more), "generate", "--events=400", "--files=2", "--users=40",
                                     "--start=2026-01-01T02:00:00+00:00", "--seed=5", "--kafka", broker])
    assert done.exit_code == 0, done.output
    now = {}
    for p, o, *_ in records(broker, "events"):
        now[p] = max(now.get(p, 0), o + 1)
    assert observe_reading(layout, target, "r", False, None).unread == tuple(
        f"events/{p}: offsets {ends[-1].get(p, 0)}..{now[p] - 1}" for p in sorted(now) if now[p] > ends[-1].get(p, 0))
    before = len(ends)
    environment = Environment.from_env(layout=layout, config_path=str(tmp_path / "kafka.toml"))
    report = recover(environment, RecoveryRequest("user_activity", "adjust", watermark_delay="20 minutes",
                                                  reason="late data", confirm="user_activity", dry_run=False),
                     spark=spark)
    assert report.outcome == "succeeded", report.error
    batches = kafka_oracle.batches(checkpoint, "events", records(broker, "events"))
    assert len(batches) > before, "the restart read the new records"
    delays = oracle.delays_switching(len(batches), 10 * 60_000, 20 * 60_000, before)
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, delays)


@pytest.mark.long  # the default run: the repartition plan and its refusals (tests/unit/test_recovery_preflight.py), the store matrix's offline repartition (test_store_matrix [format2_changelog])
def test_the_repartition_runbook_on_a_kafka_job_moves_the_state_and_loses_nothing(spark, kafka_topics,
                                                                                    kafka_user_activity, tmp_path,
                                                                                    monkeypatch):
    """`recover --mode repartition` on a Kafka job: the state is repartitioned offline (4 -> 3), the query
    restarts on it and reads the records produced since; the table equals the oracle, the state has 3
    partitions. (Adds records to `events`, like the adjust test.)"""
    from stateops.jobs.runtime.recovery import recover
    from stateops.checkpoints.checkpoint import Checkpoint
    from stateops.recovery import RecoveryRequest

    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    broker = kafka_topics
    spec, layout, _, _ = _run(spark, tmp_path, broker, "user_activity", kafka_user_activity)  # reads the adjust's
    checkpoint = spec.checkpoint_path(layout)
    done = CliRunner().invoke(main, ["--home", str(tmp_path / "more"), "generate", "--events=300", "--files=2",
                                     "--users=40", "--start=2026-01-01T03:00:00+00:00", "--seed=6", "--kafka", broker])
    assert done.exit_code == 0, done.output
    environment = Environment.from_env(layout=layout, config_path=str(tmp_path / "kafka.toml"))
    report = recover(environment, RecoveryRequest("user_activity", "repartition", shuffle_partitions=3, reason="skew",
                                                  confirm="user_activity", dry_run=False), spark=spark)
    assert report.outcome == "succeeded", report.error
    latest = Checkpoint(checkpoint).latest_committed_batch()
    assert Checkpoint(checkpoint).shuffle_partitions(latest) == 3
    batches = kafka_oracle.batches(checkpoint, "events", records(broker, "events"))
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)


@pytest.mark.long  # the default run: the switch on files, both ways on four jobs (test_store_switch); Kafka's own
# offsets are its difference
def test_the_store_switch_on_a_kafka_job_reads_on_from_the_offsets_it_recorded(spark, kafka_topics, tmp_path,
                                                                                monkeypatch):
    """`recover --mode switch-store` on a Kafka job that ran on Spark's in-memory store (its own home): the state of
    its latest batch the same rows in RocksDB (Spark's reader), the restart reading on from the offsets the batches
    before it ended at, the table equal to the oracle over the records each batch read. Runs before the test that
    deletes records (it adds records to `events`, like the adjust test)."""
    from stateops.checkpoints.checkpoint import Checkpoint
    from stateops.jobs.runtime.recovery import recover
    from stateops.recovery import RecoveryRequest
    from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER

    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    broker, job = kafka_topics, "user_activity"
    config = kafka_config(tmp_path, broker, job, "memory")
    layout = Layout(str(tmp_path / "stateops"))
    spec = load_jobs(config, layout)[job]
    run_job(spark, spec, layout, settings=read_settings())
    checkpoint = spec.checkpoint_path(layout)
    batch = Checkpoint.open(checkpoint).latest_committed_batch()
    assert Checkpoint.open(checkpoint).state_provider(batch) == HDFS_PROVIDER
    before, ends = state_rows(spark, checkpoint, batch), kafka_oracle.batch_ends(checkpoint, "events")
    done = CliRunner().invoke(main, ["--home", str(tmp_path / "more"), "generate", "--events=300", "--files=2",
                                     "--users=40", "--start=2026-01-01T04:00:00+00:00", "--seed=8", "--kafka", broker])
    assert done.exit_code == 0, done.output
    environment = Environment.from_env(layout=layout, config_path=config)
    report = recover(environment, RecoveryRequest(job, "switch-store", to_store="rocksdb", reason="outgrew memory",
                                                  confirm=job, dry_run=False), spark=spark)
    assert report.outcome == "succeeded", report.error
    assert Checkpoint(checkpoint).state_provider(batch) == ROCKSDB_PROVIDER
    assert state_rows(spark, checkpoint, batch) == before and any(before.values())
    after = kafka_oracle.batch_ends(checkpoint, "events")
    assert len(after) > len(ends) and after[:len(ends)] == ends, "the batches before the switch stay as they were"
    batches = kafka_oracle.batches(checkpoint, "events", records(broker, "events"))
    got = table_rows(layout.table(job), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)


@pytest.mark.long  # the default run: the plan's refusals on files (test_recovery); this needs the module's Kafka home
def test_a_rewind_whose_records_kafka_deleted_is_refused_naming_them(spark, kafka_topics, kafka_user_activity,
                                                                     tmp_path):
    """Kafka's retention (here the admin API's delete_records) deleted records a rewind to batch 1 would replay:
    the plan refuses, naming partitions and offsets, instead of letting the restart skip them; a later batch
    whose offsets Kafka still holds plans. Runs last in this module: it deletes records of `events`."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from stateops.jobs.runtime.recovery import plan
    from stateops.recovery import RecoveryRequest
    from stateops.recovery.model import RecoveryRefused

    broker = kafka_topics
    spec, layout, _, _ = _run(spark, tmp_path, broker, "user_activity", kafka_user_activity)
    ends = kafka_oracle.batch_ends(spec.checkpoint_path(layout), "events")
    assert len(ends) >= 4
    cut = {p: ends[2][p] for p in ends[2]}  # everything batches 0..2 read is gone: batch 1's replay needs batch 2's
    admin = AdminClient({"bootstrap.servers": broker})  # kept: a collected client never completes its futures
    futures = admin.delete_records([TopicPartition("events", p, offset) for p, offset in cut.items()])
    for future in futures.values():
        future.result(30)
    environment = Environment.from_env(layout=layout, config_path=str(tmp_path / "kafka.toml"))
    with pytest.raises(RecoveryRefused) as refused:
        plan(environment, RecoveryRequest("user_activity", "rewind", to_batch=1))
    message = str(refused.value)
    for p in cut:
        if cut[p] > ends[1][p]:
            assert f"events/{p}: offsets {ends[1][p]}..{cut[p] - 1} (the log now starts at {cut[p]})" in message
    assert "would be skipped" in message and "\n" not in message
    later = plan(environment, RecoveryRequest("user_activity", "rewind", to_batch=2))
    assert later.mode == "rewind"
    with pytest.raises(RecoveryRefused) as refused:  # a rebuild replays from where the checkpoint started
        plan(environment, RecoveryRequest("user_activity", "rebuild"))
    message = str(refused.value)
    assert "cannot rebuild" in message and "would be skipped" in message
    for p in cut:
        if cut[p] > 0:
            assert f"events/{p}: offsets 0..{cut[p] - 1} (the log now starts at {cut[p]})" in message
