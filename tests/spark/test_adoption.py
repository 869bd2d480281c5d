"""`stateops jobs adopt` (issue 51): a plain PySpark job, run without StateOps on Spark's default store, is brought
under StateOps with its checkpoint, table and landing folder, and StateOps runs it on: its first run reads only the
files the old query had not read, and the table equals the batch recomputation of all input (tests/support/oracle.py,
batch by batch as the checkpoint's logs say the runs composed them). The plan changes nothing; its refusals are one
line each, with nothing changed. Oracles: the oracle over the landing files, Spark's state reader, the file system."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops.audit import deep_audit
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.cli.main import main
from stateops.jobs.demo.generator import generate
from stateops.layout import Layout
from stateops.checkpoints.sparkstate import reading_format
from stateops.checkpoints.state_store import CHANGELOG, CHECKPOINT_FORMAT, HDFS_PROVIDER, PROVIDER, ROCKSDB_PROVIDER

from tests.support import oracle, plain_jobs
from tests.support.audit_queries import nonzero, oracle_rows, state_rows
from tests.support.delta_rows import table_rows
from tests.support.outcomes import COLUMNS
from tests.support.scenarios import SMALL, more_input
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark

JOB = "legacy"
TOPIC = "legacy_events"  # not the input's name: the input's `path` names it
DELAY_MS = 10 * 60 * 1000
ACTIVITY = COLUMNS["user_activity"]


class Legacy:
    """A plain job's folders (outside the StateOps home), its config for StateOps, and the CLI on that home."""

    def __init__(self, tmp_path, sink: str, kafka: str | None = None):
        self.user = Layout(str(tmp_path / "user"))  # the generator writes user/landing/events
        self.landing = self.user.landing("events")
        self.checkpoint = str(tmp_path / "user" / "checkpoint")
        self.table = str(tmp_path / "user" / "table")
        self.home = Layout(str(tmp_path / "home"))
        self.config = str(tmp_path / "stateops.toml")
        self.sink, self.kafka = sink, kafka
        self.configure()

    def configure(self, **changes: str) -> None:
        text = plain_jobs.config(JOB, landing=TOPIC if self.kafka else self.landing, checkpoint=self.checkpoint,
                                 table=self.table, sink=self.sink, kafka=self.kafka)
        for key, value in changes.items():
            text = text.replace(key, value)
        with open(self.config, "w") as handle:
            handle.write(text)

    def cli(self, *args: str):
        return CliRunner().invoke(main, ["--home", self.home.home, "--config", self.config, *args])

    def ok(self, *args: str) -> dict | str:
        done = self.cli(*args)
        assert done.exit_code == 0, done.output
        return json.loads(done.output) if "--json" in args else done.output

    def refused(self, *args: str) -> str:
        """Exit 2, the line names the refusal, and neither the checkpoint nor the table changed."""
        before = file_hashes(self.checkpoint), file_hashes(self.table)
        done = self.cli(*args)
        assert done.exit_code == 2, done.output
        assert (file_hashes(self.checkpoint), file_hashes(self.table)) == before
        assert not os.path.exists(self.home.deadletter_checkpoint(JOB))
        return done.output


def _new_file_dead_letters(legacy: Legacy, old_files: int) -> int:
    batches = oracle.landing_batches(legacy.landing)[old_files:]
    return sum(oracle.parse_line("events", line, arrival) is None for arrival, lines in batches for line in lines)


def _plain(spark, tmp_path, sink: str, no_data_batches: bool = True,
           state: dict[str, str] = plain_jobs.DEFAULT_STORE) -> Legacy:
    """The plain job run over three files (three micro-batches) on `state`'s store, then two more files landed for
    StateOps."""
    legacy = Legacy(tmp_path, sink)
    generate(legacy.user, replace(SMALL, files=3, events=300))
    plain_jobs.run_plain(spark, legacy.landing, legacy.checkpoint, legacy.table, sink=sink,
                         no_data_batches=no_data_batches, state=state)
    read = Checkpoint.open(legacy.checkpoint).source_files()[0]
    assert sorted({batch for _, batch in read}) == [0, 1, 2]  # a file a batch (then a no-data batch: the watermark)
    more_input(legacy.user, hour=5, seed=61)
    return legacy


