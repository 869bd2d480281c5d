"""The cost of a micro-batch with the whole home on an S3 API (moto's server on loopback: checkpoint through
S3A with RocksDB and changelog checkpointing, Delta output and dead letters through delta-rs, the ops tables,
the control plane's records) against the same home on local disk, in one run.

Each run: `user_activity` through the real runner (run_job) over a fresh home holding the same landing
files (copied into the home: on S3 the file source lists and reads the bucket too), `files` micro-batches of
`size` events. Sides alternate A B B A over `--repeats`; per side the median `batchDuration` of the
micro-batches (each run's first excluded), and for the S3 side the state store's commit time
(`rocksdbCommitFileSyncLatencyMs`, the upload of the changelog files) and the query's `walCommit` and
`commitOffsets` (the offset and commit logs), both medians; ratio = S3 / local disk.

  .venv/bin/python -m bench.bench_s3 [--quick] [--sizes 2000,20000] [--files 8] [--repeats 2]
"""
from __future__ import annotations

import os
import statistics
from typing import Sequence

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.runtime.runner import run_job
from stateops.storage import filesystem
from stateops.layout import Layout

from bench.bench_throughput import Progress
from bench.common import Measured, Report, fmt_ms, fmt_ratio, machine, make_input, parse_args, ratio, schedule
from bench.common import workdir

JOB = "user_activity"
SIDES = ("local", "s3")
BUCKET = "bench"


def _home(root: str, side: str, name: str, source: Layout) -> Layout:
    """A fresh home on `side` holding a copy of `source`'s landing files."""
    home = Layout.of(os.path.join(root, name) if side == "local" else f"s3://{BUCKET}/{name}",
                     os.path.join(root, name + "-control") if side == "local" else None)
    fs, landing = filesystem(home.landing("events"))
    fs.put(source.landing("events"), landing, recursive=True)
    return home


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _phases(events: list[dict]) -> dict[str, float | None]:
    """Medians over the batches (the first excluded) of the phases a checkpoint on S3 makes slower."""
    steady = events[1:]
    commit = [m["customMetrics"].get("rocksdbCommitFileSyncLatencyMs", 0) for e in steady
              for m in e.get("stateOperators", [])[:1]]
    return {"state commit": _median(commit),
            "walCommit": _median([e["durationMs"].get("walCommit", 0) for e in steady]),
            "commitOffsets": _median([e["durationMs"].get("commitOffsets", 0) for e in steady])}


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    from tests.support.servers.moto import moto_s3

    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("s3")
    print(f"s3 benchmark: {machine()}", flush=True)
    measured: dict[tuple[int, str], Measured] = {}
    phases: dict[tuple[int, str], list[dict]] = {}
    with moto_s3() as env, workdir(args) as root:
        os.environ.update(env)  # before the session: stateops.jobs.runtime.session maps AWS_* to S3A
        os.environ["AWS_ALLOW_HTTP"] = "true"
        import boto3

        from stateops.jobs.definition.spark_settings import SparkSettings

        from stateops.jobs.runtime.session import get_session

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        spark = spark or get_session(SparkSettings.from_env())
        listener = Progress()
        spark.streams.addListener(listener)
        try:
            warm = make_input(root, 1_000, 3, args.users, name="warm-up-input")
            for side in SIDES:
                run_job(spark, get_job(JOB), _home(root, side, f"warm-up-{side}", warm), settings=read_settings())
            listener.take(JOB)
            for i, size in enumerate(args.sizes):
                source = make_input(root, size, args.files, args.users)
                for n, side in enumerate(schedule(SIDES, i, args.repeats)):
                    run_job(spark, get_job(JOB), _home(root, side, f"{size}-{side}-{n}", source),
                            settings=read_settings())
                    listener.wait(JOB, args.files)
                    events = listener.take(JOB)
                    durations = [e["batchDuration"] for e in events]
                    measured.setdefault((size, side), Measured(size, side)).add(durations, args.files)
                    phases.setdefault((size, side), []).append(_phases(events))
                    print(f"  {size:>7} {side:<5} batches ms {durations}", flush=True)
        finally:
            spark.streams.removeListener(listener)
    rows = []
    for size in args.sizes:
        local, s3 = measured[size, "local"], measured[size, "s3"]
        parts = {side: {k: _median([p[k] for p in phases[size, side] if p[k] is not None])
                        for k in ("state commit", "walCommit", "commitOffsets")} for side in SIDES}
        rows.append([JOB, f"{size:,}", fmt_ms(local.median_ms), fmt_ms(s3.median_ms), fmt_ratio(ratio(s3, local)),
                     *(f"{fmt_ms(parts['local'][k])} / {fmt_ms(parts['s3'][k])}"
                       for k in ("state commit", "walCommit", "commitOffsets"))])
    report.table("median micro-batch (ms), the whole home on local disk vs on moto's S3 server on loopback (S3A "
                 "checkpoint, delta-rs tables); ratio = S3 / local disk, measured side by side; phases local / S3",
                 ["job", "events/batch", "local ms", "S3 ms", "ratio", "state commit ms", "walCommit ms",
                  "commitOffsets ms"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
