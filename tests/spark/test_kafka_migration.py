"""A Kafka job's query changed after the topic's retention dropped what it read: a rebuild is refused (it would
replay records Kafka no longer holds), `recover --mode migrate` keeps the state with no record read again, and the
runs after it give what the new query gives from scratch.

The migration tests' user job (tests/support/migration_job.py) reads the topic `events` (the generator's lines,
KAFKA_PER_TRIGGER records a batch) with `hi_lo`; the same topic is read from scratch by a second job with the new
query (`lo_hi`: two same-typed aggregates reordered, exact), before the records are deleted (the admin API's
delete_records, as retention does). Oracle: that second job's table, row for row, after both read the records
produced after the migration. Its own module: it deletes records of its topics.
"""
from __future__ import annotations

import json
import os
from dataclasses import fields, replace

import pytest
from click.testing import CliRunner

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.cli.main import main
from stateops.layout import Layout
from tests.support import kafka_oracle
from tests.support.delta_rows import table_rows
from tests.support.migration_job import FRESH, JOB, config, write_code
from tests.support.scenarios import KAFKA_INPUT

pytestmark = [pytest.mark.spark, pytest.mark.long]  # the default run: the migration on files (test_migration)

# Records produced after the migration: their first 10-minute file ten minutes before the topic's last event (the
# windows still open in the state get rows), the second after it.
MORE = replace(KAFKA_INPUT, files=2, events=300, seed=5, late_share=0.0, future_share=0.0, malformed_share=0.0,
               start="2026-01-01T01:10:00+00:00", minutes_per_file=10)
COLUMNS = ["window_start", "window_end", "group_key", "events", "hi", "lo"]


def _cli(layout: Layout, config_path: str, *args: str):
    return CliRunner().invoke(main, ["--home", layout.home, "--config", config_path, *args])


def _produce(broker: str, scratch) -> None:
    knobs = [f"--{f.name.replace('_', '-')}={getattr(MORE, f.name)}" for f in fields(MORE)]
    done = CliRunner().invoke(main, ["--home", str(scratch), "generate", *knobs, "--kafka", broker])
    assert done.exit_code == 0 and "records to topic events" in done.output, done.output


def _delete_read_records(broker: str, checkpoint: str) -> dict[int, int]:
    """Every record the checkpoint's batches read, deleted as retention would; {partition: new log start}."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    cut = kafka_oracle.batch_ends(checkpoint, "events")[-1]
    admin = AdminClient({"bootstrap.servers": broker})  # kept: a collected client never completes its futures
    for future in admin.delete_records([TopicPartition("events", p, o) for p, o in cut.items()]).values():
        future.result(30)
    return cut


def test_a_kafka_job_is_migrated_after_retention_dropped_the_input_a_rebuild_would_replay(
        spark, kafka_topics, tmp_path, importable):
    broker = kafka_topics
    layout = Layout(str(tmp_path / "stateops"))
    importable(write_code(str(tmp_path / "user-code")))
    old = config(tmp_path, kafka=broker, **{JOB: "hi_lo"})
    changed = config(tmp_path, kafka=broker, **{JOB: "lo_hi", FRESH: "lo_hi"})
    first = _cli(layout, old, "jobs", "run", JOB)
    assert first.exit_code == 0, first.output
    fresh = _cli(layout, changed, "jobs", "run", FRESH)
    assert fresh.exit_code == 0, fresh.output
    checkpoint = os.path.join(layout.home, "checkpoints", JOB)
    offsets = Checkpoint.open(checkpoint).offset_batches()
    assert len(offsets) >= 3, "maxOffsetsPerTrigger splits the topic into several batches"

    cut = _delete_read_records(broker, checkpoint)
    rebuild = _cli(layout, changed, "recover", "plan", JOB, "--mode", "rebuild")
    assert rebuild.exit_code == 2 and "cannot rebuild" in rebuild.output, rebuild.output
    for p, start in cut.items():
        if start:
            assert f"events/{p}: offsets 0..{start - 1} (the log now starts at {start})" in rebuild.output

    planned = _cli(layout, changed, "recover", "plan", JOB, "--mode", "migrate", "--json")
    assert planned.exit_code == 0, planned.output
    (change,) = json.loads(planned.output)["migration"]["changes"]
    assert (change["change"], change["carried"]) == ("reorder", "exact"), change
    done = _cli(layout, changed, "recover", "run", JOB, "--mode", "migrate", "--confirm", JOB)
    assert done.exit_code == 0 and "succeeded" in done.output, done.output
    assert Checkpoint.open(checkpoint).offset_batches() == offsets, "no batch planned, no record read"

    _produce(broker, tmp_path / "more")
    for job in (JOB, FRESH):
        run = _cli(layout, changed, "jobs", "run", job)
        assert run.exit_code == 0, run.output
    assert len(Checkpoint.open(checkpoint).offset_batches()) > len(offsets), "the job read the records produced after"
    migrated, expected = set(table_rows(layout.table(JOB), COLUMNS)), set(table_rows(layout.table(FRESH), COLUMNS))
    assert migrated == expected, (sorted(migrated - expected)[:3], sorted(expected - migrated)[:3])
    straddling = [r for r in expected if _ms("01:10") <= r[0] < _ms("01:20")]
    assert straddling, "windows opened before the migration and continued after it are in the table"


def _ms(clock: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(f"2026-01-01T{clock}:00+00:00").timestamp() * 1000)
