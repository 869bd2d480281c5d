"""Store switch benchmark: moving a checkpoint's state to the other store (the switch-store runbook's own step) vs a
replay of the same input into a fresh checkpoint on the target store (the only way Spark offers), one run.

For each size, `user_activity` runs on the in-memory store over `files` micro-batches of that many events (the
state: the dedup's event ids within the watermark and the open windows). Then, alternating within the size:
  switch:  stateops.recovery.store_switch.apply on a copy of that checkpoint, memory -> RocksDB (every store read
           by Spark's state reader, written by StateOps' JVM writer, the files swapped, the offset log rewritten),
           and the same copy back to memory;
  replay:  the same input run again into a fresh checkpoint on RocksDB (what a rebuild does), the sink included.
Both leave the state of the same batch in RocksDB; the switch's rows are checked equal to the source's (rows per
store from the writer against Spark's state reader). The ratio is switch / replay. A discarded warm-up (a small run,
switched both ways) comes first.

  .venv/bin/python -m bench.bench_store_switch [--quick] [--sizes 20000,200000] [--files 6]
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import time
from functools import partial
from typing import Sequence

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.recovery import store_switch
from stateops.checkpoints.sparkstate import write_store
from stateops.storage import copies

from bench.common import Report, fmt_ms, machine, make_input, new_home, parse_args, warm_up, workdir

JOB = "user_activity"


def _state_rows(spark, checkpoint: str, batch: int) -> int:
    return sum(spark.read.format("statestore").option("batchId", batch).option("operatorId", op).load(checkpoint)
               .count() for op in Checkpoint(checkpoint).operator_ids())


def _switch(spark, checkpoint: str, to: str, expected_rows: int) -> float:
    started = time.perf_counter()
    switch = store_switch.plan(checkpoint, to)
    done = store_switch.apply(checkpoint, switch, partial(write_store, spark))
    seconds = time.perf_counter() - started
    written = sum(sum(counts) for counts in done["rows"].values())
    assert written == expected_rows, f"the switch wrote {written} rows, the state has {expected_rows}"
    return seconds


def _replay(spark, layout, store: str) -> float:
    spec = dataclasses.replace(get_job(JOB), state_store=store)
    started = time.perf_counter()
    run_job(spark, spec, layout, settings=read_settings())
    return time.perf_counter() - started


def _warm_up(spark, memory, layout) -> None:
    """A discarded run, switch both ways and replay: the JVM writer's classes and Spark's plans load here."""
    run_job(spark, memory, layout, settings=read_settings())
    checkpoint = memory.checkpoint_path(layout)
    rows = _state_rows(spark, checkpoint, Checkpoint.open(checkpoint).latest_committed_batch())
    _switch(spark, checkpoint, "rocksdb", rows)
    _switch(spark, checkpoint, "memory", rows)


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("store_switch")
    spark = spark or get_session(SparkSettings.from_env())
    print(f"store switch benchmark: {machine()}")
    print(f"job {JOB}; {args.files} micro-batches per run; sizes {list(args.sizes)}; {args.repeats} repeat(s)",
          flush=True)
    rows = []
    memory = dataclasses.replace(get_job(JOB), state_store="memory")
    with workdir(args) as root:
        warm_up(root, args.users, lambda layout: _warm_up(spark, memory, layout))
        for size in args.sizes:
            source = make_input(root, size, args.files, args.users)
            built = new_home(root, f"memory-{size}", source)
            run_job(spark, memory, built, settings=read_settings())
            checkpoint = memory.checkpoint_path(built)
            batch = Checkpoint.open(checkpoint).latest_committed_batch()
            state = _state_rows(spark, checkpoint, batch)
            state_bytes = copies.tree_size(os.path.join(checkpoint, "state"))
            to_rocksdb, back, replays = [], [], []
            for n in range(args.repeats):
                copy = os.path.join(root, f"switch-{size}-{n}")
                shutil.copytree(checkpoint, copy)
                to_rocksdb.append(_switch(spark, copy, "rocksdb", state))
                back.append(_switch(spark, copy, "memory", state))
                replays.append(_replay(spark, new_home(root, f"replay-{size}-{n}", source), "rocksdb"))
                print(f"  {size:>7} events/batch, {state} state rows: switch to RocksDB {to_rocksdb[-1]:.2f} s, "
                      f"back {back[-1]:.2f} s, replay on RocksDB {replays[-1]:.2f} s", flush=True)
            best = min(to_rocksdb)
            rows.append([size * args.files, state, f"{state_bytes / 2**20:.1f}", fmt_ms(best * 1000),
                         fmt_ms(min(back) * 1000), fmt_ms(min(replays) * 1000), f"{best / min(replays):.2f}x"])
    report.table("seconds as ms, best of the repeats; ratio = switch to RocksDB / replay on RocksDB",
                 ["input events", "state rows", "state MiB (memory)", "switch to RocksDB", "switch back to memory",
                  "replay on RocksDB", "ratio"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
