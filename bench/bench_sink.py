"""Delta sink overhead: the real delta-rs foreachBatch sink (run_job) vs Spark's `noop` sink.

Same job (`user_activity`), same input, project defaults (RocksDB, machine-sized partitions), one run.
The `noop` run is run_job's dry run: the same two queries (stateful and dead-letter), availableNow,
their own checkpoints and the progress recorder, writing to Spark's `noop` sink. So the ratio isolates
the cost of the Delta writes (MERGE of each micro-batch's updated windows, exactly-once bookkeeping).
Runs alternate A B B A within a size (B A A B for the next), so drift of the machine's load hits both.

  .venv/bin/python -m bench.bench_sink [--quick]
"""
from __future__ import annotations

from typing import Sequence

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session


from bench.common import (Measured, Report, fmt_ms, fmt_ratio, machine, make_input, new_home, parse_args, ratio,
                          schedule, warm_up, workdir)

JOB = "user_activity"


def run_delta(spark, layout, spec) -> list[int]:
    return run_job(spark, spec, layout, settings=read_settings()).batch_durations_ms


def run_noop(spark, layout, spec) -> list[int]:
    return run_job(spark, spec, layout, settings=read_settings(), dry_run=True).batch_durations_ms


SINKS = {"delta": run_delta, "noop": run_noop}


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("sink")
    spark = spark or get_session(SparkSettings.from_env())
    spec = get_job(JOB)
    print(f"sink benchmark: {machine()}")
    print(f"job {JOB}; project defaults ({spec.shuffle_partitions} partitions, "
          f"{spark.conf.get('spark.sql.streaming.stateStore.providerClass').rsplit('.', 1)[-1]}); "
          f"{args.files} micro-batches per run (first = warm-up, excluded); {args.repeats} run(s) per sink and "
          f"size; sizes {list(args.sizes)}", flush=True)
    results = {(size, name): Measured(size, name) for size in args.sizes for name in SINKS}
    with workdir(args) as root:
        warm_up(root, args.users, lambda layout: run_delta(spark, layout, spec))
        for i, size in enumerate(args.sizes):
            source = make_input(root, size, args.files, args.users)
            for n, name in enumerate(schedule(list(SINKS), i, args.repeats)):
                layout = new_home(root, f"{name}-{size}-{n}", source)
                durations = SINKS[name](spark, layout, spec)
                print(f"  {name:<5} {size:>7} events/batch: batches ms {durations}", flush=True)
                results[size, name].add(durations, args.files)
    rows = []
    for size in args.sizes:
        by = {name: results[size, name] for name in SINKS}
        for name in ("noop", "delta"):
            r = by[name]
            rows.append([size, name, len(r.steady), fmt_ms(r.warmup_ms), fmt_ms(r.median_ms),
                         fmt_ms(min(r.steady)), fmt_ms(max(r.steady)),
                         fmt_ratio(ratio(r, by["noop"])) if name == "delta" else ""])
    report.table("median micro-batch latency (ms), warm-up batch excluded; ratio = delta / noop",
                ["events/batch", "sink", "batches", "warm-up", "median", "min", "max", "ratio"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