def test_a_plain_merge_job_on_the_default_store_is_adopted_and_run_on_without_reprocessing(spark, tmp_path):
    legacy = _plain(spark, tmp_path, "merge")
    plan = legacy.ok("jobs", "adopt", JOB, "--json")
    assert plan["status"] == "ready" and plan["refusals"] == [], plan
    last = Checkpoint.open(legacy.checkpoint).committed_batches()[-1]
    assert (plan["last_committed_batch"], plan["batch_in_flight"], plan["in_flight_output"]) == (last, None, None)
    assert plan["fit"]["status"] == "compatible", plan["fit"]
    assert plan["sources"] == [{"index": 0, "kind": "files", "where": [legacy.landing], "input": "events",
                                "offset": {"logOffset": 2}, "files_read": 3, "problem": None}]
    assert plan["sink"]["delta"] and plan["state_store"]["store"]["value"] == "memory", plan
    assert plan["deadletter"]["kind"] == "files" and plan["deadletter"]["files"] == {"events": 3}
    assert not os.path.exists(legacy.home.deadletter_checkpoint(JOB))  # the plan wrote nothing

    # Refused in one line, nothing changed: a query that does not fit the state; an input read elsewhere.
    legacy.configure(**{"plain_jobs:activity": "plain_jobs:deduplicated"})
    assert "does not fit the checkpoint's state" in legacy.refused("jobs", "adopt", JOB, "--confirm")
    other = str(tmp_path / "elsewhere")
    os.makedirs(other)
    legacy.configure(**{f'path = "{legacy.landing}"': f'path = "{other}"'})
    assert "source 0 of the checkpoint: it read" in legacy.refused("jobs", "adopt", JOB, "--confirm")
    legacy.configure()

    assert "adopted at" in legacy.ok("jobs", "adopt", JOB, "--confirm")
    assert "already adopted" in legacy.cli("jobs", "adopt", JOB, "--confirm").output
    legacy.ok("jobs", "run", JOB, "--json")
    checkpoint = Checkpoint.open(legacy.checkpoint)
    new = sorted(os.path.basename(path) for path, batch in checkpoint.source_files()[0] if batch > 2)
    assert new == sorted(os.listdir(legacy.landing))[3:] and len(new) == 2  # the new files only, each read once
    assert checkpoint.committed_batches()[0] == 0 and checkpoint.committed_batches()[-1] > last
    assert checkpoint.state_provider(checkpoint.committed_batches()[-1]) == HDFS_PROVIDER  # still Spark's default

    expected = oracle.user_activity(oracle.typed_batches(legacy.landing, "events", legacy.checkpoint), DELAY_MS)
    got = table_rows(legacy.table, ACTIVITY)
    assert len(got) == len(set(got)) and set(got) == expected
    dead = table_rows(legacy.home.deadletter_table(JOB), ["raw"])
    assert len(dead) == _new_file_dead_letters(legacy, 3) > 0  # the new files' bad lines, none of the old ones

    report = deep_audit(spark, legacy.checkpoint)
    assert report.provider == HDFS_PROVIDER and report.operators
    for op in report.operators:
        assert nonzero(op.rows_per_partition) == oracle_rows(spark, legacy.checkpoint, operatorId=op.operator_id)
    legacy.ok("retention", "plan", "--json")
    user = got[0][2]
    explained = legacy.ok("explain-key", JOB, "--key", user, "--json")
    assert explained["job"] == JOB, explained


def test_a_delta_sink_job_with_a_batch_in_flight_is_adopted_and_the_batch_is_not_written_twice(spark, tmp_path):
    """Delta's streaming sink (append) records the query id with each batch. A crash after the sink's commit and
    before Spark's commit log leaves batch 2 in flight and written: StateOps runs it again (its state) and writes
    it nowhere; a duplicate row would show it written twice."""
    legacy = _plain(spark, tmp_path, "delta", no_data_batches=False)
    checkpoint = Checkpoint.open(legacy.checkpoint)
    assert checkpoint.committed_batches() == [0, 1, 2]
    os.remove(os.path.join(legacy.checkpoint, "commits", "2"))  # what the crash leaves
    plan = legacy.ok("jobs", "adopt", JOB, "--json")
    assert plan["status"] == "ready", plan
    assert (plan["last_committed_batch"], plan["batch_in_flight"], plan["in_flight_output"]) == (1, 2, "written")
    assert plan["written_through"] == 2 and plan["sink"]["txn_app_id"] == checkpoint.query_id(), plan
    assert plan["deadletter"]["files"] == {"events": 2}  # the in-flight batch's file is read again: its bad lines too

    legacy.ok("jobs", "adopt", JOB, "--confirm")
    run = legacy.ok("jobs", "run", JOB, "--json")
    expected = {(r["event_id"], r["user_id"], r["t"], r["value"]) for r in oracle.deduplicated(
        oracle.typed_batches(legacy.landing, "events", legacy.checkpoint), DELAY_MS)}
    got = table_rows(legacy.table, ["event_id", "user_id", "event_time", "value"])
    assert len(got) == len(set(got)) and set(got) == expected
    assert run["batches_skipped"] == 1, run
    dead = table_rows(legacy.home.deadletter_table(JOB), ["raw"])
    assert len(dead) == _new_file_dead_letters(legacy, 2)  # the batch in flight's file, and the new ones


