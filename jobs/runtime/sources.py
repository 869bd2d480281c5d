"""Input streams: raw lines from the JSON landing zone (or Kafka), parsed against the job's schema.

Parsing keeps the raw line, so rows that do not parse go to the dead-letter table instead of vanishing.

A row whose event time lies more than the job's `future_tolerance` ahead of its arrival is a dead letter
too: one such "poison" timestamp would move the watermark past every later row and silently drop them.
Arrival is a fact of the record, never the clock: the file's modification time (the file source's
`_metadata.file_modification_time`), or the Kafka record timestamp. The stateful query and the
dead-letter query, and any re-execution of a micro-batch after a crash, therefore judge a row alike:
each row lands in exactly one of the two.
"""
from __future__ import annotations

import json
import operator
from functools import reduce

from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession
from pyspark.sql.streaming import DataStreamReader
from pyspark.sql import functions as F

from stateops.layout import Layout

from stateops.jobs.definition.spec import InputSpec, JobSpec

ODD = "odd"  # the dead-letter frame's column: a line the JSON source judges (odd_line)


def raw_lines(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec,
              starting_offsets: dict | None = None) -> DataFrame:
    """A stream with `value`, the raw text of each input record, and `arrival_time` (see the module doc).
    `starting_offsets`: where a Kafka input's new checkpoint starts ({topic: {partition: offset}}; default: the
    earliest; an adopted job's dead-letter query starts where the old query's last batch ended)."""
    if spec.source == "kafka":
        # The spark-sql-kafka connector: the pinned jars (`stateops jars fetch`) or the cluster's own jars. failOnDataLoss
        # stays on: offsets that retention deleted before they were read fail the query, never skip data.
        return (
            spark.readStream.format("kafka")
            .options(**spec.kafka_options)
            .option("kafka.bootstrap.servers", spec.kafka_bootstrap_servers)
            .option("subscribe", inp.topic)
            .option("startingOffsets", json.dumps(starting_offsets) if starting_offsets else "earliest")
            .option("failOnDataLoss", "true")
            .load()
            .select(F.col("value").cast("string").alias("value"), F.col("timestamp").alias("arrival_time"))
        )
    return (
        spark.readStream.option("maxFilesPerTrigger", spec.max_files_per_trigger).text(inp.landing(layout))
        .select("value", _file_arrival())
    )


def _file_arrival() -> Column:
    """A file row's arrival (the module doc): its file's modification time, alike in both queries' file sources."""
    return F.col("_metadata.file_modification_time").alias("arrival_time")


def _too_far_ahead(inp: InputSpec, spec: JobSpec) -> Column:
    limit = F.unix_micros("arrival_time") + F.lit(spec.future_tolerance_seconds * 1_000_000)
    return F.unix_micros(F.col(f"row.{inp.time_column}")) > limit


def rejection(inp: InputSpec, spec: JobSpec) -> Column:
    """Why a parsed row (`row`, with `arrival_time`) is not the stateful query's input; null when it is."""
    columns = list(inp.columns())
    # Plain null checks and concat_ws (it skips nulls), not an array filtered by a lambda, which Spark
    # interprets row by row (the same parse of 200k lines took 878 ms that way; README, Throughput).
    nulls = [F.col(f"row.{c}").isNull() for c in columns]
    missing = F.concat_ws(", ", *[F.when(null, F.lit(c)) for null, c in zip(nulls, columns)])
    return (
        F.when(reduce(operator.and_, nulls), F.lit("not a JSON object with any expected field"))
        .when(reduce(operator.or_, nulls), F.concat(F.lit("missing or invalid field(s): "), missing))
        .when(_too_far_ahead(inp, spec), F.concat(
            F.lit(f"{inp.time_column} "), F.col(f"row.{inp.time_column}").cast("string"),
            F.lit(f" is more than future_tolerance ({spec.future_tolerance}) ahead of its arrival "),
            F.col("arrival_time").cast("string"),
            F.lit(": a time this far ahead would move the watermark past every later row")))
    )


def _checked(raw: DataFrame, inp: InputSpec, spec: JobSpec) -> DataFrame:
    parsed = F.from_json("value", inp.schema, {"mode": "PERMISSIVE"})
    # One row in, one row out; the explode only keeps the optimizer from copying from_json into the filter
    # below (one parse per field checked, then one more: measured 952 vs 706 ms per 200k lines).
    checked = raw.select(F.col("value").alias("raw"), "arrival_time", F.explode(F.array(parsed)).alias("row"))
    return checked.withColumn("error", rejection(inp, spec))


def json_reader(reader: DataStreamReader | DataFrameReader, inp: InputSpec):
    """Spark's JSON source as the stateful query reads a file input (and the dead-letter batch its odd lines)."""
    return reader.schema(inp.schema).option("mode", "PERMISSIVE")


def _parsed_files(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec) -> DataFrame:
    """A file input parsed by Spark's JSON source: `row` and `arrival_time`."""
    return (
        json_reader(spark.readStream, inp).option("maxFilesPerTrigger", spec.max_files_per_trigger)
        .json(inp.landing(layout))
        .select(F.struct(*inp.columns()).alias("row"), _file_arrival())
    )


def valid_rows(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec) -> DataFrame:
    """Rows with every schema field present and typed, and a plausible time (the stateful query's input)."""
    parsed = _checked(raw_lines(spark, spec, layout, inp), inp, spec) if spec.source == "kafka" else \
        _parsed_files(spark, spec, layout, inp)
    return parsed.where(rejection(inp, spec).isNull()).select("row.*")


def odd_line(value: Column) -> Column:
    """Lines Spark's JSON source may judge otherwise than `from_json`: not valid UTF-8 (its byte parser refuses
    most invalid sequences where `from_json`'s reader puts U+FFFD), a leading byte-order mark (it skips one) and
    a top-level array (it reads each element as a row). Every other line parses alike in both (tests/spark/
    test_bad_input.py holds the corpus)."""
    return ~F.is_valid_utf8(value) | F.startswith(value, F.lit("\ufeff")) | \
        F.startswith(F.ltrim(value, F.lit(" \t")), F.lit("["))


def invalid_rows(raw: DataFrame, inp: InputSpec, spec: JobSpec) -> DataFrame:
    """Rows that failed parsing or the time check: the input they came from, the line as valid UTF-8 text
    (`raw`, each invalid byte sequence replaced by U+FFFD), the line's exact bytes (`raw_bytes`) and the reason.
    A file input's odd lines (`odd_line`) come too, whatever `from_json` said: the dead-letter batch has Spark's
    JSON source judge them (stateops.jobs.runtime.deadletters), since it parses the stateful query's rows.

    Spark strings carry whatever bytes the source read; written as they are, one line of invalid UTF-8 made
    the whole dead-letter table unreadable to Arrow readers (delta-rs, pandas, the dead-letter retention)."""
    odd = F.lit(False) if spec.source == "kafka" else odd_line(F.col("raw"))
    return (
        _checked(raw, inp, spec).withColumn(ODD, odd).where(F.col("error").isNotNull() | F.col(ODD))
        .select(F.lit(inp.name).alias("input"), F.make_valid_utf8("raw").alias("raw"),
                F.col("raw").cast("binary").alias("raw_bytes"), "error", "arrival_time", ODD)
    )
