"""Every line read as Spark's JSON reader reads it: StateOps' line parser (jvm/json LineParser, stateops.lineparse)
against Spark's JSON file source over the same bytes, with the same schema, on generated hostile lines (hypothesis,
tests/support/json_lines.py), for every job's schema, from files and from Kafka.

The oracle is Spark's JSON source itself, reading the same file (a Kafka value: the same bytes as a file's line).
One small file is one partition, whose rows Spark returns in line order: the rows StateOps' query reads must be the
same sequence, field by field (floats by their bits, -0.0 and NaN included), and each row judged as docs/jobs.md says
(a dead letter with its reason, or valid), by a second, independent reading of the rule here. Spark's reader
reads a line with a key of invalid UTF-8 by the lines before it in its file (Jackson's field-name cache); StateOps
reads every line as Spark reads it alone, and where the file's reading differs, the line is read alone as well.

Issue 69: a number in a string column (`"user_id": 4242`) read from a file became a slice of another field's text,
silently; the parser handed Jackson the line at an offset inside a larger buffer, and Spark copies a non-string
value's text out of that buffer by Jackson's offset, which counts from where Jackson started.
"""
from __future__ import annotations

import dataclasses
import math
import os
import uuid
from datetime import datetime, timezone

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.definition.schema_ddl import parse_schema
from stateops.jobs.runtime import sources
from stateops.jobs.runtime.runner import run_job
from stateops.layout import Layout
from stateops.lineparse import json_source
from tests.support import json_lines, oracle, readings_job
from tests.support.delta_rows import table_rows
from tests.support.tiers import FULL
from tests.support.schema_forms import READ

pytestmark = pytest.mark.spark

ISSUE_LINES = (
    b'{"event_id": "e1", "user_id": 4242, "event_time": "2026-01-01T00:10:05Z", "action": "click", "value": 1.5}\n'
    b'{"event_id": "e2", "user_id": "u1", "event_time": "2026-01-01T00:10:06Z", "action": "click", "value": 2.5}\n'
    b'[{"event_id": "e3", "user_id": "x-array", "event_time": "2026-01-01T00:10:07Z", "action": "v", "value": 1.0}]\n'
)
ARRIVAL = datetime(2026, 3, 1, tzinfo=timezone.utc)  # the files' modification time: 2099 is a poison time


def _as_text(column, names: list[str]):
    """A row's fields each as Spark writes it as text (`cast(... as string)`), compared so: exact for every type
    (floats as Java prints them, -0.0 and NaN included; timestamps to the microsecond, beyond Python's year 9999;
    nested values whole), a null field null, a null row null."""
    fields = F.struct(*[column.getField(n).cast("string").alias(n) for n in names])
    return F.when(column.isNull(), F.lit(None)).otherwise(fields)


def _expected_error(row, row_us: int | None, arrival_us: int, inp, spec) -> str | None:
    """The reason docs/jobs.md gives for a row (None: a valid row), read from the row as Spark's reader read it."""
    if row is None:
        return sources.NO_ROW
    columns = list(inp.columns())
    nulls = [c for c in columns if row[c] is None]
    if len(nulls) == len(columns):
        return "not a JSON object with any expected field"
    if nulls:
        return "missing or invalid field(s): " + ", ".join(nulls)
    if row_us > arrival_us + spec.future_tolerance_seconds * 1_000_000:
        return "future"
    return None


def _judged(raw, inp, spec, order: str | None = None) -> list[Row]:
    """StateOps' reading of `raw` (lines as sources.raw_lines gives them), each row with its line's place: the column
    `order`, or the line's place in the file's one partition."""
    place = F.col(order) if order else F.monotonically_increasing_id()
    checked = sources.checked_rows(raw.withColumn("line_no", place), inp, spec)
    names = list(inp.columns())
    rows = checked.select("line_no", "raw", _as_text(F.col("row"), names).alias("row"), "error", F.unix_micros(f"row.{inp.time_column}").alias("row_us"),
                          F.unix_micros("arrival_time").alias("arrival_us")).collect()
    return sorted(rows, key=lambda r: r.line_no)  # stable: a line's rows keep their order


