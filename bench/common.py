"""Shared by the benchmarks: one input per size, a fresh STATEOPS home per configuration, the checks that
a configuration really took effect, and the printed table.

Every configuration of one size reads a byte-identical copy of the same landing files (modification
times kept, so Spark reads them in the same order), one file per micro-batch. The first micro-batch of
each run is a warm-up (query planning, JIT, first state store load) and is excluded from the median.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from stateops.layout import Layout

from stateops.jobs.demo.generator import GeneratorConfig, generate

FULL_SIZES = (20_000, 200_000)
QUICK_SIZES = (1_000, 5_000)
FULL_FILES = 6
QUICK_FILES = 3
SHUFFLE_CONF = "spark.sql.shuffle.partitions"
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_SIZES} events per batch, {QUICK_FILES} batches per run")
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")),
                        help="events per micro-batch, comma-separated (default: %s)" % (FULL_SIZES,))
    parser.add_argument("--files", type=int, help=f"micro-batches per run (default {FULL_FILES})")
    parser.add_argument("--repeats", type=int, help="runs per configuration and size, alternating A B B A "
                        "(default 2; 1 with --quick)")
    parser.add_argument("--users", type=int, default=1000, help="distinct users (default 1000)")
    parser.add_argument("--workdir", help="where the temporary homes go (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the homes (checkpoints, tables) afterwards")
    args = parser.parse_args(argv)
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    args.files = args.files or (QUICK_FILES if args.quick else FULL_FILES)
    args.repeats = args.repeats or (1 if args.quick else 2)
    if args.files < 2:
        parser.error("--files must be at least 2 (the first batch is a warm-up)")
    return args


@contextmanager
def workdir(args: argparse.Namespace) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="stateops-bench-", dir=args.workdir)
    try:
        yield root
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def make_input(root: str, events_per_batch: int, files: int, users: int, name: str | None = None) -> Layout:
    """The landing files for one size: `files` micro-batches of `events_per_batch` events each."""
    source = Layout(os.path.join(root, name or f"input-{events_per_batch}"))
    generate(source, GeneratorConfig(events=events_per_batch * files, files=files, users=users,
                                     duplicate_share=0.02, seed=42))
    return source


def warm_up(root: str, users: int, run: Callable[[Layout], object], name: str = "warm-up") -> None:
    """One discarded run on a small input first, so JIT compilation, Python workers and native libraries
    load outside the measurements instead of inflating whichever configuration happens to run first."""
    source = make_input(root, 1_000, 3, users, name=f"{name}-input")
    run(new_home(root, name, source))


def new_home(root: str, name: str, source: Layout) -> Layout:
    """A fresh STATEOPS home holding a copy of `source`'s landing files (and nothing else)."""
    home = Layout(os.path.join(root, name))
    shutil.copytree(os.path.join(source.home, "landing"), os.path.join(home.home, "landing"))
    return home



def recorded_confs(checkpoint: str) -> dict[str, str]:
    """The SQL confs Spark recorded for the query in its first offsets entry (fixed per checkpoint)."""
    with open(os.path.join(checkpoint, "offsets", "0")) as handle:
        lines = handle.read().splitlines()
    return json.loads(lines[1]).get("conf", {})


def state_files(checkpoint: str) -> tuple[int, dict[str, int]]:
    """Partition directories of the first stateful operator, and state files by kind (extension)."""
    operator = os.path.join(checkpoint, "state", "0")
    partitions = [d for d in os.listdir(operator) if d.isdigit()]
    kinds: dict[str, int] = {}
    for _, _, names in os.walk(operator):
        for name in names:
            if name.startswith(".") or name.endswith(".crc"):
                continue
            ext = name.rsplit(".", 1)[-1] if "." in name else "(none)"
            if ext in ("delta", "snapshot", "changelog", "zip"):
                kinds[ext] = kinds.get(ext, 0) + 1
    return len(partitions), kinds


