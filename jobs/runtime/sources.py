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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from stateops.layout import Layout
from stateops.lineparse import json_source, parse_rows

from stateops.jobs.definition.spec import InputSpec, JobSpec

NO_ROW = "no event: Spark's JSON reader reads no row from the line"


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
        F.when(F.col("row").isNull(), F.lit(NO_ROW))
        .when(reduce(operator.and_, nulls), F.lit("not a JSON object with any expected field"))
        .when(reduce(operator.or_, nulls), F.concat(F.lit("missing or invalid field(s): "), missing))
        .when(_too_far_ahead(inp, spec), F.concat(
            F.lit(f"{inp.time_column} "), F.col(f"row.{inp.time_column}").cast("string"),
            F.lit(f" is more than future_tolerance ({spec.future_tolerance}) ahead of its arrival "),
            F.col("arrival_time").cast("string"),
            F.lit(": a time this far ahead would move the watermark past every later row")))
    )


def _checked(raw: DataFrame, inp: InputSpec, spec: JobSpec) -> DataFrame:
    """Each row Spark's JSON source reads from each line (`parse_rows`), with its line (`raw`) and why it is rejected
    (`error`, null when it is not); a line with no row (blank, `[]`) as one row, `row` null."""
    rows = parse_rows(raw.sparkSession, F.col("value"), inp.schema)
    checked = raw.select(F.col("value").alias("raw"), "arrival_time", F.explode_outer(rows).alias("row"))
    return checked.withColumn("error", rejection(inp, spec))


def _parsed_files(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec) -> DataFrame:
    """A file input parsed by Spark's JSON source: `row` and `arrival_time`."""
    return (
        json_source(spark.readStream, inp.schema).option("maxFilesPerTrigger", spec.max_files_per_trigger)
        .json(inp.landing(layout))
        .select(F.struct(*inp.columns()).alias("row"), _file_arrival())
    )


def valid_rows(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec) -> DataFrame:
    """Rows with every schema field present and typed, and a plausible time (the stateful query's input)."""
    parsed = _checked(raw_lines(spark, spec, layout, inp), inp, spec) if spec.source == "kafka" else \
        _parsed_files(spark, spec, layout, inp)
    return parsed.where(rejection(inp, spec).isNull()).select("row.*")


def invalid_rows(raw: DataFrame, inp: InputSpec, spec: JobSpec) -> DataFrame:
    """Rows that failed parsing or the time check: the input they came from, the whole line as valid UTF-8 text
    (`raw`, each invalid byte sequence replaced by U+FFFD), the line's exact bytes (`raw_bytes`) and the reason.
    Every row Spark's JSON reader reads from a line is judged (a top-level array: each element), as the stateful
    query reads it, and a line it reads no row from is one dead letter (NO_ROW): each line's events land in exactly
    one of the two queries.

    Spark strings carry whatever bytes the source read; written as they are, one line of invalid UTF-8 made
    the whole dead-letter table unreadable to Arrow readers (delta-rs, pandas, the dead-letter retention)."""
    error = F.col("error")
    return (
        _checked(raw, inp, spec).where(error.isNotNull())
        .select(F.lit(inp.name).alias("input"), F.make_valid_utf8("raw").alias("raw"),
                F.col("raw").cast("binary").alias("raw_bytes"),
                F.when(~F.is_valid_utf8("raw"), F.concat(F.lit("not valid UTF-8 text; "), error)).otherwise(error)
                .alias("error"))
    )
