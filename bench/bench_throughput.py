"""Throughput benchmark: every job against the stateless floor over the same input, in one run.

  job:    the job through the real runner (run_job: its query, whose scan judges every line once, its output and
          its dead letters into Delta with each batch)
  state:  the job's query alone into Spark's `noop` sink (dead letters collected, nothing written): what the job's
          state operators cost on top of the parse, whatever the runner does around them
  sink:   the query with the job's Delta sink for its output and no dead-letter write: sink - state is the output's
          Delta write, job - sink the dead-letter write and the runner around the query
  floor:  one stateless query over the same landing files: the query's own parse and judgment (`valid_rows`) of
          every input of the job into Spark's `noop` sink (what the machine does with the input and no state)
  plain:  the job's query as a user writes it without StateOps (its peer): Spark's JSON reader on each input, the
          watermark, the job's own transformation, into `noop`, on Spark's default store and formats (the in-memory
          store, a join in state format 2, Spark's checkpoint file manager), with the job's shuffle partitions
  json:   Spark's JSON reader on the same files (`readStream.schema(...).json(landing)` of every input of the job,
          into `noop`): the cheapest streaming read of the input, the baseline of the ratios' targets
  variants (--variants): the job as `job` with one thing changed (VARIANTS): `other_store` (the default): the
          job on the store it is not configured with; or some Spark settings, one lever at a time, e.g.
          `uncounted`: RocksDB's row counting off (trackTotalNumberOfRows=false: one read less per state write;
          numRowsTotal then reads 0 and StateOps records the state's rows as unknown)

Both sides of one job and size read byte-identical copies of the same input (one file per input and
micro-batch) on fresh checkpoints, alternating A B C C B A, after discarded warm-up rounds (each job measured and
the JSON reader, at the largest size measured, until no job's median moves by more than 10%: `warm_up_jobs`;
the report's last table). Per side: the median `batchDuration` of the
micro-batches with input (each run's first excluded), events/s from it, and ratio = job / floor. The job
also gets a sustained events/s (`sustained`): its steady batches' events over the time from the first one's start
to the last one's end, the gaps between batches counted. Where the job's time goes (medians over the same
batches): Spark's `durationMs` phases, the state operators' update, removal and commit times, RocksDB's own
metrics, and per state operator its own update, removal and commit times. For
`user_actions` the state operator's update time includes the Python worker (applyInPandasWithState).

  .venv/bin/python -m bench.bench_throughput [--quick] [--sizes 20000,200000] [--files 6] [--repeats 2]
                                             [--jobs user_activity,order_payments] [--variants uncounted,...]
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime
from functools import reduce
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQueryListener

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.definition.spark_settings import SparkSettings
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.state_store import CHANGELOG
from stateops.durations import spark_interval
from stateops.jobs.definition import transformation
from stateops.jobs.runtime.start import SHUFFLE_PARTITIONS, start_query, state_conf, stateful_frame
from stateops.jobs.runtime.session import JOIN_STATE_FORMAT_CONF, TRACK_ROWS, get_session
from stateops.jobs.runtime.sink import DeltaSink
from stateops.jobs.runtime.sources import valid_rows
from stateops.control.fence.session import CHECKPOINT_FILE_MANAGER_KEY, STOCK_CHECKPOINT_FILE_MANAGER
from stateops.layout import Layout

from bench.common import (Measured, Report, fmt_ms, fmt_ratio, machine, new_home, parse_args, ratio, schedule,
                          workdir)

JOBS = ("user_activity", "user_sessions", "order_payments", "user_actions")
BASE_SIDES = ("job", "state", "sink", "floor", "json", "plain")
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
# A variant: the job through the real runner with these session settings (fresh checkpoints: settings Spark records
# in a checkpoint, such as the provider and the join's state format, take effect).
VARIANTS = {
    "uncounted": {TRACK_ROWS: "false"},
    "join_v2": {"spark.sql.streaming.join.stateFormatVersion": "2"},
    "join_v4": {"spark.sql.streaming.join.stateFormatVersion": "4", "spark.sql.streaming.join.stateFormatV4.enabled":
                "true"},
    "snapshot_50": {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "50"},
    "memory": {PROVIDER: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"},
    # the in-memory store keeps no column families: a join on it needs format 2
    "memory_join_v2": {PROVIDER: "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
                       "spark.sql.streaming.join.stateFormatVersion": "2"},
    # Spark's own checkpoint file manager instead of the fence's create-once one (stateops.control.fence.session):
    # its cost
    "stock_checkpoints": {CHECKPOINT_FILE_MANAGER_KEY: STOCK_CHECKPOINT_FILE_MANAGER},
    # the job on the store it is not configured with (its `state_store`: a job's own store wins over the session's
    # provider, so `memory` and `memory_join_v2` change only the jobs configured without one)
    "other_store": {},
}
OTHER_STORE = "other_store"
DEFAULT_VARIANTS = (OTHER_STORE,)
WARM_ROUNDS, WARM_TOLERANCE = 4, 0.10  # warm-up rounds at most; a job's median moving less than this is warm
ROCKSDB_METRICS = ("rocksdbGetLatency", "rocksdbPutLatency", "rocksdbCommitFileSyncLatencyMs",
                   "rocksdbCommitFlushLatency", "rocksdbCommitCompactLatency", "rocksdbCommitCheckpointLatency",
                   "rocksdbChangeLogWriterCommitLatencyMs", "rocksdbLoadLatencyMs")
PHASES = ("addBatch", "walCommit", "commitOffsets", "queryPlanning", "latestOffset", "getBatch")


class Progress(StreamingQueryListener):
    """Every progress event of the queries this process runs, by query name."""

    def __init__(self) -> None:
        self.events: dict[str, list[dict[str, Any]]] = {}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        self.events.setdefault(progress.get("name") or "", []).append(progress)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def wait(self, name: str, batches: int, timeout: float = 10.0) -> None:
        """Progress events arrive on Spark's listener thread: wait (a little) for `batches` of `name`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and \
                sum(1 for e in self.events.get(name, []) if e.get("numInputRows", 0) > 0) < batches:
            time.sleep(0.05)

    def take(self, name: str) -> list[dict[str, Any]]:
        """The events with input of query `name` since the last take (all of them are dropped)."""
        events, self.events = self.events.get(name, []), {}
        return [e for e in events if e.get("numInputRows", 0) > 0]


