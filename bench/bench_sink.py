"""Delta sink overhead: the two Delta writers of run_job (delta-rs, Delta's Spark writer) vs Spark's `noop` sink.

Same job (`user_activity`: update mode, MERGE of each micro-batch's updated windows), same input, project
defaults (RocksDB, machine-sized partitions), one process, one session. The `noop` run is run_job's dry run:
the same two queries (stateful and dead-letter), availableNow, their own checkpoints and the progress recorder,
writing to Spark's `noop` sink. `delta-rs` writes from the driver (`STATEOPS_DELTA_WRITER=delta-rs`), `spark`
with Delta's own Spark writer (`STATEOPS_DELTA_WRITER=spark`), each into a fresh home, exactly-once
bookkeeping included. Runs alternate A B C, C B A within a size (the other way round for the next), so drift
of the machine's load hits every side alike.

  .venv/bin/python -m bench.bench_sink [--quick] [--sizes 20000,200000] [--files 6] [--repeats 2]
"""
from __future__ import annotations

from typing import Sequence

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import DELTA_WRITER_CONF, get_session


from bench.common import (Measured, Report, fmt_ms, fmt_ratio, machine, make_input, new_home, parse_args, ratio,
                          schedule, warm_up, workdir)

JOB = "user_activity"
SIDES = ("noop", "delta-rs", "spark")


def run_side(spark, layout, spec, side: str) -> list[int]:
    """One run of the job on `side`: the writer is the session's DELTA_WRITER_CONF, which run_job reads."""
    before = spark.conf.get(DELTA_WRITER_CONF, "delta-rs")
    spark.conf.set(DELTA_WRITER_CONF, "delta-rs" if side == "noop" else side)
    try:
        return run_job(spark, spec, layout, settings=read_settings(), dry_run=side == "noop").batch_durations_ms
    finally:
        spark.conf.set(DELTA_WRITER_CONF, before)


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("sink")
    spark = spark or get_session(SparkSettings.from_env())
    spec = get_job(JOB)
    print(f"sink benchmark: {machine()}")
    print(f"job {JOB}; project defaults ({spec.shuffle_partitions} partitions, "
          f"{spark.conf.get('spark.sql.streaming.stateStore.providerClass').rsplit('.', 1)[-1]}); "
          f"{args.files} micro-batches per run (first = warm-up, excluded); {args.repeats} run(s) per side and "
          f"size; sizes {list(args.sizes)}", flush=True)
    results = {(size, side): Measured(size, side) for size in args.sizes for side in SIDES}
    with workdir(args) as root:
        for side in SIDES[1:]:
            warm_up(root, args.users, lambda layout: run_side(spark, layout, spec, side), name=f"warm-up-{side}")
        for i, size in enumerate(args.sizes):
            source = make_input(root, size, args.files, args.users)
            for n, side in enumerate(schedule(list(SIDES), i, args.repeats)):
                layout = new_home(root, f"{side}-{size}-{n}", source)
                durations = run_side(spark, layout, spec, side)
                print(f"  {side:<8} {size:>7} events/batch: batches ms {durations}", flush=True)
                results[size, side].add(durations, args.files)
    rows = []
    for size in args.sizes:
        by = {side: results[size, side] for side in SIDES}
        for side in SIDES:
            r = by[side]
            rows.append([size, side, len(r.steady), fmt_ms(r.warmup_ms), fmt_ms(r.median_ms),
                         fmt_ms(min(r.steady)), fmt_ms(max(r.steady)),
                         fmt_ratio(ratio(r, by["noop"])) if side != "noop" else "",
                         fmt_ratio(ratio(r, by["delta-rs"])) if side == "spark" else ""])
    report.table("median micro-batch latency (ms), warm-up batch excluded; ratios of medians",
                 ["events/batch", "sink", "batches", "warm-up", "median", "min", "max", "/ noop", "/ delta-rs"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