def _spark_rows(spark, tmp_path, lines: list[bytes], inp, file_start: bool) -> list[Row]:
    """The rows Spark's JSON source reads from `lines` as one file, in order (as text: `_as_text`). A file's first
    line loses a byte-order mark to Hadoop's line reader: unless these lines start the file StateOps read
    (`file_start`), a blank line goes first."""
    path = _file(tmp_path, (b"" if file_start else b"\n") + b"".join(text + b"\n" for text in lines))
    read = json_source(spark.read, inp.schema).json(path)
    return [r.row for r in read.select(_as_text(F.struct("*"), read.columns).alias("row")).collect()]


def _assert_read_as_spark_reads(spark, tmp_path, lines: list[bytes], judged: list[Row], inp, spec,
                                file_start: bool) -> dict:
    """`judged` (StateOps' rows of `lines`, each with its line's place) against the rows Spark's JSON source reads
    from the same lines, line by line, field by field, each row judged by the rule; returns what was compared.

    Spark's reader reads the lines of one file with one Jackson factory, whose field-name cache makes a line with a
    key of invalid UTF-8 parse or not by the lines before it (docs/spark-behaviour.md); StateOps reads every line as
    Spark reads it alone. Where the file's reading differs from StateOps', that line and the one before it (whose
    rows may have run on) are read alone, each a file of its own, StateOps' rows must equal those, and the file's
    reading starts again after them."""
    place = {line_no: at for at, line_no in enumerate(sorted({r.line_no for r in judged}))}  # the line's index
    assert len(place) == len(lines), f"{len(place)} lines read, {len(lines)} in the input"
    ours: list[list[Row]] = [[] for _ in lines]
    for row in judged:
        if row.row is not None:
            ours[place[row.line_no]].append(row.row)
    expected, at, alone, line = _spark_rows(spark, tmp_path, lines, inp, file_start), 0, 0, 0
    while line < len(lines):
        if expected[at:at + len(ours[line])] == ours[line]:
            at, line = at + len(ours[line]), line + 1
            continue
        for checked in (line - 1, line) if line else (line,):
            want = _spark_rows(spark, tmp_path, [lines[checked]], inp, file_start and checked == 0)
            if want != ours[checked]:
                raise AssertionError(f"line {checked} ({lines[checked]!r}): read as {ours[checked]}, Spark's JSON "
                                     f"reader reads {want} from it alone")
            alone += 1
        line += 1
        expected, at = (_spark_rows(spark, tmp_path, lines[line:], inp, False) if line < len(lines) else []), 0
    assert at == len(expected), f"Spark's JSON reader reads {len(expected) - at} rows more"
    for got in judged:
        want = _expected_error(got.row, got.row_us, got.arrival_us, inp, spec)
        error = got.error if got.error is None or "future_tolerance" not in got.error else "future"
        assert error == want, f"line {got.line_no} ({got.raw!r}): judged {got.error!r}, the rule says {want!r}"
    return {"rows": sum(map(len, ours)), "read_alone": alone}


def _file(tmp_path, data: bytes) -> str:
    path = str(tmp_path / f"lines-{uuid.uuid4().hex}.json")
    with open(path, "wb") as handle:
        handle.write(data)
    stamp = int(ARRIVAL.timestamp() * 1e9)
    os.utime(path, ns=(stamp, stamp))
    return path


def _check_file(spark, tmp_path, data: bytes, inp, spec) -> list[Row]:
    path = _file(tmp_path, data)
    judged = _judged(sources.file_lines(spark, [path]), inp, spec)
    _assert_read_as_spark_reads(spark, tmp_path, json_lines.hadoop_lines(data), judged, inp, spec, file_start=True)
    return judged


def test_a_number_in_a_string_column_reads_as_spark_reads_it(spark, tmp_path, input_schemas):
    """The issue's three lines: `user_id` 4242, u1 and x-array, as Spark's JSON reader reads them; the first line
    read `t_id` (another field's text) before the fix."""
    spec, inp = input_schemas["events"]
    judged = _check_file(spark, tmp_path, ISSUE_LINES, inp, spec)
    assert [(r.row.event_id, r.row.user_id, r.error) for r in judged] == [
        ("e1", "4242", None), ("e2", "u1", None), ("e3", "x-array", None)]


