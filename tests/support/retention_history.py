"""Checkpoint histories made by real queries for the retention tests, and the oracles they are judged by.

`build_history` runs the catalog's jobs (real queries, RocksDB, Delta sinks) over two generations of input
(two bounded runs each): `user_activity` with changelog checkpointing on, then off (changelogs, then a
snapshot zip with its SSTs per version), `order_payments` (a join: four stores) the other way round; then
`user_sessions`, whose checkpoints are renamed to a job the catalog does not have (an orphan) and aged.
It adds archives of `user_activity` made by the recovery runbook's archive code (manifest.json with files,
sizes and sha256, checkpoint/, report.json) of several ages, one of them unfinished and one corrupted, temp files of interrupted writes,
progress rows 40 days old, and files the progress table no longer uses (a compaction's).

The oracles never use the code under test: `needs_oracle` states DESIGN.md's "restarting from batch N
needs ..." directly on the files, `state_rows` is Spark's state reader, and byte counts come from the file
system.
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import time
import zipfile
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.storage import copies
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.sparkstate import join_state_format, readable_units
from stateops import progress
from stateops.layout import Layout
from tests.support.legacy_homes import run_deadletter_query
from stateops.checkpoints import archive as runbook_archive
from tests.support.audit_queries import with_conf

DAY = 86400
JOBS = ("user_activity", "order_payments")
ORPHAN = "retired_sessions"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
# archive id -> (age in days, finished, corrupted)
ARCHIVES = {"a-oldest": (60, True, False), "a-old": (40, True, False), "a-mid": (20, True, False),
            "a-broken": (10, True, True), "a-young": (2, True, False), "a-running": (50, False, False)}


def _spec(name: str):
    return replace(load_jobs()[name], shuffle_partitions=2)


def _age(path: Path, days: float) -> None:
    stamp = time.time() - days * DAY
    for root, _, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(root, name), (stamp, stamp))


def _archive(layout: Layout, job: str, archive_id: str, days: int, finished: bool, broken: bool) -> None:
    """An archive made by the recovery runbook's archive code: <archive root>/<id>/{manifest.json, checkpoint/,
    report.json when the runbook ended}."""
    folder = posixpath.join(layout.archives(job), archive_id)
    entries = copies.copy_tree(layout.checkpoint(job), posixpath.join(folder, runbook_archive.CHECKPOINT))
    created = datetime.now(timezone.utc) - timedelta(days=days)
    runbook_archive.write_json(posixpath.join(folder, runbook_archive.MANIFEST), {
        "archive_id": archive_id, "job": job, "created_at": created.isoformat(), "mode": "restore",
        "files": [e.__dict__ for e in entries], "total_bytes": sum(e.size for e in entries)})
    if finished:
        runbook_archive.write_json(posixpath.join(folder, runbook_archive.REPORT), {"outcome": "succeeded"})
    if broken:  # same size, other bytes: only a checksum finds it
        victim = Path(folder) / runbook_archive.CHECKPOINT / entries[-1].path
        data = bytearray(victim.read_bytes())
        data[0] ^= 0xFF
        victim.write_bytes(bytes(data))
    assert bool(runbook_archive.verify(layout.archives(job), archive_id)) == broken
    _age(Path(folder), days)


GENERATIONS = ("2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00")  # the start of each generation's input


def build_history(spark: SparkSession, home: Path, generations: int = len(GENERATIONS)) -> Layout:
    """The history; `generations=1` stops after the first (each job's store in one kind only: user_activity's
    changelogs, order_payments' snapshot zips), for the tests that need a history but not its change of kind."""
    layout = Layout(str(home))
    settings = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}
    for generation, start in enumerate(GENERATIONS[:generations]):
        generate(layout, GeneratorConfig(events=400, files=3, users=40, orders=80, start=start, minutes_per_file=20,
                                         duplicate_share=0.05, malformed_share=0.02, seed=11 + generation))
        # Changelogs, then snapshot zips (and SSTs) per version for one job; the other way round for the other.
        with_conf(spark, {**settings, CHANGELOG: str(generation == 0).lower()},
                  lambda: run_job(spark, _spec("user_activity"), layout, settings=read_settings()))
        with_conf(spark, {**settings, CHANGELOG: str(generation == 1).lower()},
                  lambda: run_job(spark, _spec("order_payments"), layout, settings=read_settings()))
        if generation == 0:
            run_job(spark, _spec("user_sessions"), layout, settings=read_settings())
            run_deadletter_query(spark, _spec("user_sessions"), layout)
            DeltaTable(layout.ops_table("progress")).optimize.compact()  # files a vacuum may remove later
    for job in ("user_activity", "order_payments"):  # homes from before one scan: the old dead-letter checkpoints
        run_deadletter_query(spark, _spec(job), layout)
    for folder in ("checkpoints", "checkpoints/_deadletter"):
        os.rename(home / folder / "user_sessions", home / folder / ORPHAN)
    _age(home / "checkpoints" / ORPHAN, 30)
    for archive_id, (days, finished, broken) in ARCHIVES.items():
        _archive(layout, "user_activity", archive_id, days, finished, broken)
    offsets = home / "checkpoints" / "order_payments" / "offsets"
    (offsets / ".3.0c6b1f0e-1a2b-4c3d-8e9f-000000000000.tmp").write_text("half a batch")
    (offsets / ".99.crc").write_bytes(b"crc of nothing")
    old = progress.read(layout).slice(0, 6).to_pylist()
    for row in old:
        row["timestamp"] = row["timestamp"] - timedelta(days=40)
    progress.append(layout, old)
    return layout


