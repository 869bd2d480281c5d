"""Migration benchmark: carrying a job's state into its changed query (the migrate runbook's own step) vs the store
switch on the same state vs a rebuild (the same input replayed by the new query into a fresh checkpoint: the only
way Spark offers), one run.

For each size, `user_activity` runs on the in-memory store over `files` micro-batches of that many events (the
state: the dedup's event ids within the watermark and the open windows). Its query is then changed: the window's two
aggregates stored the other way round (`sum` before `count`, which Spark refuses). Then, alternating within the size,
each on a copy of that home:
  migrate: stateops.jobs.runtime.migration.plan_migration, then stateops.migration.apply (the aggregation's rows
           read by Spark's state reader, rewritten and re-placed, written by StateOps' JVM writer with the new
           query's schema files; the dedup's files kept), then the check Spark's planning makes of the result;
  switch:  stateops.recovery.store_switch.apply on the original query's state, memory -> RocksDB;
  rebuild: the new query run over all the input into a fresh checkpoint, the sink included.
Ratios: migrate / rebuild and migrate / switch, with the input events per state row beside them. A discarded warm-up
(a small run, migrated) comes first.

  .venv/bin/python -m bench.bench_migration [--quick] [--sizes 20000,60000] [--files 20]

(--files 20: the retained input about 10 times the state rows, where a rebuild's cost shows.)
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from functools import partial
from typing import Sequence

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.sparkstate import write_store
from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime import migration
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.layout import Layout
from stateops.migration import apply
from stateops.recovery import store_switch

from bench.common import Report, fmt_ms, machine, make_input, new_home, parse_args, warm_up, workdir

JOB = "user_activity"


def reordered(events):
    """user_activity with its window's aggregates stored the other way round."""
    from pyspark.sql import functions as F

    events = events.dropDuplicatesWithinWatermark(["event_id"])
    return (events.groupBy(F.window("event_time", "5 minutes"), "user_id")
            .agg(F.sum("value").alias("value_sum"), F.count(F.lit(1)).alias("events"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "user_id", "value_sum", "events"))


def _state_rows(spark, checkpoint: str, batch: int) -> int:
    return sum(spark.read.format("statestore").option("batchId", batch).option("operatorId", op).load(checkpoint)
               .count() for op in Checkpoint(checkpoint).operator_ids())


def _migrate(spark, spec, layout: Layout) -> float:
    started = time.perf_counter()
    planned = migration.plan_migration(spark, spec, layout)
    assert planned.refusal() is None and planned.carried == "exact", planned.to_dict()
    checkpoint = spec.checkpoint_path(layout)
    partitions = Checkpoint.open(checkpoint).shuffle_partitions(planned.position.batch)
    apply.apply(checkpoint, planned, "bench", partial(migration.rewrite_state, spark),
                lambda root: migration.planned_state_files(spark, spec, layout, checkpoint, root), partitions)
    migration.adopt(spark, spec, layout)
    return time.perf_counter() - started


def _switch(spark, checkpoint: str) -> float:
    started = time.perf_counter()
    store_switch.apply(checkpoint, store_switch.plan(checkpoint, "rocksdb"), partial(write_store, spark))
    return time.perf_counter() - started


def _rebuild(spark, spec, layout: Layout) -> float:
    started = time.perf_counter()
    run_job(spark, spec, layout, settings=read_settings())
    return time.perf_counter() - started


def _copy(home: Layout, root: str, name: str) -> Layout:
    target = os.path.join(root, name)
    shutil.copytree(home.home, target)
    return Layout(target)


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("migration")
    spark = spark or get_session(SparkSettings.from_env())
    print(f"migration benchmark: {machine()}")
    print(f"job {JOB}; {args.files} micro-batches per run; sizes {list(args.sizes)}; {args.repeats} repeat(s)",
          flush=True)
    old = dataclasses.replace(get_job(JOB), state_store="memory")
    new = dataclasses.replace(old, transformation="bench.bench_migration:reordered")
    rows = []
    with workdir(args) as root:
        def warm(layout: Layout) -> None:
            run_job(spark, old, layout, settings=read_settings())
            _migrate(spark, new, layout)

        warm_up(root, args.users, warm)
        for size in args.sizes:
            source = make_input(root, size, args.files, args.users)
            built = new_home(root, f"old-{size}", source)
            run_job(spark, old, built, settings=read_settings())
            batch = Checkpoint.open(old.checkpoint_path(built)).latest_committed_batch()
            state = _state_rows(spark, old.checkpoint_path(built), batch)
            migrated, switched, rebuilt = [], [], []
            for n in range(args.repeats):
                migrated.append(_migrate(spark, new, _copy(built, root, f"migrate-{size}-{n}")))
                switched.append(_switch(spark, old.checkpoint_path(_copy(built, root, f"switch-{size}-{n}"))))
                rebuilt.append(_rebuild(spark, new, new_home(root, f"rebuild-{size}-{n}", source)))
                print(f"  {size:>7} events/batch, {state} state rows: migrate {migrated[-1]:.2f} s, switch "
                      f"{switched[-1]:.2f} s, rebuild {rebuilt[-1]:.2f} s", flush=True)
            best = min(migrated)
            rows.append([size * args.files, state, f"{size * args.files / state:.1f}", fmt_ms(best * 1000),
                         fmt_ms(min(switched) * 1000), fmt_ms(min(rebuilt) * 1000),
                         f"{best / min(rebuilt):.2f}x", f"{best / min(switched):.2f}x"])
    report.table("seconds as ms, best of the repeats",
                 ["input events", "state rows", "input per state row", "migrate", "store switch", "rebuild",
                  "migrate / rebuild", "migrate / switch"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