def make_input(root: str, job: JobSpec, size: int, files: int, users: int) -> tuple[Layout, Layout]:
    """`files` micro-batches of about `size` events for `job` (orders and payments for the join), with
    duplicates and a few malformed lines so the dead-letter table has rows to keep; and one more micro-batch apart
    (the landing files of a second layout), for the restart."""
    source, later = Layout(f"{root}/input-{job.name}-{size}"), Layout(f"{root}/later-{job.name}-{size}")
    joined = {i.name for i in job.inputs} == {"orders", "payments"}
    cfg = GeneratorConfig(events=0 if joined else size * (files + 1), orders=size * (files + 1) // 2 if joined else 0,
                          files=files + 1, users=users, duplicate_share=0.02, malformed_share=0.001, seed=42)
    generated = generate(source, cfg)
    for inp in job.inputs:
        last = sorted(generated.files[inp.name])[-1]
        os.makedirs(later.landing(inp.name), exist_ok=True)
        os.rename(last, os.path.join(later.landing(inp.name), os.path.basename(last)))
    return source, later


def restart_batch(spark, spec: JobSpec, layout: Layout, later: Layout, listener: "Progress") -> dict[str, Any]:
    """The job restarted on its checkpoint with one more file per input: its first micro-batch (state loaded from
    the checkpoint: the last snapshot and the changelogs after it)."""
    for inp in spec.inputs:
        for name in os.listdir(later.landing(inp.name)):
            shutil.copy2(os.path.join(later.landing(inp.name), name), inp.landing(layout))
    run_job(spark, spec, layout, settings=read_settings())
    listener.wait(spec.name, 1)
    events = listener.take(spec.name)
    return events[0]


def other_store(spec: JobSpec) -> str:
    return "rocksdb" if spec.state_store == "memory" else "memory"


