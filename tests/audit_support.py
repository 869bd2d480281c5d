"""Real checkpoints for the audit tests: small real queries (noop sink, availableNow) and the oracle.

Each builder runs a real Structured Streaming query on the shared local session with RocksDB (or the
HDFS provider where asked) and returns its checkpoint path. The oracle is Spark's own state reader,
counted directly: what every audit must agree with.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from stateops.layout import Layout

from jobs.catalog import get_job
from jobs.runner import stateful_frame
from jobs.session import HDFS_PROVIDER

EVENTS_SCHEMA = "event_id STRING, user_id STRING, event_time TIMESTAMP, action STRING, value DOUBLE"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


def write_batches(folder: Path, batches: list[list[dict]], prefix: str = "part") -> None:
    """One JSON file per batch, modification times increasing so Spark reads them in order."""
    folder.mkdir(parents=True, exist_ok=True)
    base = max([time.time()] + [p.stat().st_mtime + 1 for p in folder.iterdir()])
    for i, rows in enumerate(batches):
        target = folder / f"{prefix}-{i:04d}.json"
        tmp = folder / f".{target.name}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.rename(target)
        os.utime(target, (base + i, base + i))


def events(batch: int, count: int, users: int = 40, ids: list[str] | None = None) -> list[dict]:
    """`count` events in minutes [10*batch, 10*batch+10) of 2026-01-01."""
    out = []
    for k in range(count):
        minute, second = 10 * batch + (k * 7) % 10, (k * 13) % 60
        out.append({"event_id": ids[k] if ids else f"e{batch}-{k}", "user_id": f"u{(k * 31 + batch) % users:03d}",
                    "event_time": f"2026-01-01T00:{minute:02d}:{second:02d}Z", "action": "view", "value": 1.0})
    return out


def event_stream(spark: SparkSession, folder: Path) -> DataFrame:
    return spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))


def run_bounded(frame: DataFrame, checkpoint: str, output_mode: str = "append") -> str:
    query = (frame.writeStream.format("noop").outputMode(output_mode).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception():
        raise query.exception()
    return checkpoint


def run_job_query(spark: SparkSession, layout: Layout, job: str) -> str:
    """The job's own stateful query (catalog transformation, landing input), into a noop sink."""
    spec = get_job(job)
    checkpoint = spec.checkpoint_path(layout)
    return run_bounded(stateful_frame(spark, spec, layout), checkpoint, spec.output_mode)


def ids_by_partition(spark: SparkSession, partitions: int, counts: dict[int, int], prefix: str = "h") -> dict[int, list[str]]:
    """For each partition, `counts[partition]` distinct ids that Spark's hash partitioning of a single string
    key (pmod(murmur3(id), partitions)) sends there: one Spark job for all partitions."""
    wanted = max(counts.values()) * partitions * 3
    rows = (spark.range(wanted).select(F.concat(F.lit(prefix), F.col("id").cast("string")).alias("i"))
            .select("i", F.pmod(F.hash("i"), F.lit(partitions)).alias("p")).collect())
    out: dict[int, list[str]] = {p: [] for p in counts}
    for r in rows:
        if r.p in out and len(out[r.p]) < counts[r.p]:
            out[r.p].append(r.i)
    assert all(len(out[p]) == n for p, n in counts.items()), "not enough ids: widen the range"
    return out


def ids_on_partition(spark: SparkSession, partition: int, partitions: int, count: int) -> list[str]:
    """Event ids that Spark's hash partitioning sends to `partition` (as one hot key pattern would)."""
    return ids_by_partition(spark, partitions, {partition: count})[partition]


def with_conf(spark: SparkSession, settings: dict[str, str], build):
    """Run `build()` with these session settings for the queries it starts; restore after."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return build()
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def with_provider(spark: SparkSession, provider: str, build):
    """Run `build()` with another state store provider for the queries it starts; restore after."""
    return with_conf(spark, {PROVIDER_CONF: provider}, build)


def hdfs_window_query(spark: SparkSession, folder: Path, checkpoint: str) -> str:
    frame = (event_stream(spark, folder).withWatermark("event_time", "10 minutes")
             .groupBy(F.window("event_time", "5 minutes"), "user_id").count())
    return with_provider(spark, HDFS_PROVIDER, lambda: run_bounded(frame, checkpoint, "append"))


def oracle_rows(spark: SparkSession, checkpoint: str, batch_id: int | None = None, **options) -> dict[int, int]:
    """Spark's state reader counted directly: rows per partition (non-empty partitions only)."""
    reader = spark.read.format("statestore").option("path", checkpoint)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    for key, value in options.items():
        reader = reader.option(key, value)
    return {r.partition_id: r["count"] for r in reader.load().groupBy("partition_id").count().collect()}


def nonzero(per_partition: dict[int, int]) -> dict[int, int]:
    return {p: n for p, n in per_partition.items() if n}
