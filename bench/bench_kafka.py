"""Kafka throughput: `user_activity` reading a real broker against the stateless Kafka floor, in one run.

A broker per size (scripts/kafka, KRaft, loopback) holds the topic `events` (2 partitions), filled once by
`stateops generate --kafka`'s producer with `files` x size events. Each run reads its topic from the earliest
offset on a fresh checkpoint, `maxOffsetsPerTrigger` = records / files (so about `files` micro-batches of
`size` records):

  job:    the job through the real runner (run_job: its query, its output and dead letters into Delta)
  floor:  one stateless query over the same topic: the same `raw_lines` + `valid_rows` parse into Spark's
          `noop` sink (what the machine does with the records and no state, no output)

Sides alternate A B B A over `--repeats`; per side the median `batchDuration` of the micro-batches with input
(each run's first excluded), events/s from it, and ratio = job / floor.

  .venv/bin/python -m bench.bench_kafka [--quick] [--sizes 20000,200000] [--files 6] [--repeats 2]
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.demo import kafka_input
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.jobs.runtime.session import get_session
from stateops.layout import Layout

from bench.bench_throughput import Progress, run_floor
from bench.common import Measured, Report, fmt_ms, fmt_ratio, machine, parse_args, ratio, schedule, workdir

JOB = "user_activity"
SIDES = ("job", "floor")


def _fill(root: str, bootstrap: str, topic: str, size: int, files: int, users: int) -> int:
    """`files` x `size` generated events (a few duplicates and malformed lines) produced to `topic`."""
    source = Layout(f"{root}/input-{size}")
    cfg = GeneratorConfig(events=size * files, files=files, users=users, duplicate_share=0.02,
                          malformed_share=0.001, seed=42)
    generated = generate(source, cfg)
    kafka_input.create_topics(bootstrap, [topic])
    return kafka_input.produce_files(bootstrap, topic, generated.files["events"])


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    from tests.support.servers.kafka import jars_missing, kafka_broker

    args = parse_args(__doc__.split("\n")[0], argv)
    report = Report("kafka")
    if jars_missing():
        raise SystemExit(f"bench_kafka: {jars_missing()}")
    spark = spark or get_session(SparkSettings.from_env())
    listener = Progress()
    spark.streams.addListener(listener)
    print(f"kafka benchmark: {machine()}", flush=True)
    measured: dict[tuple[int, str], Measured] = {}
    try:
        with workdir(args) as root:
            for i, size in enumerate(args.sizes):
                with kafka_broker() as bootstrap:  # a broker per size: the job reads the topic `events`
                    produced = _fill(root, bootstrap, "events", size, args.files, args.users)
                    per_trigger = -(-produced // args.files)  # `files` batches of about `size` records
                    print(f"  {size:,}: {produced:,} records, maxOffsetsPerTrigger {per_trigger:,}", flush=True)
                    spec = replace(get_job(JOB), source="kafka", kafka_bootstrap_servers=bootstrap,
                                   kafka_options={"maxOffsetsPerTrigger": str(per_trigger)})
                    for n, side in enumerate(schedule(SIDES, i, args.repeats)):
                        layout = Layout(f"{root}/{size}-{side}-{n}")
                        if side == "job":
                            run_job(spark, spec, layout, settings=read_settings())
                            listener.wait(JOB, args.files)
                            events = listener.take(JOB)
                        else:
                            run_floor(spark, spec, layout)
                            listener.wait(f"{JOB}__floor", args.files)
                            events = listener.take(f"{JOB}__floor")
                        durations = [e["batchDuration"] for e in events if e.get("numInputRows", 0) > 0]
                        # Spark splits the limit over the partitions by their share: a last small batch may follow.
                        measured.setdefault((size, side), Measured(size, side)).add(durations, len(durations))
                        print(f"  {size:>7} {side:<5} batches ms {durations}", flush=True)
    finally:
        spark.streams.removeListener(listener)
    rows = []
    for size in args.sizes:
        job, floor = measured[size, "job"], measured[size, "floor"]
        rows.append([JOB, f"{size:,}", fmt_ms(job.median_ms), fmt_ms(floor.median_ms),
                     f"{size / job.median_ms * 1000:,.0f}", f"{size / floor.median_ms * 1000:,.0f}",
                     fmt_ratio(ratio(job, floor))])
    report.table("median micro-batch (ms) and events/s reading Kafka (2 partitions, loopback broker); ratio = job / "
                 "stateless floor, measured side by side",
                 ["job", "records/batch", "job ms", "floor ms", "job events/s", "floor events/s", "ratio"], rows)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
