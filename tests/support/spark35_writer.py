"""Writes real Structured Streaming checkpoints with PySpark 3.5, as test fixtures (tests/fixtures/spark35).

Why: a checkpoint written before Spark 4.0 has no operator metadata (no `state/<op>/_metadata/metadata`, which
Spark 4's `state-metadata` source and StateOps read to learn an operator's name and stores), only the stores'
`_metadata/schema` files, the offsets' conf and the state files themselves. Users upgrading to Spark 4 bring such
checkpoints with them, and StateOps must audit them; tests/support/fake_checkpoint.py lays out Spark 4's layout
by hand, and these are the real thing from Spark 3.5.

Run only under PySpark 3.5 (asserted), by scripts/spark35-checkpoints, which makes the venv and wipes the output:

    .venv-spark35/bin/python tests/support/spark35_writer.py OUTPUT_DIR

For each checkpoint, OUTPUT_DIR/<name>/input/ holds the JSON-lines files the query read (written here from fixed
values and seeded generators, one file per micro-batch: `maxFilesPerTrigger=1` with `trigger(availableNow=True)`,
or a paced processing-time trigger for RocksDB (see `run`);
file modification times are set to fixed, increasing values so that the file source takes them in order) and
OUTPUT_DIR/<name>/checkpoint the checkpoint. The sink is `noop`, so nothing but the checkpoint is written. Each
checkpoint gets its own SparkSession (local[2], 2 shuffle partitions, so 2 store partitions per operator):

    aggregation_hdfs         HDFSBackedStateStoreProvider (the default); a windowed count and max per user with
                             a 10-minute watermark, append mode: one operator, store `default`
    dedup_rocksdb_changelog  RocksDBStateStoreProvider with changelog checkpointing, a snapshot every 2 versions;
                             dropDuplicates on (user_id, event_id) after a watermark, then a windowed count: two
                             operators (0 the aggregation, 1 the dedup), changelogs, zips of versions 2 and 4
    join                     the default store; a stream-stream inner join of views and clicks on user_id within
                             5 minutes, watermarks on both sides: one operator, four stores
                             (left/right-keyToNumValues, left/right-keyWithIndexToValue)
    pandas_state             the default store; applyInPandasWithState keeping a running count per user
                             (GroupStateTimeout.NoTimeout): one operator, store `default`

Afterwards it prints each checkpoint's files (relative path and size). Query ids and run ids are random, as in any
checkpoint, and the file source logs (`sources/<i>/<b>`) name the input files by absolute path.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyspark


os.environ.pop("SPARK_HOME", None)  # PySpark 3.5's own jars, never another Spark's

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.state import GroupStateTimeout  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
    DoubleType, LongType, StringType, StructField, StructType, TimestampType,
)

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
FILES = 4            # input files, so micro-batches with data, per source
EVENTS_PER_FILE = 24
MINUTES_PER_FILE = 6  # file i holds events of minutes [6i, 6i + 6): the watermark moves on at every batch
USERS = [f"u{i}" for i in range(1, 6)]
MTIME0 = 1_767_225_600  # 2026-01-01T00:00:00Z, the first input file's modification time

EVENTS = StructType([
    StructField("event_id", StringType()),
    StructField("user_id", StringType()),
    StructField("event_time", TimestampType()),
    StructField("value", DoubleType()),
])
VIEWS = StructType([
    StructField("view_id", StringType()),
    StructField("user_id", StringType()),
    StructField("view_time", TimestampType()),
])
CLICKS = StructType([
    StructField("click_id", StringType()),
    StructField("user_id", StringType()),
    StructField("click_time", TimestampType()),
])


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def write_lines(folder: Path, rows_per_file: list[list[dict]]) -> None:
    """One JSON-lines file per micro-batch, with fixed, increasing modification times."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(rows_per_file):
        path = folder / f"part-{i:03d}.json"
        path.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
        os.utime(path, (MTIME0 + 60 * i, MTIME0 + 60 * i))


