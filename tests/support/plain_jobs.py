"""Plain PySpark jobs, written as a user writes them without StateOps: a file (or Kafka) source read with Spark's
JSON reader, the user's transformation, and either a `foreachBatch` MERGE into Delta or Delta's streaming sink.
They run on Spark's default store (the HDFS-backed in-memory store) and leave the checkpoint and table StateOps then
adopts (stateops.adoption). The transformations are the user's own, named by the adopted job's config."""
from __future__ import annotations

from typing import Mapping

from pyspark.sql import DataFrame, SparkSession

from stateops.jobs.examples.transforms import user_activity as activity  # noqa: F401 - dedup, then windows
from stateops.checkpoints.state_store import HDFS_PROVIDER, PROVIDER
from tests.support.spark_confs import sql_confs

EVENTS = "event_id STRING, user_id STRING, event_time TIMESTAMP, value DOUBLE"
DELAY = "10 minutes"
WINDOW_KEYS = ("window_start", "window_end", "user_id")


def deduplicated(events: DataFrame) -> DataFrame:
    """Each event once within the watermark (append mode: a row as soon as it is first seen)."""
    return events.dropDuplicatesWithinWatermark(["event_id"]).select("event_id", "user_id", "event_time", "value")


def _merge(table: str, keys: tuple[str, ...]):
    def write(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        if not _is_delta(spark, table):
            batch.write.format("delta").save(table)
            return
        batch.createOrReplaceTempView("plain_batch")
        on = " AND ".join(f"t.{k} = s.{k}" for k in keys)
        spark.sql(f"MERGE INTO delta.`{table}` t USING plain_batch s ON {on} "
                  "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    return write


def _is_delta(spark: SparkSession, table: str) -> bool:
    return bool(spark._jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, table))


NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
DEFAULT_STORE = {PROVIDER: HDFS_PROVIDER}


def store(spark: SparkSession, state: Mapping[str, str] = DEFAULT_STORE, no_data_batches: bool = True):
    """Queries started inside run on `state`'s store and formats (Spark's default store unless told), whatever the
    session's factory chose (and, unless `no_data_batches`, a batch only where a file landed)."""
    return sql_confs(spark, {**state, NO_DATA_BATCHES: str(no_data_batches).lower()})


def run_plain(spark: SparkSession, landing: str, checkpoint: str, table: str, *, sink: str = "merge",
              files_per_batch: int = 1, no_data_batches: bool = True,
              state: Mapping[str, str] = DEFAULT_STORE) -> None:
    """One availableNow run of the plain job: `sink` "merge" (dedup then windows, update mode, MERGE from
    foreachBatch) or "delta" (dedup, append mode, Delta's streaming sink), on `state`'s store and formats."""
    events = (spark.readStream.schema(EVENTS).option("maxFilesPerTrigger", files_per_batch).json(landing)
              .dropna().withWatermark("event_time", DELAY))
    with store(spark, state, no_data_batches):
        if sink == "merge":
            query = (activity(events).writeStream.outputMode("update").option("checkpointLocation", checkpoint)
                     .foreachBatch(_merge(table, WINDOW_KEYS)).trigger(availableNow=True).start())
        else:
            query = (deduplicated(events).writeStream.format("delta").outputMode("append")
                     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(table))
        query.awaitTermination()
        query.stop()


def run_plain_kafka(spark: SparkSession, bootstrap: str, topic: str, checkpoint: str, table: str,
                    per_batch: int = 150) -> None:
    """One availableNow run of the plain job on a Kafka topic: the values parsed with `from_json`, then as
    run_plain's "merge" job."""
    from pyspark.sql import functions as F

    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_batch).load()
              .select(F.from_json(F.col("value").cast("string"), EVENTS).alias("row")).select("row.*")
              .dropna().withWatermark("event_time", DELAY))
    with store(spark):
        query = (activity(events).writeStream.outputMode("update").option("checkpointLocation", checkpoint)
                 .foreachBatch(_merge(table, WINDOW_KEYS)).trigger(availableNow=True).start())
        query.awaitTermination()
        query.stop()


def config(name: str, *, landing: str, checkpoint: str, table: str, sink: str = "merge",
           kafka: str | None = None) -> str:
    """The `[jobs.NAME]` table that defines the plain job for StateOps: the user's transformation, the old
    checkpoint, table and landing folder (`kafka`: the brokers, and `landing` is the topic)."""
    merge = sink == "merge"
    transformation = "tests.support.plain_jobs:" + ("activity" if merge else "deduplicated")
    keys = ", ".join(f'"{k}"' for k in (WINDOW_KEYS if merge else ("event_id",)))
    return (f'[jobs.{name}]\ntransformation = "{transformation}"\n'
            f'output_mode = "{"update" if merge else "append"}"\n'
            f'{"merge_keys" if merge else "idempotent_key"} = [{keys}]\n'
            f'watermark_delay = "{DELAY}"\nwatermark_min = "1 minute"\nwatermark_max = "2 hours"\n'
            f'checkpoint = "{checkpoint}"\nsink_table = "{table}"\n'
            + (f'source = "kafka"\nkafka_bootstrap_servers = "{kafka}"\n'
               'kafka_options = { maxOffsetsPerTrigger = "150" }\n' if kafka else "")
            + f'[[jobs.{name}.inputs]]\nname = "events"\nschema = "{EVENTS}"\ntime_column = "event_time"\n'
            f'path = "{landing}"\n')
