"""The two Delta writers of jobs/runtime/sink.py on a Spark cluster: delta-rs on the driver against Delta's own Spark writer.

On a standalone cluster (master + two workers, 1 core and 1 GiB each, on loopback, started from the pip
package unless `--master` names one) the same rows are produced four ways per size:

  noop:         executors compute the rows, Spark's `noop` sink drops them (the baseline: no output at all)
  parquet:      executors write the rows as Parquet files in parallel (a bare executor-side write)
  driver:       STATEOPS_DELTA_WRITER=delta-rs: `toArrow()` to the driver, one delta-rs commit (app_id, batch_id)
  delta-spark:  STATEOPS_DELTA_WRITER=spark: the sink's JVM path (persist, count, Delta's writer on the
                executors with txnAppId/txnVersion, one commit)

Rows look like user_activity's output (window start/end, user id, count, sum). Sizes run ascending, each
side alternating A B C D / D C B A over `--repeats`; ratio = median / median noop. Memory: the driver
process's (Python) and its JVM's peak resident size during each side's runs of that size (peaks reset
before each run, the largest of its repeats kept).

  .venv/bin/python -m bench.bench_driver_sink [--quick] [--rows 20000,200000,2000000] [--master spark://...]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from typing import Sequence

from bench.common import Report, fmt_ratio, machine

FULL_ROWS = (20_000, 200_000, 2_000_000)
QUICK_ROWS = (20_000, 200_000)
SIDES = ("noop", "parquet", "driver", "delta-spark")
WARM_UP_COMMITS = 3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_ROWS} rows, 1 repeat")
    parser.add_argument("--rows", type=lambda s: tuple(int(x) for x in s.split(",")),
                        help=f"rows per micro-batch, comma-separated (default {FULL_ROWS})")
    parser.add_argument("--repeats", type=int, help="runs per side and size (default 3; 1 with --quick)")
    parser.add_argument("--master", help="an existing cluster's master URL (default: start one on loopback)")
    args, _ = parser.parse_known_args(argv)  # `python -m bench` passes every benchmark the same argv
    args.rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def batch_frame(spark, rows: int):
    from pyspark.sql import functions as F

    start = F.timestamp_seconds(F.lit(1_767_225_600) + (F.col("id") % 288) * 300)
    return spark.range(rows, numPartitions=4).select(
        start.alias("window_start"), (start + F.expr("INTERVAL 5 MINUTES")).alias("window_end"),
        F.concat(F.lit("u"), F.col("id").cast("string")).alias("user_id"),
        (F.col("id") % 97).alias("events"), (F.col("id") * 0.5).alias("value_sum"))


def _driver_jvm() -> int | None:
    """This process's driver JVM: the child running SparkSubmit (the cluster's daemons are children too)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if parent == os.getpid() and b"org.apache.spark.deploy.SparkSubmit" in handle.read():
                    return int(pid)
        except (OSError, IndexError, ValueError):
            continue
    return None


def _hwm_mib(pid: int | str) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def reset_peaks() -> None:
    """Start the peaks afresh (Linux: `5` in clear_refs resets VmHWM): under `python -m bench` this process
    and its JVM ran other benchmarks first, whose peaks would otherwise be reported here."""
    for pid in ("self", _driver_jvm()):
        if pid is not None:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as handle:
                    handle.write("5")
            except OSError:
                pass


def peak_rss_mib() -> tuple[float | None, float | None]:
    """Peak resident size of this process and of its driver JVM since reset_peaks(), in MiB."""
    jvm = _driver_jvm()
    return _hwm_mib("self"), None if jvm is None else _hwm_mib(jvm)


def run_side(spark, side: str, rows: int, root: str, batch: int) -> tuple[float, dict]:
    from stateops.jobs.runtime.sink import write_with_jvm
    from stateops.delta import write_batch

    df = batch_frame(spark, rows)
    started = time.perf_counter()
    if side == "noop":
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started, {}
    if side == "parquet":
        df.write.mode("overwrite").parquet(os.path.join(root, "parquet"))
        return time.perf_counter() - started, {}
    if side == "delta-spark":
        written = write_with_jvm(df, os.path.join(root, "delta-spark"), "bench/delta_spark", batch, ())
        if written != rows:
            raise RuntimeError(f"Delta's Spark writer wrote {written} rows, expected {rows}")
        return time.perf_counter() - started, {}
    data = df.toArrow()
    collected = time.perf_counter() - started
    result = write_batch(os.path.join(root, "delta"), data, app_id="bench/driver_sink", batch_id=batch,
                         merge_keys=())
    if result.rows != rows:
        raise RuntimeError(f"driver sink wrote {result.rows} rows, expected {rows}")
    return time.perf_counter() - started, {"collect_s": collected, "arrow_mib": data.nbytes / 2**20}


