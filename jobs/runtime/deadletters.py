"""The dead-letter query's micro-batch: its odd lines judged by Spark's JSON source, then the batch written.

The stateful query reads a file input with Spark's JSON source (its byte parser takes about half the time of
`from_json`'s character reader: BENCHMARKS.md, Throughput); the dead-letter query reads the lines as text, to keep
each bad line's exact bytes, and judges them with `from_json`. Both parse every line alike but the odd ones
(stateops.jobs.runtime.sources.odd_line: invalid UTF-8, a leading byte-order mark, a top-level array). The batch
writes those few lines one per folder (a folder per run and batch, removed once the batch is written; what a killed
run left, the next run removes as it starts) and reads them back with the stateful query's own reader, so that each
row of an odd line lands in exactly one of the two queries: a row the stateful query keeps is no dead letter, every
other row of the line is one, and so is the whole line when the JSON source reads no row from it (`[]`). A Kafka
job's two queries both parse with `from_json`: its batches have no odd line and are written as they come.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from stateops.control.fence.writes import BatchWriter
from stateops.storage.copies import remove_tree

from stateops.jobs.definition.spec import InputSpec, JobSpec
from stateops.jobs.runtime.sources import ODD, json_reader, rejection

NO_ROW = "no event: Spark's JSON reader reads no row from the line"


@dataclass
class JudgedDeadLetters:
    """A dead-letter query's writer: the batch's odd lines judged (module doc), then `write`."""

    spec: JobSpec
    scratch: str
    run_id: str  # each run's batches write folders of their own: another run's (a zombie's) never reads them
    write: BatchWriter

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.spec.source == "kafka":
            self.write(df.drop(ODD, "arrival_time"), batch_id)
            return
        df = df.persist()  # the batch's dead letters and odd lines only: a few rows, read twice below
        folder = posixpath.join(self.scratch, f"{self.run_id}-{batch_id}")
        try:
            odd = df.where(F.col(ODD)).select("input", "raw_bytes", "arrival_time").collect()
            frames = [df.where(~F.col(ODD)).drop(ODD, "arrival_time")]
            frames += [judge(df.sparkSession, self.spec, inp, lines, posixpath.join(folder, inp.name))
                       for inp in self.spec.inputs if (lines := [r for r in odd if r.input == inp.name])]
            self.write(reduce(DataFrame.unionByName, frames), batch_id)
        finally:
            df.unpersist()
            remove_tree(folder)


def judge(spark: SparkSession, spec: JobSpec, inp: InputSpec, lines: list[Row], folder: str) -> DataFrame:
    """The dead letters among `lines` (input, raw_bytes, arrival_time) of input `inp`, as Spark's JSON source reads
    each: `folder/line=N/` holds line N alone."""
    given = spark.createDataFrame([(n, line.raw_bytes, line.arrival_time) for n, line in enumerate(lines)],
                                  "line INT, raw_bytes BINARY, arrival_time TIMESTAMP")
    given.select("line", F.col("raw_bytes").cast("string").alias("value")).write.mode("overwrite") \
        .partitionBy("line").text(folder)
    columns = list(inp.columns())
    parsed = json_reader(spark.read, inp).json(folder).select(F.struct(*columns).alias("row"), "line")
    rows = parsed.join(given, "line").withColumn("error", rejection(inp, spec)).where(F.col("error").isNotNull())
    empty = given.join(parsed, "line", "left_anti").withColumn("error", F.lit(NO_ROW))
    text = F.col("raw_bytes").cast("string")
    return rows.select("raw_bytes", "error").unionByName(empty.select("raw_bytes", "error")).select(
        F.lit(inp.name).alias("input"), F.make_valid_utf8(text).alias("raw"), "raw_bytes",
        F.when(~F.is_valid_utf8(text), F.concat(F.lit("not valid UTF-8 text; "), "error"))
        .otherwise(F.col("error")).alias("error"))
