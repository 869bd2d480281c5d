"""Dead letters collected by the job's own scan (stateops.jobs.runtime.deadletters) and the retirement of the second,
dead-letter query of homes StateOps ran with two queries (stateops.jobs.runtime.retirement).

Oracle: every line of every landing file that tests/support/oracle.py rejects (it does not parse, a field is missing
or invalid, or its time is too far ahead of its file's arrival) is one dead letter, exactly once, whatever the homes'
history; the output equals the batch recomputation of all input; the retired checkpoint is in the archive, byte for
byte, and verifies against its manifest.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import pytest

from stateops import actions
from stateops.control.store import ControlStore
from stateops.jobs.definition.environment import read_settings
from stateops.jobs.demo.generator import generate
from stateops.jobs.runtime.deadletters import ANSWER_BYTES, _rows
from stateops.jobs.runtime.retirement import RECORD
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.sources import collector
from stateops.layout import Layout

from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.legacy_homes import (deadletters, expected_deadletters, output_is_the_oracle,
                                       run_deadletter_query, run_stateful_query)
from tests.support.outcomes import COLUMNS
from tests.support.scenarios import SMALL, builtin, more_input
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark

JOB = "user_activity"


def test_equal_bad_lines_stay_apart_and_a_replayed_input_is_not_judged_again(spark, layout):
    """Three equal bad lines in a file are three dead letters (a map task's repeats are told from them by position);
    the job started over (a new checkpoint and output table, as the refusal of a new checkpoint beside an old
    table says) reads every file again, and no line's dead letter is written twice (the ledger)."""
    spec = builtin(layout, JOB)
    more_input(layout, hour=0, seed=71, files=2)
    landing = layout.landing("events")
    with open(os.path.join(landing, sorted(os.listdir(landing))[0]), "a") as handle:
        handle.write("not json\nnot json\nnot json\n")
    result = run_job(spark, spec, layout, settings=read_settings())
    expected = expected_deadletters(layout)
    assert expected["not json"] == 3 and deadletters(layout) == expected
    assert result.deadletter_rows == sum(expected.values())

    shutil.rmtree(spec.checkpoint_path(layout))
    shutil.rmtree(layout.table(JOB))
    again = run_job(spark, spec, layout, settings=read_settings())
    assert again.batches >= 2 and again.deadletter_rows == 0
    assert deadletters(layout) == expected


def test_a_collector_is_read_in_answers_under_8_kib(spark):
    """A batch's dead letters reach Python in Py4J answers under 8 KiB each (one above it waits 40 ms: jvm/json's
    DeadLetters.drain), counted as Py4J sends them (UTF-8, its escapes), every row once and in order, a row longer
    than a piece alone in its own."""
    found = collector(spark)
    texts = [json.dumps({"input": "events", "raw": line, "raw_bytes": None, "error": "e"}, ensure_ascii=False)
             for line in (["é\\ \"ü\"" * 40 + str(n) for n in range(120)] + ["x" * 20_000] + ["last"])]
    for number, text in enumerate(texts):
        found.add(f"0\t{number}\t{text}")
    pieces = []
    while piece := found.drain(ANSWER_BYTES):
        pieces.append(piece)
    sizes = [len(p.replace("\\", "\\\\").replace("\n", "\\n").encode()) for p in pieces]
    assert len(pieces) > 3 and all(size <= ANSWER_BYTES for piece, size in zip(pieces, sizes) if "\n" in piece)
    assert [line.split("\t", 2)[2] for piece in pieces for line in piece.split("\n")] == texts
    for number, text in enumerate(texts):
        found.add(f"1\t{number}\t{text}")
    rows = _rows(found)
    assert [(r["task_partition"], r["task_number"], r["raw"]) for r in rows] == \
        [(1, n, json.loads(t)["raw"]) for n, t in enumerate(texts)]
    assert found.drain(ANSWER_BYTES) == ""


@pytest.mark.parametrize("lag", ["behind", "ahead"])
def test_an_old_dead_letter_query_is_retired_without_a_line_lost_or_repeated(spark, layout, lag):
    """Both queries read file A; then the old dead-letter query is `behind` (the stateful query alone read file B:
    the retirement judges B by a batch read) or `ahead` (it alone read B, its newest batch written to the table and
    not committed: the job's query reads B and does not write B's dead letters again). Then the job runs as one
    query over C: every bad line of A..C once, the output the oracle's, the old checkpoint archived byte for byte;
    and once more over D, the ledger still holding what the old query judged ahead."""
    spec = builtin(layout, JOB)
    more_input(layout, hour=0, seed=81, files=2)                         # A: both queries
    run_stateful_query(spark, spec, layout)
    run_deadletter_query(spark, spec, layout)
    more_input(layout, hour=2, seed=82, files=1)                         # B: one of them
    if lag == "behind":
        run_stateful_query(spark, spec, layout)
    else:
        run_deadletter_query(spark, spec, layout, uncommit_last=True)
    legacy = layout.deadletter_checkpoint(JOB)
    old_files = file_hashes(legacy)
    more_input(layout, hour=3, seed=83, files=1)                         # C: new

    result = run_job(spark, spec, layout, settings=read_settings())
    assert deadletters(layout) == expected_deadletters(layout)
    output_is_the_oracle(layout, spec)
    assert result.deadletter_rows > 0  # C's bad lines (and B's when ahead: no, B's were written before)
    assert not os.path.exists(legacy)
    record = ControlStore(layout, JOB).read(RECORD)
    b = os.path.basename(oracle.landing_files(layout.landing("events"))[2])
    if lag == "behind":
        assert record["behind"]["files"] == 1 and record["behind_rows_written"] > 0 and record["judged"]["files"] == []
    else:
        assert record["behind"]["files"] == 0 and [os.path.basename(f) for f in record["judged"]["files"]] == [b]
    archive = os.path.join(layout.home, "ops", "_orphans", "archives", record["archive_id"])
    assert file_hashes(os.path.join(archive, "checkpoint")) == old_files
    with open(os.path.join(archive, "manifest.json")) as handle:
        manifest = json.load(handle)
    assert manifest["mode"] == "deadletter-retirement" and manifest["job"] == JOB
    (retired,) = actions.read(layout, JOB, "deadletter_retired")
    assert retired["phase"] == "done" and retired["details"]["behind"] == record["behind"]

    more_input(layout, hour=5, seed=85, files=1)                         # D
    run_job(spark, spec, layout, settings=read_settings())
    assert deadletters(layout) == expected_deadletters(layout)
    output_is_the_oracle(layout, spec)


@pytest.mark.long  # the default run: the retirement on files (above); Kafka's offsets per partition are its difference
@pytest.mark.parametrize("lag", ["behind", "ahead"])
def test_an_old_dead_letter_query_on_kafka_is_retired_by_its_offsets(spark, kafka, tmp_path, lag):
    """As the file test above, on a Kafka topic: what the old query judged behind the stateful query is read again
    by its offsets and judged once; what it judged ahead is held by the newest offset judged per partition."""
    from stateops.jobs.definition.environment import load_jobs
    from tests.support import kafka_oracle, plain_jobs
    from tests.support.servers.kafka import fresh_topics, produce, records

    topic = "retire_events"
    fresh_topics(kafka, [topic])
    scratch = Layout(str(tmp_path / "scratch"))
    generate(scratch, replace(SMALL, files=4, events=400, malformed_share=0.06))
    lines = [[line.encode() for line in batch] for _, batch in oracle.landing_batches(scratch.landing("events"))]
    home = Layout(str(tmp_path / "home"))
    config = tmp_path / "stateops.toml"
    config.write_text(plain_jobs.config("legacy", landing=topic, checkpoint=str(tmp_path / "checkpoint"),
                                        table=str(tmp_path / "table"), kafka=kafka))
    spec = load_jobs(str(config), home)["legacy"]
    produce(kafka, topic, lines[0] + lines[1])                           # A: both queries
    run_stateful_query(spark, spec, home)
    run_deadletter_query(spark, spec, home)
    produce(kafka, topic, lines[2])                                      # B: one of them
    if lag == "behind":
        run_stateful_query(spark, spec, home)
    else:
        run_deadletter_query(spark, spec, home, uncommit_last=True)
    produce(kafka, topic, lines[3])                                      # C: new

    run_job(spark, spec, home, settings=read_settings())
    every = records(kafka, topic)
    dead = sorted(bytes(v) for (v,) in table_rows(home.deadletter_table("legacy"), ["raw_bytes"]))
    assert dead == kafka_oracle.rejected("events", every) and dead
    batches = kafka_oracle.batches(spec.checkpoint_path(home), topic, every, source="events")
    got = table_rows(spec.sink_path(home), COLUMNS["user_activity"])
    assert len(got) == len(set(got)) and set(got) == oracle.user_activity(batches, spec.watermark_seconds * 1000)
    record = ControlStore(home, "legacy").read(RECORD)
    assert bool(record["behind"]["offsets"]) == (lag == "behind")
    assert bool(record["judged"]["offsets"]) == (lag == "ahead")
    assert not os.path.exists(home.deadletter_checkpoint("legacy"))