def test_a_key_of_invalid_utf8_reads_as_spark_reads_the_line_alone(spark, tmp_path, input_schemas):
    """Spark's JSON source reads `{"\\xffx y": ...}` as refused (not UTF-8) alone, and as parsed, the key read as
    `x y`, after a line that cached the name `x y` in the same file (Jackson's field-name cache: found by the full
    tier on generated lines). StateOps reads it as Spark reads it alone, whatever came before it."""
    spec, inp = input_schemas["events"]
    trigger, target = b'{"x y": 1}', b'{"\xffx y": true, "event_time": "2026-01-01T00:10:05Z", "user_id": "u"}'
    assert [r.event_time for r in _spark_rows(spark, tmp_path, [trigger, target], inp, True)] == [
        None, "2026-01-01 00:10:05"]  # the premise: Spark's own reading depends on the line before
    alone = _spark_rows(spark, tmp_path, [target], inp, True)
    assert [r.event_time for r in alone] == [None]
    judged = _judged(sources.file_lines(spark, [_file(tmp_path, trigger + b"\n" + target + b"\n")]), inp, spec)
    assert [r.row for r in judged][1:] == alone and judged[1].error == "not a JSON object with any expected field"


# Seeded files of generated lines (tests/support/json_lines.py): the same in every run, more of them in the long
# tier; a failure names the seed, the line and the fields.
FILES, LINES = (24, 2000) if FULL else (3, 700)


def _count(judged: list[Row], seen: dict) -> None:
    seen["lines"] += len({r.line_no for r in judged})
    seen["rows"] += sum(r.row is not None for r in judged)
    seen["valid"] += sum(r.error is None for r in judged)


def _powerful(seen: dict) -> bool:
    """The generator's power, measured: many lines, and both kept rows and dead letters among them."""
    return seen["lines"] >= 2000 and 0.1 * seen["rows"] < seen["valid"] < 0.9 * seen["rows"]


@pytest.mark.parametrize("schema", ["events", "orders", "payments", "readings"])
def test_every_generated_file_line_reads_as_spark_reads_it(spark, tmp_path, input_schemas, schema):
    """Files of generated lines (every value of every JSON type in every column, lines of every length, ended by LF,
    CRLF or CR, at every offset of the file): StateOps' rows equal Spark's JSON source's, field by field, and each
    is judged by the rule."""
    spec, inp = input_schemas[schema]
    seen = {"rows": 0, "lines": 0, "valid": 0}
    for seed in range(FILES):
        data = json_lines.Lines(inp.columns(), seed).file(LINES)
        try:
            _count(_check_file(spark, tmp_path, data, inp, spec), seen)
        except AssertionError as failed:
            raise AssertionError(f"{schema}, seed {seed}: {failed}") from None
    assert _powerful(seen), seen


@pytest.mark.parametrize("terminator", [b"\n", b"\r\n", b"\r"])
def test_lines_ending_at_the_line_readers_buffer_boundaries(spark, tmp_path, input_schemas, terminator):
    """Lines whose line break starts from 3 bytes before to 2 bytes after a multiple of the line reader's buffer
    (Hadoop's 4 KiB and 64 KiB: a CRLF's halves on either side of one among them), each followed by a line with a
    number in a string column."""
    spec, inp = input_schemas["events"]
    probe = b'{"event_id": 1, "user_id": 4242, "event_time": "2026-01-01T00:10:05Z", "action": true, "value": 1}'
    head = b'{"event_id": "e", "user_id": "u", "event_time": "2026-01-01T00:10:05Z", "action": "'
    tail = b'", "value": 1.5}'
    breaks = [4096 * (1 + i) + d for i, d in enumerate(range(-3, 3))] + [
        65536 * (2 + i) + d for i, d in enumerate(range(-3, 3))]
    data = b""
    for at in breaks:  # the padded line's break starts at `at`
        data += head + b"x" * (at - len(data) - len(head) - len(tail)) + tail
        assert len(data) == at
        data += terminator + probe + terminator
    judged = _check_file(spark, tmp_path, data, inp, spec)
    probes = [r.row for r in judged if r.row.action == "true"]
    assert len(probes) == len(breaks) and {(p.event_id, p.user_id) for p in probes} == {("1", "4242")}


KAFKA_FILES = 8 if FULL else 1