def check_effective(checkpoint: str, partitions: int, provider: str) -> str:
    """Fail unless the query really ran with `partitions` and `provider`; return a short evidence line."""
    confs = recorded_confs(checkpoint)
    recorded = (confs.get(SHUFFLE_CONF), confs.get(PROVIDER_CONF))
    dirs, kinds = state_files(checkpoint)
    rocksdb = "RocksDB" in provider
    expected_files = ("changelog",) if rocksdb else ("delta",)
    problems = []
    if recorded != (str(partitions), provider):
        problems.append(f"offsets log records {recorded}, expected {(str(partitions), provider)}")
    if dirs != partitions:
        problems.append(f"{dirs} state partition dirs, expected {partitions}")
    if not all(kinds.get(k) for k in expected_files) or (rocksdb and kinds.get("delta")) or \
            (not rocksdb and (kinds.get("changelog") or kinds.get("zip"))):
        problems.append(f"state files {kinds} do not match {provider.rsplit('.', 1)[-1]}")
    if problems:
        raise RuntimeError(f"configuration did not take effect for {checkpoint}: " + "; ".join(problems))
    return f"{dirs} partition dirs, files {kinds}"


def schedule(names: Sequence[str], size_index: int, repeats: int) -> list[str]:
    """Run order within one size: A B, then B A, ...; the next size starts the other way round."""
    order: list[str] = []
    for k in range(repeats):
        order += list(names) if (size_index + k) % 2 == 0 else list(names)[::-1]
    return order


@dataclass
class Measured:
    """Every run of one configuration on one size: micro-batch durations per run."""

    size: int
    config: str
    runs: list[list[int]] = field(default_factory=list)

    def add(self, durations_ms: list[int], files: int) -> None:
        if len(durations_ms) != files:
            raise RuntimeError(f"{self.config} at {self.size}: {len(durations_ms)} micro-batches with data, "
                               f"expected {files} (one per landing file)")
        self.runs.append(list(durations_ms))

    @property
    def warmup_ms(self) -> float | None:
        return statistics.median(r[0] for r in self.runs) if self.runs else None

    @property
    def steady(self) -> list[int]:
        """Every batch but each run's first (warm-up)."""
        return [d for r in self.runs for d in r[1:]]

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.steady) if self.steady else None


def ratio(slow: Measured, fast: Measured) -> float | None:
    if not slow.median_ms or not fast.median_ms:
        return None
    return slow.median_ms / fast.median_ms


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  " + "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))


def machine_facts() -> str:
    """CPUs (os.cpu_count), memory (/proc/meminfo), Java, Python, pyspark."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    with open("/proc/meminfo") as handle:
        mem_kb = int(handle.readline().split()[1])
    return (f"nproc {os.cpu_count()}; memory {mem_kb / 2**20:.1f} GiB; {java[0] if java else 'java ?'}; "
            f"Python {platform.python_version()}; pyspark {pyspark.__version__}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    return (f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {machine_facts()}; "
            f"load average {load_average()}")


def fmt_ms(value: float | None) -> str | None:
    return None if value is None else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}x"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[object]]


@dataclass
class Report:
    """What one benchmark measured, structured: `python -m bench --write` renders BENCHMARKS.md from it,
    exactly what the benchmark printed."""

    name: str
    description: str = ""
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        self.tables.append(Table(title, [str(h) for h in headers], [list(r) for r in rows]))
        print_table(title, headers, rows)

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(text, flush=True)


def sensor_ticks(name: str, ticks: int, warm_up: bool = True) -> tuple[list[float], object]:
    """Seconds of `ticks` ticks of one sensor of the code location (each with the cursor the one before left;
    after one discarded warm-up tick, unless `warm_up` is false) on a temporary Dagster instance, and the last
    tick's result."""
    import time

    from dagster import build_sensor_context, instance_for_test

    from stateops.dagster.definitions import defs
    from stateops.dagster.resources import default_resources

    repo = defs.get_repository_def()
    sensor = repo.get_sensor_def(name)
    timings, cursor, result = [], None, None
    with instance_for_test() as instance:
        for i in range(ticks + 1 if warm_up else ticks):
            with build_sensor_context(instance=instance, cursor=cursor, resources=default_resources(),
                                      repository_def=repo) as context:
                started = time.perf_counter()
                result = sensor(context)
                elapsed = time.perf_counter() - started
            cursor = result.cursor
            if i or not warm_up:
                timings.append(elapsed)
    return timings, result