def floor_frame(spark, spec: JobSpec, layout: Layout) -> DataFrame:
    frames = [valid_rows(spark, spec, layout, inp) for inp in spec.inputs]
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def run_floor(spark, spec: JobSpec, layout: Layout) -> None:
    query = (floor_frame(spark, spec, layout).writeStream.queryName(f"{spec.name}__floor").format("noop")
             .option("checkpointLocation", f"{layout.home}/checkpoints/_floor").trigger(availableNow=True).start())
    query.awaitTermination()


def run_json(spark, spec: JobSpec, layout: Layout) -> None:
    """Spark's JSON reader on the job's landing files (every input, unioned) into `noop`."""
    frames = [spark.readStream.schema(inp.schema).option("maxFilesPerTrigger", 1).json(inp.landing(layout))
              for inp in spec.inputs]
    frame = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    query = (frame.writeStream.queryName(f"{spec.name}__json").format("noop")
             .option("checkpointLocation", f"{layout.home}/checkpoints/_json").trigger(availableNow=True).start())
    query.awaitTermination()


# Spark's own defaults for the plain peer: StateOps' session sets the store, the join's format and the commit points'
# writer; a user's plain query on a plain session runs on these (unset: Spark's defaults)
PLAIN_UNSET = (PROVIDER, *JOIN_STATE_FORMAT_CONF, CHECKPOINT_FILE_MANAGER_KEY, CHANGELOG)


def run_plain(spark, spec: JobSpec, layout: Layout) -> None:
    delay = spark_interval(spec.watermark_seconds)
    streams = {inp.name: spark.readStream.schema(inp.schema).option("maxFilesPerTrigger", 1).json(inp.landing(layout))
               .withWatermark(inp.time_column, delay) for inp in spec.inputs}
    before = {key: spark.conf.get(key, None) for key in (*PLAIN_UNSET, SHUFFLE_PARTITIONS)}
    try:
        for key in PLAIN_UNSET:
            spark.conf.unset(key)
        spark.conf.set(SHUFFLE_PARTITIONS, str(spec.shuffle_partitions))
        query = (transformation.apply(spec, streams).writeStream.queryName(f"{spec.name}__plain").format("noop")
                 .outputMode(spec.output_mode).option("checkpointLocation", f"{layout.home}/checkpoints/_plain")
                 .trigger(availableNow=True).start())
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    query.awaitTermination()


def run_state(spark, spec: JobSpec, layout: Layout) -> None:
    query = start_query(stateful_frame(spark, spec, layout), f"{spec.name}__state", None, "bounded",
                        spec.output_mode, spec, f"{layout.home}/checkpoints/_state",
                        state_conf=state_conf(spark, spec, layout))
    query.awaitTermination()


def run_sink(spark, spec: JobSpec, layout: Layout) -> None:
    """The query into the job's Delta table (delta-rs, as `auto` picks on a local master), its dead letters collected
    and not written, no fence around the writer."""
    checkpoint = f"{layout.home}/checkpoints/_sink"
    writer = DeltaSink(spec.name, spec.sink_path(layout), checkpoint, spec.merge_keys, row_key=spec.idempotent_key,
                       time_column=spec.output_time_column)
    query = start_query(stateful_frame(spark, spec, layout), f"{spec.name}__sink", writer, "bounded",
                        spec.output_mode, spec, checkpoint, state_conf=state_conf(spark, spec, layout))
    query.awaitTermination()


def _span_seconds(events: list[dict[str, Any]]) -> float:
    """From the first batch's start to the last batch's end, over every query's `events`."""
    starts = [datetime.fromisoformat(e["timestamp"]).timestamp() for e in events]
    ends = [start + e["batchDuration"] / 1000 for start, e in zip(starts, events)]
    return max(ends) - min(starts)


def sustained(events: list[dict[str, Any]]) -> float:
    """Events/s of a job's steady batches (the first excluded): their input over the time from the first one's start
    to the last one's end, the gaps between batches counted."""
    return sum(e["numInputRows"] for e in events[1:]) / _span_seconds(events[1:])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def per_operator(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, float | None]]]:
    """Medians over `events` of each state operator's own update, removal and commit times and rows."""
    found: dict[tuple[int, str], dict[str, list[float]]] = {}
    for e in events:
        for number, op in enumerate(e.get("stateOperators", [])):
            times = found.setdefault((number, op.get("operatorName", "?")), {})
            for key in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "numRowsUpdated",
                        "numRowsRemoved", "numRowsTotal"):
                times.setdefault(key, []).append(op.get(key) or 0)
    return [(f"{number} {name}", {key: _median(values) for key, values in times.items()})
            for (number, name), times in sorted(found.items())]


