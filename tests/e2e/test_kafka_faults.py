"""kill -9 on a Kafka job (marker `faults`, in the default run): `user_activity` reading a real broker
(scripts/kafka), killed once at the fault point after batch 3's Delta commit and before Spark's commits/3,
then `stateops jobs run` SIGKILLed TRIALS times at random points (during startup, inside a batch, between the
Delta commit and Spark's commit; a few in the default run, 20 in the long tier), restarted by the next trial,
then finished; the trials alternate between the two Delta writers (delta-rs from the driver, Delta's own Spark
writer), so a batch one killed is replayed by the other. Afterwards its table holds no duplicate and equals
the oracle over the records each batch read (the checkpoint's `offsets/N`, as the run composed the batches), and
every malformed record is a dead letter: a replayed batch reads the same offset range, so exactly-once holds
without files.
"""
from __future__ import annotations

import os
import random

import pytest
from deltalake import DeltaTable

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.sinkstate import query_app_id
from stateops.layout import Layout
from tests.support import kafka_oracle, oracle
from tests.support.delta_rows import committed_transactions, table_rows
from tests.support.kill_trials import committed, kill_trial, record_counts, run_until_fault, trial_counts
from tests.support.outcomes import COLUMNS
from tests.support.servers.kafka import fresh_topics, produce, records
from tests.support.tiers import trials

# Long tier, like the S3 kill chain (the default run: the random kill chains on files, which alternate the writers).
pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.long]

TRIALS = trials(2)
JOB = "user_activity"
PER_TRIGGER = 60
# About two micro-batches per trial, and at least eight: the fault point is batch 3, the trials may advance a
# batch or two each, and the last run still has batches to read after them.
EVENTS = PER_TRIGGER * max(8, 2 * TRIALS)
INPUT = GeneratorConfig(events=EVENTS, files=12, users=120, late_share=0.03, late_minutes=30, duplicate_share=0.08,
                        malformed_share=0.02, minutes_per_file=10, seed=43)


def test_kill_9_on_a_kafka_job_loses_nothing_and_duplicates_nothing(spark, kafka, tmp_path, monkeypatch,
                                                                    record_property):
    scratch = Layout(str(tmp_path / "input"))
    generate(scratch, INPUT)
    layout = Layout(str(tmp_path / "stateops"))
    fresh_topics(kafka, ["events"])
    produce(kafka, "events", [line.encode() for _, lines in oracle.landing_batches(scratch.landing("events"))
                              for line in lines])
    config = tmp_path / "kafka.toml"
    config.write_text(f'[jobs.{JOB}]\nsource = "kafka"\nkafka_bootstrap_servers = "{kafka}"\n'
                      f'kafka_options = {{ maxOffsetsPerTrigger = "{PER_TRIGGER}" }}\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))  # the killed runs (subprocesses) read it too
    # First the kill that matters most, where it matters: after batch 3's Delta commit, before commits/3.
    run_until_fault(JOB, layout.home, f"sink.after_commit:table={JOB},batch=3")
    checkpoint = layout.checkpoint(JOB)
    assert os.path.exists(f"{checkpoint}/offsets/3") and not os.path.exists(f"{checkpoint}/commits/3")
    app_id = query_app_id(JOB, checkpoint)
    assert DeltaTable(layout.table(JOB)).transaction_version(app_id) == 3, "batch 3 is in Delta"
    rng = random.Random(7)
    # Every other trial writes with Delta's Spark writer: a batch killed on one writer is replayed on the other.
    writers = [("delta-rs", "spark")[i % 2] for i in range(TRIALS)]
    done = [kill_trial(layout, JOB, rng, {"STATEOPS_DELTA_WRITER": w}) for w in writers]
    replayed = [t for t in committed_transactions(layout.table(JOB)) if t[0] == app_id]
    assert len({b for _, b, _ in replayed}) == len(replayed), "a batch was committed twice"
    spec = load_jobs(str(config), layout)[JOB]
    result = run_job(spark, spec, layout, settings=read_settings())  # the last restart finishes the topic
    every = records(kafka, "events")
    expected = oracle.user_activity(kafka_oracle.batches(spec.checkpoint_path(layout), "events", every),
                                    spec.watermark_seconds * 1000)
    got = table_rows(layout.table(JOB), COLUMNS[JOB])
    dead = table_rows(layout.deadletter_table(JOB), ["raw_bytes"])
    counts = {**trial_counts(done), "trials_on_the_spark_writer": writers.count("spark"),
              "batches": committed(layout.checkpoint(JOB)), "rows": len(got), "expected_rows": len(expected),
              "duplicates": len(got) - len(set(got)), "lost": len(expected - set(got)),
              "invented": len(set(got) - expected), "dead_letters": len(dead),
              "malformed_records": len(kafka_oracle.rejected("events", every)),
              "skipped_on_last_restart": result.batches_skipped}
    counts["duplicates"] += counts.pop("duplicates_after_a_trial")
    record_counts(record_property, f"kill -9 {JOB} on Kafka", counts)
    assert counts["duplicates"] == 0 and counts["lost"] == 0 and counts["invented"] == 0, counts
    assert sorted(bytes(b) for b, in dead) == kafka_oracle.rejected("events", every), counts
    assert counts["batches"] >= EVENTS // PER_TRIGGER and len(expected) > 100, counts
    assert os.path.isdir(layout.checkpoint(JOB))