@pytest.mark.parametrize("schema", ["events", "orders", "payments", "readings"])
def test_every_generated_kafka_value_reads_as_spark_reads_it(spark, kafka, tmp_path, input_schemas, schema):
    """The same generated lines as Kafka values (each its own record, of a topic of one partition): StateOps' rows
    equal what Spark's JSON source reads from the same bytes as a file's lines, and each is judged by the rule
    (arrival: the broker's time)."""
    from stateops.jobs.demo.kafka_input import create_topics, produce

    spec, inp = input_schemas[schema]
    spec = dataclasses.replace(spec, source="kafka", kafka_bootstrap_servers=kafka)
    seen = {"rows": 0, "lines": 0, "valid": 0}
    for seed in range(KAFKA_FILES):
        values = json_lines.hadoop_lines(json_lines.Lines(inp.columns(), 1000 + seed).file(LINES * 3))
        topic = f"lines-{uuid.uuid4().hex[:12]}"
        create_topics(kafka, [topic], partitions=1)
        produce(kafka, topic, values)
        topic_input = dataclasses.replace(inp, path=topic)
        judged = _judged(sources.kafka_lines(spark, spec, topic_input, {0: -2}, {0: len(values)}), topic_input,
                         spec, "kafka_offset")
        try:
            _assert_read_as_spark_reads(spark, tmp_path, values, judged, topic_input, spec, file_start=False)
        except AssertionError as failed:
            raise AssertionError(f"{schema} on Kafka, seed {1000 + seed}: {failed}") from None
        _count(judged, seen)
    assert _powerful(seen), seen


@pytest.mark.parametrize("ddl", [ddl for ddl, _ in READ] + [readings_job.READINGS])
def test_a_schema_reads_as_sparks_own_ddl_parser_reads_it(spark, ddl):
    """What the config's schema reader (stateops.jobs.definition.schema_ddl, no JVM) reads from every form it accepts
    is what the query's parser gets from Spark's own DDL parser (StructType.fromDDL): each column's name and type."""
    parsed = spark._jvm.org.apache.spark.sql.types.StructType.fromDDL(ddl)
    assert {f.name(): f.dataType().simpleString() for f in parsed.fields()} == parse_schema(ddl, "schema")


EVENT_COLUMNS = ["event_id", "user_id", "event_time", "action", "value"]


def _read_line_by_line(spark, tmp_path, lines: list[bytes], schema: str) -> list[list[Row]]:
    """The rows Spark's JSON source reads from each line (its columns; the time as `us`, epoch microseconds), each
    line read as a file of its own (after a blank line: a file's first line loses a byte-order mark), all in one
    read."""
    folder = tmp_path / f"line-by-line-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for at, text in enumerate(lines):
        (folder / f"{at:05d}.json").write_bytes(b"\n" + text + b"\n")
    read = json_source(spark.read, schema).json(str(folder)).select(
        "event_id", "user_id", F.unix_micros("event_time").alias("us"), "action", "value",
        F.col("_metadata.file_name").alias("file"))
    per_line: list[list[Row]] = [[] for _ in lines]
    for row in read.collect():
        per_line[int(row.file.split(".")[0])].append(row)
    return per_line


def _expected(per_line: list[list[Row]], lines: list[bytes], arrivals_us: list[int], spec):
    """What each table must hold by Spark's reading of each line and the rule of docs/jobs.md: the events kept (as
    the oracle's rows) and the dead letters (line bytes, reason's start), one per rejected row, one per line with no
    row."""
    kept, dead = [], []
    limit_us = spec.future_tolerance_seconds * 1_000_000
    for text, rows, arrival_us in zip(lines, per_line, arrivals_us):
        try:
            text.decode("utf-8")
            prefix = ""
        except UnicodeDecodeError:
            prefix = "not valid UTF-8 text; "
        if not rows:
            dead.append((text, prefix + "no event"))
        for row in rows:
            nulls = [c for c in EVENT_COLUMNS if row[c if c != "event_time" else "us"] is None]
            if len(nulls) == len(EVENT_COLUMNS):
                dead.append((text, prefix + "not a JSON object with any expected field"))
            elif nulls:
                dead.append((text, prefix + "missing or invalid field(s): " + ", ".join(nulls)))
            elif row.us > arrival_us + limit_us:
                dead.append((text, prefix + "event_time "))
            else:
                kept.append({"event_id": row.event_id, "user_id": row.user_id, "value": row.value,
                             "t": row.us // 1000})
    return kept, dead


def _same_windows(got: list[tuple], want: set[tuple]) -> None:
    """The windows' keys and counts exactly; the sums as floats (NaN and infinities by identity)."""
    got_by_key = {w[:3]: w[3:] for w in got}
    assert len(got_by_key) == len(got) and set(got_by_key) == {w[:3] for w in want}
    for *key, count, total in want:
        got_count, got_total = got_by_key[tuple(key)]
        assert got_count == count, (key, got_count, count)
        assert (math.isnan(got_total) and math.isnan(total)) or math.isclose(got_total, total, rel_tol=1e-12), key


def _assert_landed_once(layout, kept, dead, result, spec) -> None:
    windows = table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id", "events",
                                                          "value_sum"])
    _same_windows(windows, oracle.user_activity([kept], spec.watermark_seconds * 1000))
    letters = table_rows(layout.deadletter_table("user_activity"), ["raw_bytes", "error"])
    assert result.deadletter_rows == len(letters) == len(dead)
    unmatched = sorted(dead)
    for raw, error in sorted(letters):
        match = next((d for d in unmatched if d[0] == raw and error.startswith(d[1])), None)
        assert match is not None, f"dead letter {raw[:200]!r} ({error}) is not one Spark's reading makes"
        unmatched.remove(match)
    assert not unmatched