def events(seed: int, duplicates: bool = False) -> list[list[dict]]:
    """FILES files of EVENTS_PER_FILE events; with duplicates, each file after the first repeats 4 events of the
    file before it (same event_id, user_id, event_time) and 2 of its own."""
    rng = random.Random(seed)
    files: list[list[dict]] = []
    n = 0
    for f in range(FILES):
        rows = []
        for _ in range(EVENTS_PER_FILE):
            t = START + timedelta(minutes=MINUTES_PER_FILE * f, seconds=rng.randrange(MINUTES_PER_FILE * 60))
            rows.append({"event_id": f"e{n:04d}", "user_id": rng.choice(USERS), "event_time": iso(t),
                         "value": round(rng.uniform(0, 100), 2)})
            n += 1
        rows.sort(key=lambda r: r["event_time"])
        if duplicates:
            rows += [dict(r) for r in rng.sample(rows, 2)]
            if files:
                rows += [dict(r) for r in rng.sample(files[-1][:EVENTS_PER_FILE], 4)]
        files.append(rows)
    return files


def views_and_clicks(seed: int) -> tuple[list[list[dict]], list[list[dict]]]:
    """Views, and clicks 0 to 8 minutes after about two views in three (so some fall outside the 5-minute join
    window), each click in the same file index as its view or the next."""
    rng = random.Random(seed)
    views: list[list[dict]] = [[] for _ in range(FILES)]
    clicks: list[list[dict]] = [[] for _ in range(FILES)]
    v = c = 0
    for f in range(FILES):
        for _ in range(EVENTS_PER_FILE):
            t = START + timedelta(minutes=MINUTES_PER_FILE * f, seconds=rng.randrange(MINUTES_PER_FILE * 60))
            user = rng.choice(USERS)
            views[f].append({"view_id": f"v{v:04d}", "user_id": user, "view_time": iso(t)})
            v += 1
            if rng.random() < 0.67:
                ct = t + timedelta(seconds=rng.randrange(8 * 60))
                cf = min(FILES - 1, f + (1 if ct >= START + timedelta(minutes=MINUTES_PER_FILE * (f + 1)) else 0))
                clicks[cf].append({"click_id": f"c{c:04d}", "user_id": user, "click_time": iso(ct)})
                c += 1
    for rows in views + clicks:
        rows.sort(key=lambda r: r.get("view_time") or r["click_time"])
    return views, clicks


def session(name: str, provider: str | None, extra: dict[str, str] | None = None) -> SparkSession:
    builder = (SparkSession.builder.master("local[2]").appName(f"spark35-{name}")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               # the maintenance task is one per JVM, started by the first session with its interval and kept
               # by the next ones: the same for every session (the HDFS stores, 5 versions, never reach a snapshot)
               .config("spark.sql.streaming.stateStore.maintenanceInterval", "200ms"))
    if provider:
        builder = builder.config("spark.sql.streaming.stateStore.providerClass", provider)
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stream(spark: SparkSession, schema: StructType, folder: Path):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder))


def run(df, checkpoint: Path, mode: str = "append", paced_batches: int = 0) -> None:
    """With `availableNow`, one file per batch, then the no-data batch that moves the watermark on. Paced (RocksDB
    with changelog checkpointing, whose snapshots the maintenance task uploads between batches): a 2-second
    processing-time trigger instead, stopped once `paced_batches` batches are committed and the uploads are done."""
    writer = df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(checkpoint))
    if not paced_batches:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime="2 seconds").start()
        deadline = time.monotonic() + 120
        while len(list((checkpoint / "commits").glob("[0-9]*"))) < paced_batches:
            assert query.isActive and time.monotonic() < deadline, f"{checkpoint}: stopped short of {paced_batches}"
            time.sleep(0.2)
        time.sleep(1)  # the next trigger is a second away; the maintenance task (200 ms) uploads meanwhile
        query.stop()
    if query.exception():
        raise RuntimeError(query.exception())
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert len(commits) >= 3, f"{checkpoint}: only {len(commits)} committed micro-batches"
    last = query.lastProgress or {}
    print(f"{checkpoint.parent.name}: batches {commits}, last progress state operators "
          f"{[(op.get('operatorName'), op.get('numRowsTotal')) for op in last.get('stateOperators', [])]}")