@pytest.mark.long  # the default run: the default store's adoption (above); the store and format are its difference
def test_a_plain_job_on_rocksdb_in_checkpoint_format_2_is_adopted_and_run_on_in_its_format(spark, tmp_path):
    """A plain job on RocksDB with changelog checkpointing and checkpoint format 2 (state files `<version>_<id>`):
    adopted, StateOps runs it on in format 2 (Spark does not pin the format: each run keeps the checkpoint's), its
    first run reads only the new files, the table equals the oracle, and the deep audit equals Spark's reader."""
    state = {PROVIDER: ROCKSDB_PROVIDER, CHANGELOG: "true", CHECKPOINT_FORMAT: "2"}
    legacy = _plain(spark, tmp_path, "merge", state=state)
    plan = legacy.ok("jobs", "adopt", JOB, "--json")
    assert plan["status"] == "ready", plan
    formats = {name: plan["state_store"][name]["value"] for name in ("store", "changelog", "checkpoint_format")}
    assert formats == {"store": "rocksdb", "changelog": True, "checkpoint_format": 2}, plan["state_store"]
    legacy.ok("jobs", "adopt", JOB, "--confirm")
    legacy.ok("jobs", "run", JOB)

    checkpoint = Checkpoint.open(legacy.checkpoint)
    latest = checkpoint.committed_batches()[-1]
    new = sorted(os.path.basename(path) for path, batch in checkpoint.source_files()[0] if batch > 2)
    assert new == sorted(os.listdir(legacy.landing))[3:] and len(new) == 2
    assert checkpoint.checkpoint_format(latest) == 2 and checkpoint.state_provider(latest) == ROCKSDB_PROVIDER
    expected = oracle.user_activity(oracle.typed_batches(legacy.landing, "events", legacy.checkpoint), DELAY_MS)
    got = table_rows(legacy.table, ACTIVITY)
    assert len(got) == len(set(got)) and set(got) == expected
    report = deep_audit(spark, legacy.checkpoint)
    assert {op.operator_id for op in report.operators} == {0, 1}
    with reading_format(spark, 2):
        for op in report.operators:
            assert nonzero(op.rows_per_partition) == oracle_rows(spark, legacy.checkpoint,
                                                                 operatorId=op.operator_id)


@pytest.mark.long  # the default run: the adopted job's run, deep audit, retention plan and explain-key (above)
def test_an_adopted_job_is_adjusted_by_the_runbook_like_any_other(spark, tmp_path):
    """After adoption, `recover run --mode adjust` stops, archives, sets the watermark and restarts the adopted
    checkpoint: the restart reads the new files, and the table equals the oracle with the delay switched there."""
    legacy = _plain(spark, tmp_path, "merge")
    legacy.ok("jobs", "adopt", JOB, "--confirm")
    legacy.ok("jobs", "run", JOB)
    before = Checkpoint.open(legacy.checkpoint).committed_batches()[-1] + 1
    more_input(legacy.user, hour=7, seed=62)
    done = legacy.cli("recover", "run", JOB, "--mode", "adjust", "--watermark", "20 minutes", "--confirm", JOB)
    assert done.exit_code == 0, done.output
    batches = oracle.typed_batches(legacy.landing, "events", legacy.checkpoint)
    assert len(batches) > before, "the restart read the new files"
    expected = oracle.user_activity(batches, oracle.delays_switching(len(batches), DELAY_MS, 2 * DELAY_MS, before))
    got = table_rows(legacy.table, ACTIVITY)
    assert len(got) == len(set(got)) and set(got) == expected


def _produce(kafka: str, layout: Layout, files: slice) -> None:
    from tests.support.servers.kafka import produce

    for _, lines in oracle.landing_batches(layout.landing("events"))[files]:
        produce(kafka, TOPIC, [line.encode() for line in lines])


