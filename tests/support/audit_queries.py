"""Real checkpoints for the audit tests: small real queries (noop sink, availableNow) and the oracle.

Each builder runs a real Structured Streaming query on the shared local session with RocksDB (or the
HDFS provider where asked) and returns its checkpoint path. The oracle is Spark's own state reader,
counted directly: what every audit must agree with.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from stateops.audit import deep_audit
from stateops.audit.context import build_context
from stateops.audit.deep import store_refs
from stateops.audit.thresholds import Thresholds
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.joins import JoinBound
from stateops.layout import Layout

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.start import stateful_frame
from stateops.checkpoints.sparkstate import reading_format
from stateops.checkpoints.state_store import HDFS_PROVIDER
from tests.support.spark_confs import sql_confs

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
    with sql_confs(spark, settings):
        return build()


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


# --- the states of tests/spark/test_audit_numbers.py (16 shuffle partitions) ---

AUDIT_NUMBERS_PARTITIONS = P = 16
AUDIT_NUMBERS_SCENARIOS = SCENARIOS = ("balanced", "hot_partition", "six_of_sixteen")
AUDIT_NUMBERS_BOUND = JoinBound(lower_seconds=0, upper_seconds=2 * 3600)
ORDERS = "order_id STRING, order_time TIMESTAMP"
PAYMENTS = "payment_id STRING, order_id STRING, payment_time TIMESTAMP"


def _dedup_input(spark, root, pool: dict[int, list[str]]) -> None:
    """One input folder per scenario; the row counts (1600, 1000, 1200) tell the operators apart."""
    hot = [i for p in range(P) for i in pool[p][:700 if p == 5 else 20]]
    six = [i for p in range(6) for i in pool[p][:200]]
    for name, ids in (("balanced", [f"b{k}" for k in range(1600)]), ("hot_partition", hot), ("six_of_sixteen", six)):
        write_batches(root / name, [events(0, len(ids), ids=ids)])


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _join_input(root, base: dt.datetime, pool: dict[int, list[str]]) -> dt.datetime:
    """Orders over [base, base + 110 min), payments over [base + 115, base + 125 min): the watermark ends
    10 minutes after the last order, every order is behind it but within the 2-hour bound, every payment
    ahead of it. Returns that watermark."""
    offsets = [(k * 41) % 6600 for k in range(400)]
    orders = [{"order_id": pool[p][0], "order_time": _iso(base + dt.timedelta(seconds=s))}
              for p in (1, 6, 11) for s in offsets]
    payment_ids = ["HOT"] * 900 + [f"p{k}" for k in range(300)]
    payments = [{"payment_id": f"pay{k}", "order_id": order_id,
                 "payment_time": _iso(base + dt.timedelta(minutes=115, seconds=(k * 7) % 600))}
                for k, order_id in enumerate(payment_ids)]
    write_batches(root / "orders", [orders])
    write_batches(root / "payments", [payments])
    return base + dt.timedelta(seconds=max(offsets) - 600)


def _join_frame(spark, root):
    orders = (spark.readStream.schema(ORDERS).json(str(root / "orders"))
              .withWatermark("order_time", "10 minutes").alias("o"))
    payments = (spark.readStream.schema(PAYMENTS).json(str(root / "payments"))
                .withWatermark("payment_time", "10 minutes").alias("p"))
    return orders.join(payments, F.expr("o.order_id = p.order_id AND p.payment_time >= o.order_time AND "
                                        "p.payment_time <= o.order_time + interval 2 hours"))


def build_audit_numbers(spark, root: Path) -> dict:
    """The two queries of tests/spark/test_audit_numbers.py, run once, and the dedup query's deep audit: three
    deduplications in one query (balanced, 70% on one partition, evenly over 6 of 16) and a stream-stream join
    with a 2-hour bound and no matches (3 order ids of 400 rows each, one payment key of 900 rows plus 300 single
    ones)."""
    pool = ids_by_partition(spark, P, {p: 700 if p == 5 else 200 for p in range(P)})  # ids by where they hash
    _dedup_input(spark, root, pool)
    base = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0) - dt.timedelta(hours=2)
    watermark = _join_input(root, base, pool)
    frames = [event_stream(spark, root / name).withWatermark("event_time", "30 minutes")
              .dropDuplicatesWithinWatermark(["event_id"]) for name in SCENARIOS]
    union = frames[0].unionByName(frames[1]).unionByName(frames[2])
    settings = {"spark.sql.shuffle.partitions": str(P)}
    dedup_cp = with_conf(spark, settings, lambda: run_bounded(union, str(root / "cp" / "dedup")))
    join_cp = with_conf(spark, settings, lambda: run_bounded(_join_frame(spark, root), str(root / "cp" / "join")))
    dedup = deep_audit(spark, dedup_cp)
    by_rows = {1600: "balanced", 1000: "hot_partition", 1200: "six_of_sixteen"}
    by_scenario = {by_rows[op.rows_total]: op for op in dedup.operators}
    return {"dedup_cp": dedup_cp, "dedup": dedup, "ops": by_scenario, "join_cp": join_cp, "watermark": watermark}


# --- the states of tests/spark/test_audit_deep.py ---

DEEP_AUDIT_JOBS = JOBS = ("user_activity", "order_payments", "user_actions")


def collections_query(spark: SparkSession, folder: Path, checkpoint: str) -> str:
    """transformWithStateInPandas keeping, per user, every event id in a list state and events per action in a map
    state: Spark's state reader reads a row per list element and per map entry, so a user is many rows."""
    from pyspark.sql.streaming import StatefulProcessor

    class Collections(StatefulProcessor):  # defined here: pickled by value for the Python workers
        def init(self, handle):
            self.seen = handle.getListState("seen", "event_id STRING")
            self.actions = handle.getMapState("actions", "action STRING", "events LONG")

        def handleInputRows(self, key, rows, timerValues):
            import pandas as pd

            count = 0
            for pdf in rows:
                self.seen.appendList([(event_id,) for event_id in pdf["event_id"]])
                for action, n in pdf["action"].value_counts().items():
                    before = self.actions.getValue((action,))
                    self.actions.updateValue((action,), ((before[0] if before else 0) + int(n),))
                count += len(pdf)
            yield pd.DataFrame({"user_id": [key[0]], "events": [count]})

        def close(self):
            pass

    return run_bounded(event_stream(spark, folder).groupBy("user_id").transformWithStateInPandas(
        Collections(), "user_id STRING, events LONG", "Update", "None"), checkpoint, "update")


