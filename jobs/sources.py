"""Input streams: raw lines from the JSON landing zone (or Kafka), parsed against the job's schema.

Parsing keeps the raw line, so rows that do not parse go to the dead-letter table instead of vanishing.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from stateops.layout import Layout

from jobs.spec import InputSpec, JobSpec


def raw_lines(spark: SparkSession, spec: JobSpec, layout: Layout, inp: InputSpec) -> DataFrame:
    """A stream with one column `value`: the raw text of each input record."""
    if spec.source == "kafka":
        # Needs the spark-sql-kafka connector on the classpath (clusters); not available embedded.
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", spec.kafka_bootstrap_servers)
            .option("subscribe", inp.name)
            .option("startingOffsets", "earliest")
            .load()
            .select(F.col("value").cast("string").alias("value"))
        )
    return spark.readStream.option("maxFilesPerTrigger", spec.max_files_per_trigger).text(layout.landing(inp.name))


def _checked(raw: DataFrame, inp: InputSpec) -> DataFrame:
    columns = list(inp.columns())
    parsed = F.from_json("value", inp.schema, {"mode": "PERMISSIVE"})
    checked = raw.select(F.col("value").alias("raw"), parsed.alias("row"))
    missing = F.array_compact(F.array(*[F.when(F.col(f"row.{c}").isNull(), F.lit(c)) for c in columns]))
    error = (
        F.when(F.size(missing) == len(columns), F.lit("not a JSON object with any expected field"))
        .when(F.size(missing) > 0, F.concat(F.lit("missing or invalid field(s): "), F.array_join(missing, ", ")))
    )
    return checked.withColumn("error", error)


def valid_rows(raw: DataFrame, inp: InputSpec) -> DataFrame:
    """Rows with every schema field present and typed (the input of the stateful query)."""
    return _checked(raw, inp).where(F.col("error").isNull()).select("row.*")


def invalid_rows(raw: DataFrame, inp: InputSpec) -> DataFrame:
    """Rows that failed parsing: the raw line, the reason and the input they came from."""
    return (
        _checked(raw, inp).where(F.col("error").isNotNull())
        .select(F.lit(inp.name).alias("input"), "raw", "error")
    )