def measure(spark, args: argparse.Namespace, root: str):
    times = {(rows, side): [] for rows in args.rows for side in SIDES}
    extra: dict[int, list[dict]] = {rows: [] for rows in args.rows}
    memory: dict[tuple[int, str], tuple[float | None, float | None]] = {}
    batch = 0
    # Warm-up, three commits per writer: JIT, Arrow, delta-rs, and Delta's classes on the driver and on every
    # executor (the first two commits of Delta's writer take 9-11 s on the 2-worker cluster, then 1.7 s).
    for side in ("driver", "delta-spark") * WARM_UP_COMMITS:
        batch += 1
        run_side(spark, side, 1_000, root, batch)
    for rows in args.rows:
        for k in range(args.repeats):
            for side in SIDES if k % 2 == 0 else SIDES[::-1]:
                batch += 1
                reset_peaks()
                seconds, details = run_side(spark, side, rows, root, batch)
                peaks = peak_rss_mib()
                before = memory.get((rows, side), (None, None))
                memory[rows, side] = tuple(max(filter(None, (a, b)), default=None) for a, b in zip(before, peaks))
                times[rows, side].append(seconds)
                if details:
                    extra[rows].append(details)
                print(f"  {rows:>9,} rows  {side:<11} {seconds:7.2f} s {details}", flush=True)
    return times, extra, memory


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    """Needs its own cluster session: `python -m bench` stops its local one first (one SparkContext per
    process) and passes none."""
    from stateops.jobs.definition.spark_settings import SparkSettings
    from stateops.jobs.runtime.session import get_session
    from tests.support.servers.spark_cluster import spark_cluster

    if spark is not None:
        raise ValueError("bench_driver_sink starts its own session on a cluster; stop the local one first")
    args = parse_args(argv)
    report = Report("driver_sink", "the two Delta writers on a cluster: delta-rs on the driver vs Delta's Spark writer")
    print(f"driver sink benchmark: {machine()}", flush=True)
    root = tempfile.mkdtemp(prefix="stateops-bench-driver-")
    saved_env = dict(os.environ)
    try:
        with ExitStack() as stack:
            if args.master:
                os.environ["STATEOPS_SPARK_MASTER"] = args.master
            else:
                os.environ.update(stack.enter_context(spark_cluster(os.path.join(root, "cluster"))).env())
            spark = get_session(SparkSettings.from_env())
            try:
                report.note(f"master {spark.sparkContext.master} (2 workers x 1 core, 1 GiB executors unless "
                            f"--master); rows per batch {list(args.rows)}; {args.repeats} run(s) per side and size")
                times, extra, memory = measure(spark, args, root)
            finally:
                spark.stop()
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        shutil.rmtree(root, ignore_errors=True)
    table = []
    for rows in args.rows:
        base = statistics.median(times[rows, "noop"])
        for side in SIDES:
            med = statistics.median(times[rows, side])
            driver = side == "driver"
            python, jvm = memory[rows, side]
            table.append([f"{rows:,}", side, f"{med:.2f}",
                          f"{statistics.median(d['collect_s'] for d in extra[rows]):.2f}" if driver else None,
                          f"{extra[rows][0]['arrow_mib']:.1f}" if driver else None,
                          python and f"{python:,.0f}", jvm and f"{jvm:,.0f}",
                          fmt_ratio(med / base) if side != "noop" else ""])
    report.table("median wall time per micro-batch (s); ratio = side / noop; peak RSS of the driver during the "
                 "side's runs (MiB)",
                 ["rows/batch", "side", "median s", "collect s", "Arrow MiB", "driver Python MiB",
                  "driver JVM MiB", "ratio"], table)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