def breakdown(events: list[dict[str, Any]]) -> dict[str, float | None]:
    """Medians over `events` (steady batches of the stateful query) of where a batch's time goes."""
    out: dict[str, float | None] = {p: _median([e["durationMs"].get(p, 0) for e in events]) for p in PHASES}
    per_batch: dict[str, list[float]] = {}
    for e in events:
        totals: dict[str, float] = {}
        for op in e.get("stateOperators", []):
            for key in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                totals[key] = totals.get(key, 0) + op.get(key, 0)
            totals["stateRows"] = totals.get("stateRows", 0) + (op.get("numRowsTotal") or 0)
            for key in ROCKSDB_METRICS:
                totals[key] = totals.get(key, 0) + op.get("customMetrics", {}).get(key, 0)
        for key, value in totals.items():
            per_batch.setdefault(key, []).append(value)
    out.update({key: _median(values) for key, values in per_batch.items()})
    return out


def warm_up_jobs(spark, root: str, args, source_of: Callable[[str], Layout], listener: "Progress") -> list[list[str]]:
    """Rounds of discarded runs, each job measured once and the JSON reader once a round, each on its input at the
    largest size, until no job's median micro-batch moved by more than WARM_TOLERANCE from its round before (at most
    WARM_ROUNDS). The measurements are of jobs that run for hours: the JVM compiles a job's code paths (its query's
    generated classes, the state store's) over its first minute, and one warm-up run of one job left the first runs
    measured slower than the later ones by a sixth to a third (user_activity's median: 1,427, 977, 935, 875, 849 ms
    over five runs in one process). Returns the warm-up table's rows: each round's medians."""
    def median_of(query: str, source: Layout, run: Callable[[Layout], object]) -> float:
        """One discarded run of `query` on a copy of `source`: its median micro-batch (the first excluded)."""
        layout = new_home(root, f"warm-up-{query}-{round_}", source)
        run(layout)
        listener.wait(query, args.files)
        shutil.rmtree(layout.home)
        return _median([e["batchDuration"] for e in listener.take(query)[1:]]) or 0.0

    medians: dict[str, list[float]] = {name: [] for name in (*args.jobs, "JSON reader")}
    first = get_job(args.jobs[0])
    for round_ in range(WARM_ROUNDS):
        for name in args.jobs:
            medians[name].append(median_of(name, source_of(name), lambda layout: run_job(
                spark, get_job(name), layout, settings=read_settings())))
        medians["JSON reader"].append(median_of(f"{first.name}__json", source_of(first.name),
                                                lambda layout: run_json(spark, first, layout)))
        print(f"  warm-up round {round_ + 1}: " + ", ".join(f"{k} {fmt_ms(v[-1])} ms" for k, v in medians.items()),
              flush=True)
        if round_ and all(abs(v[-1] - v[-2]) <= WARM_TOLERANCE * v[-2] for k, v in medians.items()
                          if k in args.jobs):
            break
    listener.take("")
    return [[name, *(fmt_ms(m) for m in values)] for name, values in medians.items()]