@pytest.mark.long  # the default run: a file job's adoption (above); Kafka's own source offsets are its difference
def test_a_plain_kafka_job_is_adopted_and_reads_only_the_records_it_had_not_read(spark, kafka, tmp_path):
    from tests.support import kafka_oracle
    from tests.support.servers.kafka import fresh_topics, records

    fresh_topics(kafka, [TOPIC])
    legacy = Legacy(tmp_path, "merge", kafka=kafka)
    generate(legacy.user, replace(SMALL, files=5, events=500, malformed_share=0.06))
    _produce(kafka, legacy.user, slice(0, 3))
    plain_jobs.run_plain_kafka(spark, kafka, TOPIC, legacy.checkpoint, legacy.table)
    old_ends = kafka_oracle.batch_ends(legacy.checkpoint, TOPIC)[-1]
    _produce(kafka, legacy.user, slice(3, 5))

    plan = legacy.ok("jobs", "adopt", JOB, "--json")
    assert plan["status"] == "ready", plan
    assert [(s["kind"], s["where"], s["input"]) for s in plan["sources"]] == [("kafka", [TOPIC], "events")]
    assert plan["deadletter"]["kind"] == "kafka" and plan["deadletter"]["offsets"]["events"] == {
        TOPIC: {str(p): o for p, o in old_ends.items()}}
    legacy.ok("jobs", "adopt", JOB, "--confirm")
    legacy.ok("jobs", "run", JOB)

    every = records(kafka, TOPIC)
    batches = kafka_oracle.batches(legacy.checkpoint, TOPIC, every, source="events")
    expected = oracle.user_activity(batches, DELAY_MS)
    got = table_rows(legacy.table, ACTIVITY)
    assert len(got) == len(set(got)) and set(got) == expected
    new = [r for r in every if r[1] >= old_ends.get(r[0], 0)]
    dead_table = legacy.home.deadletter_table(JOB)
    dead = sorted(v for (v,) in table_rows(dead_table, ["raw_bytes"])) if os.path.exists(dead_table) else []
    assert dead == kafka_oracle.rejected("events", new) and dead  # the new records' bad ones only


@pytest.mark.long  # the default run: a plain job adopted and run on (above), the store switch on user_activity (test_store_switch)
def test_an_adopted_job_on_the_default_store_is_switched_to_rocksdb_without_a_replay(spark, tmp_path):
    """The job users already have: a plain job on Spark's default (in-memory) store, adopted, then moved to RocksDB by
    `recover run --mode switch-store`: the state of its latest batch the same rows in RocksDB (Spark's reader), the
    restart reading only the new files, the table equal to the oracle."""
    legacy = _plain(spark, tmp_path, "merge")
    legacy.ok("jobs", "adopt", JOB, "--confirm")
    legacy.ok("jobs", "run", JOB)
    checkpoint = Checkpoint.open(legacy.checkpoint)
    batch = checkpoint.committed_batches()[-1]
    read = {path for path, _ in checkpoint.source_files()[0]}
    before = state_rows(spark, legacy.checkpoint, batch)
    more_input(legacy.user, hour=7, seed=63)
    done = legacy.cli("recover", "run", JOB, "--mode", "switch-store", "--to", "rocksdb", "--confirm", JOB)
    assert done.exit_code == 0, done.output
    switched = Checkpoint.open(legacy.checkpoint)
    assert switched.state_provider(batch) == ROCKSDB_PROVIDER and switched.committed_batches()[-1] > batch
    assert state_rows(spark, legacy.checkpoint, batch) == before and any(before.values())
    new = {path for path, _ in switched.source_files()[0]} - read
    assert len(new) == 2, new  # the two new files, each read once
    expected = oracle.user_activity(oracle.typed_batches(legacy.landing, "events", legacy.checkpoint), DELAY_MS)
    got = table_rows(legacy.table, ACTIVITY)
    assert len(got) == len(set(got)) and set(got) == expected


def test_a_job_stateops_already_runs_is_not_adopted(spark, tmp_path):
    """Nothing to adopt where StateOps ran the checkpoint itself (its output table holds StateOps' transactions of
    the checkpoint's query id): refused in one line, nothing changed."""
    from stateops.jobs.definition.environment import read_settings
    from stateops.jobs.runtime.runner import run_job
    from tests.support.scenarios import builtin

    home = Layout(str(tmp_path / "home"))
    more_input(home, hour=0, seed=91, files=2)
    run_job(spark, builtin(home, "user_activity"), home, settings=read_settings())
    folders = (home.checkpoint("user_activity"), home.table("user_activity"), home.deadletter_table("user_activity"))
    before = [file_hashes(folder) for folder in folders]
    done = CliRunner().invoke(main, ["--home", home.home, "jobs", "adopt", "user_activity", "--confirm"])
    assert done.exit_code == 2, done.output
    assert "already runs under StateOps" in done.output and "Fix: `stateops jobs run` it" in done.output
    assert [file_hashes(folder) for folder in folders] == before
