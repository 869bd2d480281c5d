"""Every benchmark `python -m bench` runs, in order, and the BENCHMARKS.md section each one fills.

A new benchmark plugs in with one line: a module whose `main(argv, spark) -> bench.common.Report` prints
and returns what it measured; optional hand-written text for its section goes into
bench/BENCHMARKS.template.md under `<!-- section: KEY -->`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    key: str                   # the Report's name and the template's section key
    title: str                 # the section heading in BENCHMARKS.md
    module: str                # imported by `python -m bench`; has main(argv, spark) -> Report
    own_session: bool = False  # starts its own Spark session, or needs none: runs after the local-session ones,
    # with no session open (spark=None)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("state_store", "State store: project defaults vs a tutorial's configuration", "bench.bench_state_store"),
    Benchmark("throughput", "Throughput: every job against the stateless floor", "bench.bench_throughput"),
    Benchmark("parse", "Parse: the jobs' line parser vs `from_json` and Spark's JSON source",
              "bench.bench_parse"),
    Benchmark("kafka", "Kafka throughput: `user_activity` on a real broker vs the stateless Kafka floor",
              "bench.bench_kafka"),
    Benchmark("s3", "A batch with the whole home on an S3 API (moto, loopback) vs on local disk", "bench.bench_s3",
              own_session=True),
    Benchmark("sink", "Delta sink overhead: delta-rs foreachBatch vs noop", "bench.bench_sink"),
    Benchmark("audit", "State audit: deep audit vs the notebook approach", "bench.bench_audit"),
    Benchmark("driver_sink", "The two Delta writers on a cluster: delta-rs on the driver vs Delta's Spark writer",
              "bench.bench_driver_sink", own_session=True),
    Benchmark("recovery", "Recovery: the `adjust` runbook vs a bare stop and restart", "bench.bench_recovery"),
    Benchmark("store_switch", "Store switch: moving the state to the other store vs replaying the input",
              "bench.bench_store_switch"),
    Benchmark("migration", "Migration: carrying the state into a changed query vs the store switch vs a rebuild",
              "bench.bench_migration"),
    Benchmark("recovery_live", "Recovery on a live stream: the `adjust` runbook, quiet and busy, vs a bare stop and "
              "restart", "bench.bench_recovery_live"),
    Benchmark("retention", "Retention: plan vs a bare listing, and the progress table before/after compaction",
              "bench.bench_retention"),
    Benchmark("sensors", "Sensor tick: ops tables and file listings vs a Spark session", "bench.bench_sensors"),
    Benchmark("lease_race", "Lease race: two processes racing for one job's lease, control plane on local disk and on "
              "an S3 API", "bench.bench_lease_race", own_session=True),
    Benchmark("state_check", "State check: what checking a changed query against its checkpoint adds to a run's start",
              "bench.bench_state_check"),
    Benchmark("cli_start", "CLI start: the reading commands before and after the job model's split",
              "bench.bench_cli_start", own_session=True),
    Benchmark("scale", "Scale: 4 to 1,000 jobs in one code location (load, snapshot, sensor ticks, status, retention, "
              "fast audits, memory)", "bench.bench_scale", own_session=True),
)