def _args(argv: Sequence[str] | None):
    """The common arguments plus --jobs and --variants (split off before the common parser sees them)."""
    rest, jobs, variants = [], JOBS, DEFAULT_VARIANTS
    argv = list(sys.argv[1:] if argv is None else argv)
    while argv:
        arg = argv.pop(0)
        if arg in ("--jobs", "--variants"):
            values = tuple(v for v in argv.pop(0).split(",") if v)
            if arg == "--jobs":
                jobs = values
            else:
                unknown = set(values) - set(VARIANTS)
                if unknown:
                    raise SystemExit(f"bench_throughput: unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")
                variants = values
        else:
            rest.append(arg)
    args = parse_args(__doc__.split("\n")[0], rest)
    args.jobs, args.variants = jobs, variants
    return args


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = _args(argv)
    sides, job_sides = BASE_SIDES + args.variants, ("job",) + args.variants
    report = Report("throughput")
    spark = spark or get_session(SparkSettings.from_env())
    listener = Progress()
    spark.streams.addListener(listener)
    print(f"throughput benchmark: {machine()}")
    print(f"jobs {', '.join(args.jobs)}; sides {', '.join(sides)}; {args.files} micro-batches per run (first "
          f"excluded); {args.repeats} run(s) per side, job and size; sizes {list(args.sizes)}", flush=True)
    measured: dict[tuple[str, int, str], Measured] = {}
    steady: dict[tuple[str, int], list[dict[str, Any]]] = {}
    rates: dict[tuple[str, int], list[float]] = {}  # sustained events/s of each job run
    restarts: dict[tuple[str, int, str], list[dict[str, Any]]] = {}  # each job run's restart batch
    try:
        with workdir(args) as root:
            inputs: dict[tuple[str, int], tuple[Layout, Layout]] = {}
            def input_of(name: str, size: int) -> tuple[Layout, Layout]:
                if (name, size) not in inputs:
                    inputs[name, size] = make_input(root, get_job(name), size, args.files, args.users)
                return inputs[name, size]

            warming = warm_up_jobs(spark, root, args, lambda name: input_of(name, max(args.sizes))[0], listener)
            for i, size in enumerate(args.sizes):
                for name in args.jobs:
                    spec = get_job(name)
                    source, later = input_of(name, size)
                    for n, side in enumerate(schedule(sides, i, args.repeats)):
                        layout = new_home(root, f"{name}-{size}-{side}-{n}", source)
                        if side in job_sides:
                            settings = VARIANTS.get(side, {})
                            before = {key: spark.conf.get(key, None) for key in settings}
                            for key, value in settings.items():
                                spark.conf.set(key, value)
                            run_spec = replace(spec, state_store=other_store(spec)) if side == OTHER_STORE else spec
                            try:
                                run_job(spark, run_spec, layout, settings=read_settings())
                                listener.wait(name, args.files)
                                events = listener.take(name)
                                restarts.setdefault((name, size, side), []).append(
                                    restart_batch(spark, run_spec, layout, later, listener))
                            finally:
                                for key, value in before.items():
                                    spark.conf.unset(key) if value is None else spark.conf.set(key, value)
                            rates.setdefault((name, size, side), []).append(sustained(events))
                            steady.setdefault((name, size, side), []).extend(events[1:])
                        else:
                            {"state": run_state, "sink": run_sink, "floor": run_floor, "json": run_json,
                             "plain": run_plain}[side](spark, spec, layout)
                            listener.wait(f"{name}__{side}", args.files)
                            events = listener.take(f"{name}__{side}")
                            if side in ("state", "sink"):
                                steady.setdefault((name, size, side), []).extend(events[1:])
                        durations = [e["batchDuration"] for e in events]
                        measured.setdefault((name, size, side), Measured(size, side)).add(durations, args.files)
                        print(f"  {name:<15} {size:>7} {side:<5} batches ms {durations}", flush=True)
    finally:
        spark.streams.removeListener(listener)
    rows, parts, operators, restarted = [], [], [], []
    for size in args.sizes:
        for name in args.jobs:
            job, state, sink, floor, json_, plain = (measured[name, size, side] for side in BASE_SIDES)
            events = size  # events per micro-batch (orders + payments for the join: about the same)
            json_rate, run_rate = events / json_.median_ms * 1000, statistics.median(rates[name, size, "job"])
            rows.append([name, f"{size:,}", fmt_ms(job.median_ms), fmt_ms(state.median_ms), fmt_ms(sink.median_ms),
                         fmt_ms(floor.median_ms),
                         fmt_ms(json_.median_ms), f"{events / job.median_ms * 1000:,.0f}", f"{run_rate:,.0f}",
                         f"{json_rate:,.0f}", fmt_ratio(ratio(job, json_)), fmt_ratio(json_rate / run_rate),
                         fmt_ratio(ratio(job, floor)), fmt_ratio(ratio(state, json_)), fmt_ms(plain.median_ms),
                         fmt_ratio(ratio(job, plain)), fmt_ratio(ratio(plain, json_)),
                         *(f"{fmt_ms(measured[name, size, v].median_ms)} ({fmt_ratio(ratio(measured[name, size, v], json_))})"
                           for v in args.variants)])
            for side in job_sides:
                first = restarts[name, size, side]
                load = [sum(op.get("customMetrics", {}).get("rocksdbLoadLatencyMs", 0)
                            for op in e.get("stateOperators", [])) for e in first]
                restarted.append([name, f"{size:,}", side, fmt_ms(measured[name, size, side].median_ms),
                                  fmt_ms(_median([e["batchDuration"] for e in first])),
                                  fmt_ms(_median([e["durationMs"].get("addBatch", 0) for e in first])),
                                  fmt_ms(_median(load))])
            for side in job_sides + ("state", "sink"):
                b = breakdown(steady[name, size, side])
                counted = VARIANTS.get(side, {}).get(TRACK_ROWS) != "false"
                parts.append([name, f"{size:,}", side,
                              *(fmt_ms(b.get(p)) for p in ("addBatch", "walCommit", "commitOffsets", "queryPlanning")),
                              fmt_ms(b.get("allUpdatesTimeMs")), fmt_ms(b.get("allRemovalsTimeMs")),
                              fmt_ms(b.get("commitTimeMs")), fmt_ms(b.get("rocksdbGetLatency")),
                              fmt_ms(b.get("rocksdbPutLatency")), fmt_ms(b.get("rocksdbCommitFileSyncLatencyMs")),
                              f"{b.get('stateRows') or 0:,.0f}" if counted else "not counted"])
                for operator, times in per_operator(steady[name, size, side]):
                    operators.append([name, f"{size:,}", side, operator, fmt_ms(times["allUpdatesTimeMs"]),
                                      fmt_ms(times["allRemovalsTimeMs"]), fmt_ms(times["commitTimeMs"]),
                                      f"{times['numRowsUpdated'] or 0:,.0f}", f"{times['numRowsRemoved'] or 0:,.0f}",
                                      f"{times['numRowsTotal'] or 0:,.0f}" if counted else "not counted"])
    report.table("median micro-batch (ms) and events/s; ratio = job / Spark's JSON reader on the same files, measured "
                 "side by side; floor = StateOps' own parse and judgment into noop; state only = the job's query "
                 "alone (no Delta write); state + sink = with the output's Delta write, no dead-letter write; plain = "
                 "the same query written plainly in PySpark (Spark's JSON reader, the default store) into noop; each "
                 "variant: its ms (its ratio to the JSON reader)",
                 ["job", "events/batch", "job ms", "state only ms", "state + sink ms", "floor ms", "JSON reader ms", "job events/s",
                  "job sustained events/s", "JSON reader events/s", "ratio", "sustained ratio", "job / floor",
                  "state only / JSON reader", "plain ms", "job / plain", "plain / JSON reader", *args.variants], rows)
    report.table("where the job's micro-batch goes (medians, ms; state and RocksDB times summed over operators "
                 "and partitions, so on 2 cores they can exceed the batch)",
                 ["job", "events/batch", "side", "addBatch", "walCommit", "commitOffsets", "planning", "state updates",
                  "state removals", "state commit", "rocksdb get", "rocksdb put", "rocksdb fsync", "state rows"],
                 parts)
    report.table("restart: the job run again on its checkpoint with one more file per input (its first micro-batch "
                 "loads the state: the newest snapshot and the changelogs after it; medians over the runs)",
                 ["job", "events/batch", "side", "steady batch", "restart batch", "restart addBatch",
                  "rocksdb load (summed)"], restarted)
    report.table("each state operator (medians, ms summed over its partitions; rows per micro-batch)",
                 ["job", "events/batch", "side", "operator", "updates", "removals", "commit", "rows updated",
                  "rows removed", "state rows"], operators)
    report.table(f"warm-up before the measurements (discarded): each job's median micro-batch (ms) in each round, "
                 f"at {max(args.sizes):,} events, until none moved by more than {WARM_TOLERANCE:.0%} (at most "
                 f"{WARM_ROUNDS} rounds); round 1 is a fresh JVM's",
                 ["run", *(f"round {n + 1}" for n in range(len(warming[0]) - 1))], warming)
    report.note(f"finished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