def aggregation_hdfs(out: Path) -> None:
    write_lines(out / "input", events(seed=35_001))
    spark = session("aggregation_hdfs", None)
    try:
        df = (stream(spark, EVENTS, out / "input")
              .withWatermark("event_time", "10 minutes")
              .groupBy(F.window("event_time", "5 minutes"), "user_id")
              .agg(F.count("*").alias("events"), F.max("value").alias("max_value")))
        run(df, out / "checkpoint")
    finally:
        spark.stop()


def dedup_rocksdb_changelog(out: Path) -> None:
    write_lines(out / "input", events(seed=35_002, duplicates=True))
    # a snapshot every 2 versions, uploaded by the maintenance task between paced batches, so that changelogs sit
    # beside zips and SSTs: versions 2 and 4 (batches 1 and 3) get a zip
    spark = session("dedup_rocksdb_changelog", ROCKSDB,
                    {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
                     "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"})
    try:
        df = (stream(spark, EVENTS, out / "input")
              .withWatermark("event_time", "10 minutes")
              .dropDuplicates(["user_id", "event_id"])
              .groupBy(F.window("event_time", "5 minutes"))
              .agg(F.count("*").alias("events")))
        run(df, out / "checkpoint", paced_batches=FILES + 1)
    finally:
        spark.stop()


def join(out: Path) -> None:
    views, clicks = views_and_clicks(seed=35_003)
    write_lines(out / "input" / "views", views)
    write_lines(out / "input" / "clicks", clicks)
    spark = session("join", None)
    try:
        v = stream(spark, VIEWS, out / "input" / "views").withWatermark("view_time", "10 minutes")
        c = stream(spark, CLICKS, out / "input" / "clicks").withWatermark("click_time", "10 minutes")
        df = v.join(c.withColumnRenamed("user_id", "click_user_id"), F.expr(
            "user_id = click_user_id AND click_time >= view_time AND click_time <= view_time + interval 5 minutes"))
        run(df, out / "checkpoint")
    finally:
        spark.stop()


def running_count(key, pdfs, state):
    import pandas as pd

    count = state.get[0] if state.exists else 0
    for pdf in pdfs:
        count += len(pdf)
    state.update((count,))
    yield pd.DataFrame({"user_id": [key[0]], "count": [count]})


def pandas_state(out: Path) -> None:
    write_lines(out / "input", events(seed=35_004))
    spark = session("pandas_state", None)
    try:
        df = (stream(spark, EVENTS, out / "input")
              .groupBy("user_id")
              .applyInPandasWithState(
                  running_count,
                  StructType([StructField("user_id", StringType()), StructField("count", LongType())]),
                  StructType([StructField("count", LongType())]),
                  "append", GroupStateTimeout.NoTimeout))
        run(df, out / "checkpoint")
    finally:
        spark.stop()


CHECKPOINTS = {f.__name__: f for f in (aggregation_hdfs, dedup_rocksdb_changelog, join, pandas_state)}


def tidy(out: Path) -> None:
    """Nothing but the input and the checkpoint: no sink output, no `_spark_metadata`."""
    for path in sorted(out.rglob("_spark_metadata"), reverse=True):
        shutil.rmtree(path)
    for path in out.iterdir():
        if path.name not in ("input", "checkpoint"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def print_tree(out: Path) -> None:
    files = sorted(p for p in out.rglob("*") if p.is_file())
    print(f"\n{out.name}: {len(files)} files, {sum(p.stat().st_size for p in files)} bytes")
    for path in files:
        print(f"  {path.stat().st_size:>8}  {path.relative_to(out)}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTPUT_DIR", file=sys.stderr)
        return 2
    if not pyspark.__version__.startswith("3.5."):
        print(f"this writer runs under PySpark 3.5, not {pyspark.__version__} (scripts/spark35-checkpoints)", file=sys.stderr)
        return 2
    # the Python workers of applyInPandasWithState must be this interpreter (the one with pandas and pyarrow)
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = Path(argv[1]).resolve()
    for name, write in CHECKPOINTS.items():
        out = root / name
        assert not out.exists(), f"{out} exists: wipe OUTPUT_DIR first (scripts/spark35-checkpoints does)"
        write(out)
        tidy(out)
    for name in CHECKPOINTS:
        print_tree(root / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