def build_deep_audit_states(spark, root: Path) -> dict:
    """The checkpoints of tests/spark/test_audit_deep.py: the catalog jobs' own stateful queries on generated input,
    plus direct queries for a hot partition, unbounded dedup, no watermark, the HDFS provider and complete mode.
    Returns {"cps": name -> checkpoint path, "layout", "generated", "root"}."""
    layout = Layout(str(root / "home"))
    generated = generate(layout, GeneratorConfig(events=800, files=2, users=60, orders=160, seed=11))
    cps = {job: run_job_query(spark, layout, job) for job in JOBS}
    write_batches(root / "plain", [events(b, 300) for b in range(3)])
    hot_ids = ids_on_partition(spark, partition=2, partitions=4, count=1800)
    write_batches(root / "hot", [events(0, 1000, ids=hot_ids[:900] + [f"c{k}" for k in range(100)]),
                                 events(1, 1000, ids=hot_ids[900:] + [f"d{k}" for k in range(100)])])
    cps["hot_partition"] = run_bounded(
        event_stream(spark, root / "hot").withWatermark("event_time", "30 minutes")
        .dropDuplicatesWithinWatermark(["event_id"]), str(root / "cp" / "hot"))
    cps["unbounded_dedup"] = run_bounded(
        event_stream(spark, root / "plain").withWatermark("event_time", "10 minutes").dropDuplicates(["event_id"]),
        str(root / "cp" / "unbounded"))
    cps["no_watermark"] = run_bounded(event_stream(spark, root / "plain").groupBy("user_id").count(),
                                      str(root / "cp" / "nowm"), "update")
    cps["hdfs"] = hdfs_window_query(spark, root / "plain", str(root / "cp" / "hdfs"))
    cps["complete_mode"] = run_bounded(  # complete mode never evicts, whatever the watermark says
        event_stream(spark, root / "plain").withWatermark("event_time", "10 minutes")
        .groupBy(F.window("event_time", "5 minutes"), "user_id").count(), str(root / "cp" / "complete"), "complete")
    hot_user = [dict(e, user_id="hot", action=f"a{k % 3}") for k, e in enumerate(events(0, 400))]
    write_batches(root / "collections", [hot_user + events(1, 100, users=30), events(2, 100, users=30)])
    cps["collections"] = collections_query(spark, root / "collections", str(root / "cp" / "collections"))
    return {"cps": cps, "layout": layout, "generated": generated, "root": root}


def state_rows(spark, checkpoint: str, batch: int | None = None, *, by_partition: bool = True) -> dict:
    """Every store's rows (key and value as JSON) as Spark's state reader reads them at `batch` (default latest),
    read in the checkpoint's own format, each store the audits read (a join's four stores, or its column families,
    one by one): (operator, store) -> sorted (partition, row)."""
    from stateops.checkpoints.sparkstate import ensure_state_coordinator

    ensure_state_coordinator(spark)  # a session that ran no query yet has no coordinator for the reader
    opened = Checkpoint.open(checkpoint)
    batch = opened.latest_committed_batch() if batch is None else batch
    found = {}
    with reading_format(spark, opened.checkpoint_format(batch)):
        for ref in store_refs(spark, build_context(checkpoint, batch, Thresholds())):
            reader = spark.read.format("statestore").option("path", checkpoint).option("batchId", batch)
            for key, value in dict(ref.options).items():
                reader = reader.option(key, value)
            frame = reader.load()
            row = F.to_json(F.struct(*[c for c in frame.columns if c != "partition_id"]))
            rows = frame.select("partition_id", row.alias("row")).collect()
            found[(ref.operator_id, ref.store_name)] = sorted(
                (r.partition_id if by_partition else 0, r.row) for r in rows)
    return found