def test_a_hostile_landing_file_lands_every_line_once_as_spark_reads_it(spark, tmp_path, input_schemas):
    """A landing file of hostile lines (tests/support/json_lines.py hostile_corpus; LF and CRLF, the last line cut
    and unended): every event Spark's JSON reader reads from a line is in the job's windows or a dead letter, never
    both, never neither, never another value; the windows equal the batch recomputation over Spark's rows."""
    spec, inp = input_schemas["events"]
    lines = json_lines.hostile_corpus()
    layout = Layout(str(tmp_path / "stateops"))
    landing = tmp_path / "stateops" / "landing" / "events"
    landing.mkdir(parents=True)
    data = b"".join(text + (b"\r\n" if at % 3 == 0 else b"\n") for at, text in enumerate(lines))
    path = landing / "part-0000.json"
    path.write_bytes(data[:-2] if data.endswith(b"\r\n") else data[:-1])
    stamp = int(ARRIVAL.timestamp() * 1e9)
    os.utime(path, ns=(stamp, stamp))
    result = run_job(spark, spec, layout, settings=read_settings())
    arrival_us = int(ARRIVAL.timestamp() * 1e6)
    kept, dead = _expected(_read_line_by_line(spark, tmp_path, lines, inp.schema), lines, [arrival_us] * len(lines),
                           spec)
    assert len(kept) > 50 and len(dead) > 50 and result.output_rows > 0  # the corpus holds both
    _assert_landed_once(layout, kept, dead, result, spec)
    window = (1767226200000, 1767226500000)  # 2026-01-01 00:10-00:15: issue 69's three lines, as Spark reads them
    users = {row[2] for row in table_rows(layout.table("user_activity"), ["window_start", "window_end", "user_id"])
             if row[:2] == window}
    assert {"4242", "u1", "x-array"} <= users


def test_hostile_kafka_values_land_once_as_spark_reads_them(spark, kafka, tmp_path, input_schemas):
    """The same corpus as Kafka values (the 2 MB line left out: above the broker's record limit), read by
    user_activity on Kafka: the same promise, each value's arrival the broker's time."""
    from tests.support.servers.kafka import fresh_topics, produce, records

    spec, inp = input_schemas["events"]
    lines = [text for text in json_lines.hostile_corpus() if len(text) < 1_000_000]
    fresh_topics(kafka, ["events"])
    produce(kafka, "events", lines)
    arrivals = {value: stamp for _, _, stamp, value in records(kafka, "events")}  # equal values: equal enough
    config = tmp_path / "kafka.toml"
    config.write_text(f'[jobs.user_activity]\nsource = "kafka"\nkafka_bootstrap_servers = "{kafka}"\n')
    layout = Layout(str(tmp_path / "stateops"))
    spec = load_jobs(str(config), layout)["user_activity"]
    result = run_job(spark, spec, layout, settings=read_settings())
    kept, dead = _expected(_read_line_by_line(spark, tmp_path, lines, inp.schema), lines,
                           [arrivals[text] * 1000 for text in lines], spec)
    _assert_landed_once(layout, kept, dead, result, spec)
