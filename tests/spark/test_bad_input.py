"""Bad input never silences a job (poison timestamps per job: tests/spark/test_jobs_oracle.py).

The future-time rule decides a row at the exact boundary once, alike for the stateful and the dead-letter
query. A progress table that cannot be written is counted and logged, and the job's output stays right.
"""
from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta, timezone

import time

import pytest
from deltalake import DeltaTable

from stateops.jobs.definition.environment import Environment, load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.retention import retention_scope
from stateops.jobs.runtime.runner import run_job
from stateops import retention
from stateops.layout import Layout
from tests.support import oracle
from tests.support.delta_rows import table_rows

pytestmark = pytest.mark.spark

SMALL = GeneratorConfig(events=600, files=3, users=40, malformed_share=0.02)


def test_the_boundary_row_lands_in_exactly_one_query(spark, tmp_path):
    """Arrival = the file's modification time, the same for both queries: a row exactly at the tolerance
    is kept by the stateful query, one millisecond beyond it is a dead letter, and nothing is lost."""
    layout = Layout(str(tmp_path / "stateops"))
    landing = tmp_path / "stateops" / "landing" / "events"
    landing.mkdir(parents=True)
    arrival = datetime(2026, 3, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
    at_limit, beyond = arrival + timedelta(days=1), arrival + timedelta(days=1, milliseconds=1)
    rows = [("e-normal", arrival - timedelta(hours=1)), ("e-limit", at_limit), ("e-beyond", beyond)]
    path = landing / "part-0000.json"
    path.write_text("".join(json.dumps({"event_id": i, "user_id": i, "event_time": t.isoformat(), "action": "view",
                                        "value": 1.0}) + "\n" for i, t in rows))
    nanos = round(arrival.timestamp() * 1000) * 1_000_000
    os.utime(path, ns=(nanos, nanos))
    run_job(spark, load_jobs()["user_activity"], layout, settings=read_settings())
    kept = {user for _, _, user in table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id"])}
    dead = table_rows(layout.deadletter_table("user_activity"), ["raw", "error"])
    assert kept == {"e-normal", "e-limit"}
    assert [json.loads(raw)["event_id"] for raw, _ in dead] == ["e-beyond"]
    assert "2026-03-02 12:00:00.124" in dead[0][1] and "2026-03-01 12:00:00.123" in dead[0][1]


INVALID_UTF8 = [  # each a dead letter: not JSON, or JSON with a field that is not valid UTF-8 text
    b"\xff\xfe not json at all \xc3\x28",
    b'{"event_id": "e-\xed\xa0\x80", "user_id": "u-1", "event_time": "2026-03-01T11:00:00Z", "action": "v\xc0\xaf", '
    b'"value": "x\xf8"}',
    b"\xe2\x82",
]


def test_invalid_utf8_dead_letters_stay_readable_keep_their_bytes_and_expire(spark, tmp_path):
    """Issue 20 item 1: one line of invalid UTF-8 made the whole dead-letter table unreadable (Arrow refuses a
    string column that is not UTF-8) and its retention failed. Each dead letter now holds valid text (`raw`,
    U+FFFD for each bad sequence) and the line's exact bytes (`raw_bytes`); every Arrow reader opens the table,
    and the dead-letter retention drops the rows."""
    layout = Layout(str(tmp_path / "stateops"))
    landing = tmp_path / "stateops" / "landing" / "events"
    landing.mkdir(parents=True)
    good = json.dumps({"event_id": "e-ok", "user_id": "u-1", "event_time": "2026-03-01T11:00:00Z",
                       "action": "view", "value": 1.0}).encode()
    (landing / "part-0000.json").write_bytes(b"\n".join([good, *INVALID_UTF8]) + b"\n")
    result = run_job(spark, load_jobs()["user_activity"], layout, settings=read_settings())
    assert result.output_rows == 1 and result.deadletter_rows == len(INVALID_UTF8)

    uri = layout.deadletter_table("user_activity")
    frame = DeltaTable(uri).to_pandas()  # raised "not UTF-8" for the whole table before
    assert sorted(frame["raw_bytes"]) == sorted(INVALID_UTF8)
    for raw, original in zip(frame["raw"], frame["raw_bytes"]):
        assert isinstance(raw, str) and "\ufffd" in raw
        # Only the invalid sequences changed: every valid character of the line is there, in order.
        assert raw.replace("\ufffd", "") == original.decode("utf-8", "ignore")
    assert spark.read.parquet(*DeltaTable(uri).file_uris()).count() == len(INVALID_UTF8)

    config = tmp_path / "stateops.toml"
    config.write_text('[retention]\ndeadletter_keep = "1 seconds"\n')
    time.sleep(1.5)
    scope = retention_scope(Environment.from_env(layout=layout, config_path=str(config)))
    plan = retention.make_plan(scope)
    drops = [i for i in plan.items if i.rule == "deadletter_retention"]
    assert [i.details["rows"] for i in drops] == [len(INVALID_UTF8)]
    report = retention.apply(scope, plan, actor="test")
    assert report.ok, report.render()
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 0


def _event(n: int, **changed) -> bytes:
    fields = {"event_id": f"e{n}", "user_id": f"u{n}", "event_time": "2026-03-01T11:00:00Z", "action": "view",
              "value": 1.0, **changed}
    return json.dumps(fields).encode()


# (line, the events the stateful query keeps from it, the dead letters it makes): the lines Spark's JSON source and
# `from_json` (a parse over the line's characters) judge apart, and the plain cases beside them.
CORPUS = [
    (_event(1), {"u1"}, 0),
    (b"", set(), 1),
    (b" \t ", set(), 1),
    (b"null", set(), 1),
    (b"12", set(), 1),
    (b"[" + _event(2) + b", " + _event(3) + b"]", {"u2", "u3"}, 0),           # each element a row
    (b" [" + _event(4) + b', {"event_id": "x"}]', {"u4"}, 1),                # the bad element a dead letter
    (b"[" + _event(5) + b", " + _event(6, value="abc") + b"]", {"u5"}, 1),  # a bad field: that element
    (b"[]", set(), 1),
    (b"[null, " + _event(7) + b"]", set(), 1),
    (b"[1, " + _event(8) + b"]", set(), 1),
    (b"[[" + _event(9) + b"]]", set(), 1),
    (b"\xef\xbb\xbf" + _event(10), {"u10"}, 0),                              # a byte-order mark: skipped
    (_event(11, action="v\udcff").replace(b'\\udcff', b"\xff"), set(), 1),  # invalid UTF-8 in a field
    (_event(12).replace(b"}", b', "x": "\xc3("}'), set(), 1),                # ... in a field not read
    (_event(13, action="a\ud800x").replace(b"\\ud800", b"\xed\xa0\x80"), set(), 1),  # an encoded surrogate
    (_event(14, action="a/").replace(b"/", b"\xc0\xaf"), {"u14"}, 0),        # overlong '/': Jackson decodes it
    (_event(15) + b" trailing", {"u15"}, 0),
    (_event(16, value="abc"), set(), 1),
    (_event(17).replace(b"}", b', "x": }'), set(), 1),
    (_event(18, action="a\tb").replace(b"\\t", b"\t"), set(), 1),            # a raw control character
    (b"\xef\xbb\xbf [" + _event(19) + b"]", {"u19"}, 0),                      # an array after a byte-order mark
]


def test_the_line_parser_reads_each_line_as_the_json_source_reads_it(spark, tmp_path):
    """The oracle is Spark's JSON source itself: each corpus line, in a file of its own, read by it and by
    `parse_rows` over the line as text gives the same rows (as a multiset), where `from_json` differs on some."""
    from pyspark.sql import functions as F

    from stateops.lineparse import json_source, parse_rows

    schema = load_jobs()["user_activity"].inputs[0].schema
    differs_from_from_json = 0
    for n, (line, _, _) in enumerate(CORPUS):
        path = tmp_path / f"line-{n}.json"
        path.write_bytes(line + b"\n")
        source = json_source(spark.read, schema).json(str(path))
        parsed = spark.read.text(str(path)).select(F.explode(parse_rows(spark, F.col("value"), schema)).alias("r"))
        expected = sorted(map(tuple, source.collect()), key=repr)
        assert sorted(map(tuple, parsed.select("r.*").collect()), key=repr) == expected, line
        by_from_json = spark.read.text(str(path)).select(F.from_json("value", schema).alias("r")).select("r.*")
        differs_from_from_json += sorted(map(tuple, by_from_json.collect()), key=repr) != expected
    assert differs_from_from_json >= 5  # arrays, a byte-order mark, invalid UTF-8: the corpus holds what it claims


def test_every_line_is_kept_or_a_dead_letter_as_the_json_source_reads_it(spark, tmp_path):
    """The query reads each line once as text (it keeps each bad line's bytes) and parses it with the JSON source's
    own parser over its bytes (stateops.lineparse): every event of the corpus is kept once or its line is a dead
    letter, never both, never neither; a line of an array with a bad element is a dead letter for that element."""
    layout = Layout(str(tmp_path / "stateops"))
    landing = tmp_path / "stateops" / "landing" / "events"
    landing.mkdir(parents=True)
    (landing / "part-0000.json").write_bytes(b"\n".join(line for line, _, _ in CORPUS) + b"\n")
    result = run_job(spark, load_jobs()["user_activity"], layout, settings=read_settings())

    kept = table_rows(layout.table("user_activity"), ["user_id", "events"])
    assert sorted(kept) == sorted((user, 1) for _, users, _ in CORPUS for user in users)
    dead = table_rows(layout.deadletter_table("user_activity"), ["raw_bytes", "error"])
    assert sorted(raw for raw, _ in dead) == sorted(line for line, _, n in CORPUS for _ in range(n))
    assert result.deadletter_rows == sum(n for _, _, n in CORPUS)
    errors = {raw: error for raw, error in dead}
    assert errors[b"[]"].startswith("no event")
    assert errors[CORPUS[13][0]].startswith("not valid UTF-8 text")


def test_a_failed_progress_append_is_counted_and_the_output_stays_right(spark, tmp_path, caplog):
    layout = Layout(str(tmp_path / "stateops"))
    generate(layout, SMALL)
    progress = tmp_path / "stateops" / "ops" / "tables" / "progress"
    progress.parent.mkdir(parents=True)
    progress.write_text("a file where the progress table should be\n")
    spec = load_jobs()["user_activity"]
    with caplog.at_level(logging.WARNING, logger="stateops.jobs.runtime.runner"):
        result = run_job(spark, spec, layout, settings=read_settings())
    # The query reports at least one progress event per file, and not one could be recorded.
    assert result.progress_write_failures >= SMALL.files
    warnings = [r for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(warnings) == result.progress_write_failures
    assert str(progress) in warnings[0].getMessage()
    got = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events", "value_sum"])
    events = oracle.typed_batches(layout.landing("events"), "events")
    assert set(got) == oracle.user_activity(events, spec.watermark_seconds * 1000)
    assert result.batches == SMALL.files


def test_the_query_runs_in_its_scheduler_pool(spark, tmp_path, monkeypatch):
    """The query's batches, their output and their dead letters, run in the fair-scheduler pool `stateful`
    (offered a free core before the session's other work); the caller's thread keeps its own pool."""
    from stateops.jobs.runtime import runner
    from stateops.jobs.runtime.deadletters import DeadLetterWriter
    from stateops.jobs.runtime.sink import DeltaSink

    context = spark.sparkContext
    assert context._jsc.sc().getSchedulingMode().toString() == "FAIR"
    assert context._jsc.sc().getPoolForName("stateful").get().minShare() >= 1000
    pools: dict[str, set] = {}

    def recording(write):  # the pool Spark schedules this batch's jobs in, then the real write
        def call(self, df, batch_id):
            pools.setdefault(os.path.basename(self.table_uri), set()).add(
                context.getLocalProperty("spark.scheduler.pool"))
            write(self, df, batch_id)
        return call

    monkeypatch.setattr(runner.DeltaSink, "__call__", recording(DeltaSink.__call__))
    monkeypatch.setattr(runner.DeadLetterWriter, "__call__", recording(DeadLetterWriter.__call__))
    layout = Layout(str(tmp_path / "stateops"))
    generate(layout, SMALL)
    result = run_job(spark, load_jobs()["user_activity"], layout, settings=read_settings())
    assert pools == {"user_activity": {"stateful"}, "user_activity_deadletter": {"stateful"}}
    assert result.output_rows > 0 and result.deadletter_rows > 0
    assert context.getLocalProperty("spark.scheduler.pool") is None
