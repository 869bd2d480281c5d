"""What the next start of a query must load, from the checkpoint's files, and how long that will take.

A restart after committed batch N loads every store at version N+1 (stateops.checkpoints.restart): its latest
snapshot at or below it (RocksDB `<s>.zip` and the SST files it names, or the in-memory store's `<s>.snapshot`),
then replays every delta after it (`.changelog`, `.delta`). With RocksDB's changelog checkpointing a snapshot is
made only after `spark.sql.streaming.stateStore.minDeltasForSnapshot` deltas (10) and uploaded by the
maintenance thread (every `maintenanceInterval`, 60 s), so a job whose runs are shorter than that, or a long
interval, leaves more and more changelogs to replay; every runbook restart and every takeover pays for them.

The time comes from Spark's own numbers for the job's earlier restarts, kept by the progress table: on the
first batch after a start, RocksDB reports the stores it loaded from the checkpoint (`rocksdbNumLoadedFromDfs`),
the changelog files it replayed and their time, and the load's time, summed over the tasks; the rates are the
median over the starts. Spark reports these for a deduplication, a join and the custom operators; an aggregation
opens its store twice in the batch (restore, then save) and the second open resets them, so an aggregation's
restart is judged by the rates the job's other operators measured, else by the defaults below (measured on 2 cores, a local checkpoint, 2026-12-03: 561 ms for
30 changelogs of 1,000 keys, 84 ms per store opened; the default snapshot rate a local disk's). The tasks
loading the stores share the cores: the wall time is the task time over min(cores, partitions).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from stateops.checkpoints.listing import Tree, read_many
from stateops.checkpoints.restart import CheckpointFiles, is_checkpoint, load_references, parse, sizes

# Spark's RocksDB custom metrics of a load (RocksDBStateStoreProvider), summed over the batch's tasks.
LOADED = "rocksdbNumLoadedFromDfs"
LOAD_MS = "rocksdbLoadLatencyMs"
REPLAYED = "rocksdbNumReplayChangelogFiles"
REPLAY_MS = "rocksdbReplayChangeLogLatencyMs"
SNAPSHOT_INTERVAL = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
DEFAULT_REPLAY_MS_PER_FILE = 20.0
DEFAULT_OPEN_MS_PER_STORE = 85.0
DEFAULT_SNAPSHOT_BYTES_PER_SECOND = 200 * 2**20


@dataclass(frozen=True)
class StoreLoad:
    """One store's part of a restart: the snapshot it starts from (0: the empty store) and the deltas after it."""

    folder: str
    operator: int
    partition: int
    version: int
    snapshot: int
    snapshot_bytes: int
    changelogs: int
    changelog_bytes: int


@dataclass(frozen=True)
class Rates:
    """Load rates: measured on `restarts` of the job's own starts (0: the defaults), per task."""

    replay_ms_per_file: float
    open_ms_per_store: float
    snapshot_bytes_per_second: float
    restarts: int

    @property
    def source(self) -> str:
        return (f"measured by Spark on {self.restarts} earlier start(s) of this job" if self.restarts else
                "StateOps' defaults (Spark reported no load of this job's stores yet)")


def store_loads(files: CheckpointFiles) -> list[StoreLoad]:
    """Per store of the latest committed batch: what a start after it loads (needs the zips' references for
    RocksDB's snapshot bytes: load_references)."""
    if files.latest is None:
        return []
    version = files.latest + 1
    out = []
    for store in files.stores_at(files.latest):
        base = store.base(version)
        snapshot = store.snapshot(base) if base else None
        named = files.references.get(snapshot) or set() if snapshot else set()
        snap_rels = ([snapshot] if snapshot else []) + [store.immutable[n] for n in sorted(named)
                                                         if n in store.immutable]
        deltas = [p for v in range(base + 1, version + 1) if (p := store.delta(v))]
        out.append(StoreLoad(store.folder, store.operator, store.partition, version, base,
                             sizes(files.tree, snap_rels)[0], len(deltas), sizes(files.tree, deltas)[0]))
    return out


