"""State audit benchmark: the deep audit vs the plain notebook approach on one big checkpoint, one run.

  deep:     stateops.audit.deep_audit(spark, checkpoint): every operator/store, one groupBy(partition_id)
            per store with rows, key/value sizes, rows behind the watermark, oldest event time (and
            top keys for variable-width values), plus files on disk, the checkpoint's logs and findings
  notebook: what one would type in a notebook: `state-metadata`, then for each operator/store
            spark.read.format("statestore")...load().groupBy("partition_id").count().collect()

The checkpoint is built fast: `--rows` distinct event ids (10,000 users, one hour of event time) written as
4 Parquet files, read by one `availableNow` query (dedup within a 2-hour watermark, then 5-minute windows
per user, update mode, `noop` sink) with the session's defaults (RocksDB, machine-sized partitions). State:
one dedup row per event id plus one row per (user, window). One discarded warm-up of each side, then
`--repeats` rounds alternating A B / B A; ratio = median deep / median notebook. The per-partition row
counts of both sides are checked to be equal.

Then a second checkpoint, run with spark.sql.shuffle.partitions=200 (small input), and the fast audit
(stateops.audit.fast_audit: files and logs only, no Spark) timed on it.

  .venv/bin/python -m bench.bench_audit [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Sequence

from stateops.jobs.definition.spark_settings import SparkSettings

from stateops.jobs.runtime.session import get_session

from bench.common import SHUFFLE_CONF, Report, machine, recorded_confs, workdir
from tests.support.spark_confs import sql_confs
from stateops.audit import deep_audit, fast_audit

FULL_ROWS, QUICK_ROWS = 1_000_000, 100_000
USERS = 10_000
EPOCH = 1767225600  # 2026-01-01 00:00 UTC


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_ROWS:,} rows, 1 round, "
                        "20 partitions for the fast audit")
    parser.add_argument("--rows", type=int, help=f"distinct event ids = dedup state rows (default {FULL_ROWS:,})")
    parser.add_argument("--repeats", type=int, help="rounds of (deep, notebook) after the warm-up, "
                        "alternating A B / B A (default 6; 1 with --quick)")
    parser.add_argument("--partitions", type=int, help="shuffle partitions of the fast-audit checkpoint "
                        "(default 200; 20 with --quick)")
    parser.add_argument("--fast-runs", type=int, default=7, help="fast audit runs (default 7)")
    parser.add_argument("--workdir", help="where the checkpoints go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints afterwards")
    # `python -m bench` passes every benchmark the same argv: ignore the other benchmarks' options.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"audit benchmark: ignoring {unknown} (options of the other benchmarks)")
    args.rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    args.repeats = args.repeats or (1 if args.quick else 6)
    args.partitions = args.partitions or (20 if args.quick else 200)
    return args


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def build(spark, root: str, name: str, rows: int, users: int, files: int = 4, per_trigger: int | None = None) -> str:
    """A checkpoint of the dedup + window query over `rows` distinct events; returns its path."""
    from pyspark.sql import functions as F

    source, checkpoint = os.path.join(root, f"{name}-input"), os.path.join(root, f"{name}-checkpoint")
    (spark.range(rows)
     .select(F.concat(F.lit("e"), F.col("id").cast("string")).alias("event_id"),
             F.concat(F.lit("u"), (F.col("id") % users).cast("string")).alias("user_id"),
             F.timestamp_seconds(F.lit(EPOCH) + F.col("id") % 3600).alias("event_time"))
     .repartition(files).write.parquet(source))
    reader = spark.readStream.schema("event_id STRING, user_id STRING, event_time TIMESTAMP")
    if per_trigger:
        reader = reader.option("maxFilesPerTrigger", per_trigger)
    query = (reader.parquet(source)
             .withWatermark("event_time", "2 hours").dropDuplicatesWithinWatermark(["event_id"])
             .groupBy(F.window("event_time", "5 minutes"), "user_id").count()
             .writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return checkpoint


def notebook(spark, checkpoint: str) -> dict[tuple[int, str], dict[int, int]]:
    """The plain approach: per operator/store, read the state and count rows per partition."""
    out = {}
    for row in spark.read.format("state-metadata").load(checkpoint).collect():
        reader = (spark.read.format("statestore").option("path", checkpoint)
                  .option("operatorId", str(row.operatorId)))
        if row.stateStoreName != "default":
            reader = reader.option("storeName", row.stateStoreName)
        counts = reader.load().groupBy("partition_id").count().collect()
        out[row.operatorId, row.stateStoreName] = {r.partition_id: r["count"] for r in counts}
    return out


def same_counts(report, counts: dict[tuple[int, str], dict[int, int]]) -> None:
    deep = {(op.operator_id, op.store_name): {p: n for p, n in op.rows_per_partition.items() if n}
            for op in report.operators}
    if deep != counts:
        raise RuntimeError(f"deep audit and notebook disagree on rows per partition: {deep} vs {counts}")


def timed(fn):
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(argv)
    audit = Report("audit")
    spark = spark or get_session(SparkSettings.from_env())
    print(f"audit benchmark: {machine()}")
    print(f"{args.rows:,} distinct events, {USERS:,} users; {args.repeats} round(s) after a warm-up; fast audit "
          f"on {args.partitions} partitions, {args.fast_runs} runs", flush=True)
    with workdir(args) as root:
        seconds, checkpoint = timed(lambda: build(spark, root, "big", args.rows, USERS))
        partitions = recorded_confs(checkpoint).get(SHUFFLE_CONF)
        print(f"  built {checkpoint} in {seconds:.1f} s ({partitions} shuffle partitions)", flush=True)
        spark.streams.active  # noqa: B018 (StateStoreCoordinator; deep_audit does it too, the notebook needs it)

        sides = {"deep": lambda: deep_audit(spark, checkpoint), "notebook": lambda: notebook(spark, checkpoint)}
        times: dict[str, list[float]] = {name: [] for name in sides}
        results: dict[str, object] = {}
        for n in range(args.repeats + 1):  # round 0 = warm-up, excluded
            order = ["deep", "notebook"] if n % 2 == 0 else ["notebook", "deep"]
            for name in order:
                seconds, results[name] = timed(sides[name])
                if n:
                    times[name].append(seconds)
                print(f"  {'warm-up' if n == 0 else f'round {n}':<8} {name:<8} {seconds:6.2f} s  "
                      f"(load {load()})", flush=True)
            same_counts(results["deep"], results["notebook"])
        report = results["deep"]

        with sql_confs(spark, {SHUFFLE_CONF: str(args.partitions)}):
            seconds, small = timed(lambda: build(spark, root, "parts", 20_000, 1_000, files=2, per_trigger=1))
        recorded = recorded_confs(small).get(SHUFFLE_CONF)
        if recorded != str(args.partitions):
            raise RuntimeError(f"{small}: offsets log records {recorded} shuffle partitions, "
                               f"expected {args.partitions}")
        print(f"  built {small} in {seconds:.1f} s ({recorded} shuffle partitions)", flush=True)
        fast_times, fast = [], None
        for _ in range(args.fast_runs):
            seconds, fast = timed(lambda: fast_audit(small))
            fast_times.append(seconds)
        if any(op.num_partitions != args.partitions for op in fast.operators):
            raise RuntimeError(f"fast audit saw {[op.num_partitions for op in fast.operators]} partitions")
        fast_files = sum(len(op.bytes_per_partition) for op in fast.operators)

    deep_s, notebook_s = statistics.median(times["deep"]), statistics.median(times["notebook"])
    pairs = [round(d / b, 2) for d, b in zip(times["deep"], times["notebook"])]
    rows = []
    for op in report.operators:
        rows.append([f"{op.operator_id} {op.operator_name}/{op.store_name}", f"{op.rows_total:,}",
                     op.num_partitions, op.skew_ratio, op.avg_key_bytes, op.avg_value_bytes,
                     op.rows_behind_watermark, op.oldest_event_time and f"{op.oldest_event_time:%Y-%m-%d %H:%M}",
                     len(op.top_keys), f"{op.bytes_total:,}", f"{op.estimated_bytes:,}"])
    audit.table(f"deep audit of {checkpoint} at batch {report.batch_id} ({report.provider})",
                ["operator/store", "rows", "partitions", "skew", "avg key B", "avg value B", "behind wm",
                 "oldest", "top keys", "bytes on disk", "estimated B"], rows)
    audit.note(f"findings: {[f.code for f in report.findings]}")
    audit.table("median wall time (s), warm-up excluded; ratio = deep / notebook",
                ["side", "runs", "median", "min", "max", "ratio"],
                [["notebook", len(times["notebook"]), f"{notebook_s:.2f}", f"{min(times['notebook']):.2f}",
                  f"{max(times['notebook']):.2f}", ""],
                 ["deep", len(times["deep"]), f"{deep_s:.2f}", f"{min(times['deep']):.2f}",
                  f"{max(times['deep']):.2f}", f"{deep_s / notebook_s:.2f}x"]])
    audit.note(f"per round (deep / notebook): {pairs}")
    audit.note(f"fast audit on {args.partitions} partitions x {len(fast.operators)} operators "
               f"({fast_files} partition entries): median {statistics.median(fast_times):.3f} s, "
               f"min {min(fast_times):.3f} s, max {max(fast_times):.3f} s over {len(fast_times)} runs; "
               f"findings {[f.code for f in fast.findings]}")
    audit.note(f"finished: load average {load()}")
    return audit


if __name__ == "__main__":
    main()