# --- oracles ------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^(\d+)\.(zip|changelog|delta|snapshot)$")


def needs_oracle(checkpoint: Path, batch: int) -> list[str]:
    """What a restart from `batch` needs and is missing, straight from DESIGN.md: offsets/N, offsets/N-1,
    commits/N, and for every state store folder the newest snapshot at or below N+1 (a RocksDB zip with
    every SST its metadata names) and every delta above it up to N+1."""
    missing = [p for p in (f"offsets/{batch}", f"commits/{batch}") + ((f"offsets/{batch - 1}",) if batch else ())
               if not (checkpoint / p).is_file()]
    state = checkpoint / "state"
    folders = {p.parent for p in state.rglob("*") if p.is_file() and _VERSION.match(p.name)} if state.exists() else set()
    for folder in sorted(folders):
        versions: dict[int, set[str]] = {}
        for p in folder.iterdir():
            match = _VERSION.match(p.name)
            if match:
                versions.setdefault(int(match.group(1)), set()).add(match.group(2))
        target = batch + 1
        base = max((v for v, kinds in versions.items() if v <= target and kinds & {"zip", "snapshot"}), default=0)
        if base and "zip" in versions[base]:
            with zipfile.ZipFile(folder / f"{base}.zip") as archive:
                text = archive.read("metadata").decode()
            meta = json.loads(next(line for line in text.splitlines() if line.startswith("{")))
            missing += [f"{folder}/SSTs/{f['dfsSstFileName']}" for f in meta.get("sstFiles", [])
                        if not (folder / "SSTs" / f["dfsSstFileName"]).is_file()]
        missing += [f"{folder}/{v}.delta|changelog" for v in range(base + 1, target + 1)
                    if not versions.get(v, set()) & {"changelog", "delta"}]
    return missing


def state_rows(spark: SparkSession, checkpoint: str, batch: int) -> dict[str, list[str]]:
    """Spark's state reader at `batch`: every (partition, key, value) of every operator and store, as text."""
    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    join_format = join_state_format(Checkpoint(checkpoint).batch_metadata(batch).get("conf", {}))
    out = {}
    for row in meta:
        for label, unit in readable_units(row.operatorId, row.stateStoreName, None, row.operatorName, join_format):
            options = {"path": checkpoint, "batchId": str(batch), **dict(unit)}
            frame = spark.read.format("statestore").options(**options).load()
            text = frame.select(F.to_json(F.struct("partition_id", "key", "value")).alias("row"))
            out[f"{row.operatorId}/{label}"] = sorted(r.row for r in text.collect())
    return out


def tree_bytes(path: Path, exclude: tuple[str, ...] = ()) -> int:
    total = 0
    for root, _, files in os.walk(path):
        if any(part in Path(root).relative_to(path).parts[:3] for part in exclude):
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total