def measured_rates(progress: Iterable[Iterable[Mapping[str, Any]]]) -> Rates:
    """The job's load rates from its starts' progress rows (stateops.progress.operators of each row): per start, the
    time per changelog replayed and per store opened (the load's time but the replay's), over every operator Spark
    reported a load for; then the median over the starts, since a process's first load of RocksDB pays its native
    library and classes once (3.3 s against 0.9 s for the same four stores, measured) and one such start should not
    set the estimate of every later one."""
    per_file, per_store = [], []
    for operators in progress:
        loads = files = replay_ms = open_ms = 0
        for op in operators:
            metrics = op.get("custom_metrics") or {}
            if (metrics.get(LOADED) or 0) <= 0:
                continue
            loads += metrics[LOADED]
            files += metrics.get(REPLAYED) or 0
            replay_ms += metrics.get(REPLAY_MS) or 0
            open_ms += max(0, (metrics.get(LOAD_MS) or 0) - (metrics.get(REPLAY_MS) or 0))
        if loads:
            per_store.append(open_ms / loads)
            if files:
                per_file.append(replay_ms / files)
    return Rates(statistics.median(per_file) if per_file else DEFAULT_REPLAY_MS_PER_FILE,
                 statistics.median(per_store) if per_store else DEFAULT_OPEN_MS_PER_STORE,
                 DEFAULT_SNAPSHOT_BYTES_PER_SECOND, len(per_store))


@dataclass(frozen=True)
class RestartCost:
    """What a start after batch `batch` loads, and the estimate of its time."""

    batch: int | None
    stores: int
    snapshots: int                # stores that start from a snapshot (the others replay from the empty store)
    oldest_snapshot: int | None   # the oldest snapshot version a store starts from (None: none has one)
    snapshot_bytes: int
    changelogs: int
    most_changelogs: int          # the most a store replays
    changelog_bytes: int
    task_ms: int                  # the estimate, summed over the loading tasks (Spark's unit for its metrics)
    parallelism: int
    seconds: float                # the estimate's wall time
    rates: Rates

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rates"] = {**asdict(self.rates), "source": self.rates.source}
        out["summary"] = self.summary()
        return out

    def snapshot_interval(self, budget_seconds: float) -> int:
        """The most changelogs a store may keep after its snapshot (minDeltasForSnapshot) for a start within
        `budget_seconds`, at the same rates and snapshot sizes."""
        fixed = (self.stores * self.rates.open_ms_per_store
                 + 1000 * self.snapshot_bytes / self.rates.snapshot_bytes_per_second)
        room = budget_seconds * 1000 * self.parallelism - fixed
        per_changelog = self.stores * self.rates.replay_ms_per_file
        return max(1, math.floor(room / per_changelog)) if per_changelog else self.most_changelogs

    def summary(self) -> str:
        if not self.stores:
            return "a start loads no state"
        base = (f"snapshots from version {self.oldest_snapshot} ({self.snapshots} of {self.stores} stores, "
                f"{self.snapshot_bytes:,} bytes)" if self.snapshots else f"no snapshot ({self.stores} stores)")
        return (f"a start after batch {self.batch} loads {base} and replays {self.changelogs} changelog file(s) "
                f"({self.changelog_bytes:,} bytes, up to {self.most_changelogs} per store): about {self.seconds:.1f} s "
                f"on {self.parallelism} task(s) at once, {self.task_ms:,} ms of task time (rates: {self.rates.source})")


def estimate(loads: list[StoreLoad], rates: Rates, cores: int | None, batch: int | None) -> RestartCost:
    task_ms = sum(rates.open_ms_per_store + load.changelogs * rates.replay_ms_per_file
                  + 1000 * load.snapshot_bytes / rates.snapshot_bytes_per_second for load in loads)
    partitions = len({load.partition for load in loads})
    parallelism = max(1, min(cores or partitions or 1, partitions or 1))
    snapshots = [load.snapshot for load in loads if load.snapshot]
    return RestartCost(batch, len(loads), len(snapshots), min(snapshots, default=None),
                       sum(load.snapshot_bytes for load in loads), sum(load.changelogs for load in loads),
                       max((load.changelogs for load in loads), default=0), sum(load.changelog_bytes for load in loads),
                       round(task_ms), parallelism, round(task_ms / parallelism / 1000, 3), rates)


def restart_cost(checkpoint: str, progress: Iterable[Mapping[str, Any]], cores: int | None,
                 tree: Tree | None = None) -> RestartCost | None:
    """The estimate for `checkpoint` (one listing), None where it is no checkpoint or its stores use Spark's
    checkpoint format v2 (the commit log, not the files, decides which version is current)."""
    tree = tree if tree is not None else Tree.list(checkpoint)
    if not is_checkpoint(tree):
        return None
    files = parse(tree, read_many)
    if files.latest is None or any(store.unique_ids for store in files.stores):
        return None
    version = files.latest + 1
    load_references(files, read_many, lambda store: store.base(version))
    return estimate(store_loads(files), measured_rates(progress), cores, files.latest)
