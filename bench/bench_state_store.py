"""State store benchmark: project defaults vs what a tutorial would use, same job, same input, one run.

  defaults: RocksDB state store with changelog checkpointing, shuffle partitions sized to the machine
  tutorial: spark.sql.shuffle.partitions=200 and the default HDFS-backed state store

Each configuration runs `user_activity` through the real runner (run_job, the spec's shuffle_partitions
changed with dataclasses.replace) on a fresh checkpoint in its own STATEOPS home. Both settings are SQL
confs read when a query starts on a new checkpoint (then fixed in the checkpoint's offsets log); the runner
applies the spec's partitions, the benchmark sets the provider (and the partitions, to the same value)
before each run and restores them after, then checks from the checkpoint that they took effect
(recorded confs, state partition dirs, *.delta vs *.changelog files).
Runs alternate A B B A within a size (B A A B for the next), so drift of the machine's load hits both.

  .venv/bin/python -m bench.bench_state_store [--quick]
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.definition.spec import default_shuffle_partitions
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER

from bench.common import (PROVIDER_CONF, SHUFFLE_CONF, Measured, Report, check_effective, fmt_ms, fmt_ratio,
                          machine, make_input, new_home, parse_args, ratio, schedule, warm_up, workdir)
from tests.support.spark_confs import sql_confs

JOB = "user_activity"


def configs() -> dict[str, tuple[int, str]]:
    return {"defaults": (default_shuffle_partitions(), ROCKSDB_PROVIDER), "tutorial": (200, HDFS_PROVIDER)}


def run_config(spark, layout, size: int, name: str) -> list[int]:
    """One run of `name` on a fresh checkpoint (checked to have taken effect); the batch durations."""
    partitions, provider = configs()[name]
    spec = dataclasses.replace(get_job(JOB), shuffle_partitions=partitions)
    with sql_confs(spark, {SHUFFLE_CONF: str(partitions), PROVIDER_CONF: provider}):
        result = run_job(spark, spec, layout, settings=read_settings())
    evidence = check_effective(spec.checkpoint_path(layout), partitions, provider)
    print(f"  {name:<8} {size:>7} events/batch: batches ms {result.batch_durations_ms}  [{evidence}]", flush=True)
    return result.batch_durations_ms


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("state_store")
    spark = spark or get_session(SparkSettings.from_env())
    print(f"state store benchmark: {machine()}")
    print(f"job {JOB}; {args.files} micro-batches per run (first = warm-up, excluded); {args.repeats} run(s) "
          f"per configuration and size; sizes {list(args.sizes)}; {args.users} users", flush=True)
    results = {(size, name): Measured(size, name) for size in args.sizes for name in configs()}
    with workdir(args) as root:
        warm_up(root, args.users, lambda layout: run_job(spark, get_job(JOB), layout, settings=read_settings()))
        for i, size in enumerate(args.sizes):
            source = make_input(root, size, args.files, args.users)
            for n, name in enumerate(schedule(list(configs()), i, args.repeats)):
                layout = new_home(root, f"{name}-{size}-{n}", source)
                results[size, name].add(run_config(spark, layout, size, name), args.files)
    rows = []
    for size in args.sizes:
        by = {name: results[size, name] for name in configs()}
        for name in ("defaults", "tutorial"):
            partitions, provider = configs()[name]
            r = by[name]
            rows.append([size, name, partitions, provider.rsplit(".", 1)[-1], len(r.steady),
                         fmt_ms(r.warmup_ms), fmt_ms(r.median_ms), fmt_ms(min(r.steady)), fmt_ms(max(r.steady)),
                         fmt_ratio(ratio(r, by["defaults"])) if name == "tutorial" else ""])
    report.table("median micro-batch latency (ms), warm-up batch excluded; ratio = tutorial / defaults",
                ["events/batch", "config", "partitions", "state store", "batches", "warm-up", "median",
                 "min", "max", "ratio"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
