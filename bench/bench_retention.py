"""Retention benchmark: plan time against a bare listing of the same tree, and the fast audit's progress read
before and after the ops-table compaction. No Spark: the trees are written as Spark lays them out.

  plan:     the home holds one checkpoint of job `user_activity` shaped like an HDFS-provider checkpoint of
            `--batches` batches over `--partitions` partitions (offsets/N and commits/N as Spark writes them,
            state/0/<p>/<v>.delta per version, a snapshot every 10 versions) next to a progress table.
            Timed: `stateops retention plan` (inventory + plan: one listing, the offset logs read, the
            restart model, the ops tables opened) vs `fs.find(home, detail=True)` (the bare listing it
            starts from), alternating A B / B A, `--repeats` rounds after a warm-up; ratio = plan / listing.
            On local disk, and on moto's S3 server on loopback (fewer files: `--s3-partitions`, since every
            file is a PUT to the loopback server).
  progress: a simulated week of a job at a 10 s trigger (two queries: 120,960 rows) written through the
            ProgressBuffer in `--progress-commits` groups (default 2,016: a flush every 5 minutes), then
            the fast audit's progress read (stateops.audit.context.recent_progress: the table filtered on the
            query id, the latest rows) timed `--reads` times before and after retention compacts the table
            (compact, checkpoint, vacuum, log cleanup: the real plan and apply).

  .venv/bin/python -m bench.bench_retention [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Sequence

from stateops.jobs.definition.environment import Environment
from stateops.jobs.runtime.retention import retention_scope
from stateops import progress, retention
from stateops.audit.context import recent_progress
from stateops.storage import filesystem
from stateops.layout import Layout
from stateops.progress import FlushSettings, ProgressBuffer

from bench.common import Report, machine, workdir

JOB = "user_activity"
PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
WEEK_ROWS = 7 * 86400 // 10 * 2
QUERIES = ("bench-stateful", "bench-deadletter")
OPS_POLICY = '[retention.ops_tables]\ncompact = true\ncompact_min_files = 2\nvacuum_after = "0 hours"\n' \
             'log_retention = "0 seconds"\n'


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: ~10k files local, ~2k on S3, "
                        "200 progress commits, 1 round")
    parser.add_argument("--batches", type=int, help="batches of the checkpoint (default 1,800)")
    parser.add_argument("--partitions", type=int, help="state partitions on local disk (default 50: ~103k files)")
    parser.add_argument("--s3-partitions", type=int, help="state partitions on the S3 server (default 5)")
    parser.add_argument("--repeats", type=int, help="rounds of (plan, listing) after a warm-up (default 3)")
    parser.add_argument("--progress-commits", type=int, help="commits of the week's progress rows (default 2,016)")
    parser.add_argument("--reads", type=int, default=7, help="fast-audit progress reads timed per side (default 7)")
    parser.add_argument("--workdir", help="where the homes go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the homes afterwards")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"retention benchmark: ignoring {unknown} (options of the other benchmarks)")
    args.batches = args.batches or (200 if args.quick else 1800)
    args.partitions = args.partitions or 50
    args.s3_partitions = args.s3_partitions or 5
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.progress_commits = args.progress_commits or (200 if args.quick else 2016)
    return args


def checkpoint_files(batches: int, partitions: int) -> dict[str, bytes]:
    """relative path -> bytes of a checkpoint as the HDFS provider writes it (1 operator, `partitions`)."""
    start = 1767225600000
    conf = {"spark.sql.shuffle.partitions": str(partitions), "spark.sql.streaming.stateStore.providerClass": PROVIDER}
    files = {"metadata": json.dumps({"id": "00000000-0000-0000-0000-000000000001"}).encode()}
    for b in range(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": start + 10_000 * b, "conf": conf}
        files[f"offsets/{b}"] = f"v1\n{json.dumps(meta)}\n{{\"logOffset\":{b}}}".encode()
        files[f"commits/{b}"] = b'v1\n{"nextBatchWatermarkMs":0}'
        for p in range(partitions):
            files[f"state/0/{p}/{b + 1}.delta"] = b"x" * 64
            if (b + 1) % 10 == 0:
                files[f"state/0/{p}/{b + 1}.snapshot"] = b"y" * 256
    return files


def write_tree(root: str, files: dict[str, bytes]) -> None:
    fs, base = filesystem(root)
    if "://" not in root:
        for rel, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
            with open(os.path.join(base, rel), "wb") as handle:
                handle.write(data)
        return
    fs.pipe({f"{base}/{rel}": data for rel, data in files.items()})


def make_home(home: str, batches: int, partitions: int) -> int:
    layout = Layout(home)
    files = checkpoint_files(batches, partitions)
    write_tree(layout.checkpoint(JOB), files)
    buffer = ProgressBuffer(layout, FlushSettings(flush_seconds=3600, flush_rows=100))
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for b in range(200):
        buffer.add(progress.progress_row(_event(QUERIES[0], b, at + timedelta(seconds=10 * b)), JOB, "bench"))
    buffer.close()
    return len(files)


def _event(query: str, batch: int, at: datetime) -> dict:
    return {"name": query, "id": query, "runId": "bench", "batchId": batch, "timestamp": at.isoformat(),
            "numInputRows": 10, "batchDuration": 50, "durationMs": {"triggerExecution": 50},
            "stateOperators": [{"operatorName": "dedupeWithinWatermark", "numRowsTotal": batch, "numRowsUpdated": 1}],
            "sources": [{"description": "files", "startOffset": batch, "endOffset": batch + 1, "numInputRows": 10}]}


def timed(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def plan_vs_listing(home: str, repeats: int) -> tuple[float, float, int, int]:
    """(median plan seconds, median listing seconds, files listed, planned items)."""
    os.environ["STATEOPS_HOME"] = home
    scope = retention_scope(Environment.from_env(layout=Layout.from_env()))
    fs, base = filesystem(home)

    def listing() -> int:
        fs.invalidate_cache()
        return len(fs.find(base, detail=True))

    def plan():
        fs.invalidate_cache()
        return retention.make_plan(scope)
    count, items = listing(), len(plan().items)  # warm-up
    sides: dict[str, list[float]] = {"plan": [], "listing": []}
    for r in range(repeats):
        for name in (("plan", "listing") if r % 2 == 0 else ("listing", "plan")):
            sides[name].append(timed(plan if name == "plan" else listing))
    return statistics.median(sides["plan"]), statistics.median(sides["listing"]), count, items


def s3_row(root: str, args: argparse.Namespace) -> list[object] | None:
    """Plan vs listing on moto's S3 server (its own process on loopback: tests.support.servers.moto); None without moto."""
    try:
        import moto.server  # noqa: F401 - only checks that the server is installed
        import s3fs
    except ImportError as err:
        print(f"  S3 skipped: {err}")
        return None
    from tests.support.servers.moto import moto_s3

    with moto_s3() as env:
        env = {**env, "STATEOPS_CONTROL_HOME": os.path.join(root, "control")}
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            s3fs.S3FileSystem.clear_instance_cache()
            s3fs.S3FileSystem().mkdir("bench")
            url = "s3://bench/home"
            make_home(url, args.batches, args.s3_partitions)
            plan_s, list_s, listed, items = plan_vs_listing(url, args.repeats)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            s3fs.S3FileSystem.clear_instance_cache()
    return ["S3 (moto, loopback)", f"{listed:,}", items, f"{plan_s:.2f}", f"{list_s:.2f}", f"{plan_s / list_s:.1f}"]


def progress_week(root: str, commits: int, reads: int) -> dict[str, object]:
    home = os.path.join(root, "progress-week")
    layout = Layout(home)
    os.makedirs(home)
    group = -(-WEEK_ROWS // commits)
    buffer = ProgressBuffer(layout, FlushSettings(flush_seconds=3600, flush_rows=group))
    start = datetime.now(timezone.utc) - timedelta(days=7)
    began = time.perf_counter()
    for b in range(WEEK_ROWS // 2):
        for query in QUERIES:
            buffer.add(progress.progress_row(_event(query, b, start + timedelta(seconds=10 * b)), JOB, "bench"))
    buffer.close()
    written = time.perf_counter() - began
    table = layout.ops_table(progress.TABLE)

    def files() -> tuple[int, int]:
        data = sum(1 for _, _, names in os.walk(table) for n in names if n.endswith(".parquet"))
        log = len(os.listdir(os.path.join(table, "_delta_log")))
        return data, log

    def read_times() -> list[float]:
        return [timed(lambda: recent_progress(layout, QUERIES[0], 20)) for _ in range(reads)]
    before_files, before = files(), read_times()
    config = os.path.join(root, "ops-policy.toml")
    with open(config, "w") as handle:
        handle.write(OPS_POLICY)
    os.environ["STATEOPS_HOME"] = home
    scope = retention_scope(Environment.from_env(layout=layout, config_path=config))
    for _ in range(2):  # the second run vacuums the files the first run's compaction replaced
        report = retention.apply(scope, retention.make_plan(scope), actor="bench", fresh=True)
        assert report.ok, report.render()
    after_files, after = files(), read_times()
    return {"rows": WEEK_ROWS, "commits": buffer.commits, "write_s": written, "before_files": before_files,
            "after_files": after_files, "before_ms": statistics.median(before) * 1000,
            "after_ms": statistics.median(after) * 1000}


def main(argv: Sequence[str] | None = None, spark=None) -> Report:
    args = parse_args(argv)
    print(f"retention benchmark: {machine()}", flush=True)
    report = Report("retention")
    rows = []
    with workdir(args) as root:
        home = os.path.join(root, "local-home")
        written = make_home(home, args.batches, args.partitions)
        plan_s, list_s, listed, items = plan_vs_listing(home, args.repeats)
        rows.append(["local disk", f"{listed:,}", items, f"{plan_s:.2f}", f"{list_s:.2f}", f"{plan_s / list_s:.1f}"])
        print(f"  local: {written:,} checkpoint files, plan {plan_s:.2f} s, listing {list_s:.2f} s", flush=True)
        s3 = s3_row(root, args)
        if s3 is not None:
            rows.append(s3)
        report.table(f"plan vs bare listing, median of {args.repeats} after a warm-up ({args.batches} batches)",
                     ["storage", "files", "items", "plan s", "listing s", "ratio"], rows)
        week = progress_week(root, args.progress_commits, args.reads)
        report.table(f"fast audit's progress read, a week at 10 s ({week['rows']:,} rows, {week['commits']:,} commits, "
                     f"written in {week['write_s']:.0f} s), median of {args.reads}",
                     ["table", "data files", "log files", "read ms"],
                     [["before compaction", *week["before_files"], f"{week['before_ms']:.0f}"],
                      ["after retention", *week["after_files"], f"{week['after_ms']:.0f}"],
                      ["ratio before/after", "", "", f"{week['before_ms'] / week['after_ms']:.1f}"]])
    print(f"\nfinished: load average {machine().rsplit('load average ', 1)[-1]}")
    return report


if __name__ == "__main__":
    main()
