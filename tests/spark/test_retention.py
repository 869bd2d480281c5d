"""Retention on checkpoint histories made by real queries (tests/retention_support.py), over many random
policies: every kept query restarts and its state, read with Spark's state reader, is what it was; every
promised rewind point still restores (the state reader loads it, and a copy cut back to it runs a batch);
the plan's byte count is what the file system lost; old archives and orphans go per policy, the last
verified archive and unfinished ones never.

Each policy is applied to a fresh copy of the same history. The file-level oracle (DESIGN.md's list of what
a restart needs) runs for every policy; Spark's state reader and restarts for the most aggressive policy
and one random one (they cost a JVM job each).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.retention import retention_scope
from jobs.runner import run_job
from stateops import actions, progress, retention
from stateops.delta import read_table
from stateops.layout import Layout
from stateops.retention.model import ARCHIVE_TREE, DELETE_FILES, DELETE_TREE
from tests.retention_support import ARCHIVES, JOBS, ORPHAN, build_history, needs_oracle, state_rows

pytestmark = pytest.mark.spark

POLICIES = 8
AGGRESSIVE = {"min_batches": 1, "keep_archives": 0, "keep_archives_for": "0 seconds", "rewind_batches": 0,
              "rewind_within": "0 seconds", "orphan_idle": "1 day", "orphan_action": "archive", "compact": True,
              "vacuum_after": "0 hours", "log_retention": "0 seconds", "progress_horizon": "1 day",
              "progress_old_rows": "rollup"}


def random_policy(rng: random.Random) -> dict:
    return {"min_batches": rng.choice([1, 2, 3, 100]), "keep_archives": rng.choice([0, 1, 2, 5]),
            "keep_archives_for": rng.choice(["0 seconds", "15 days", "45 days"]),
            "rewind_batches": rng.choice([0, 2, 5, 50]), "rewind_within": rng.choice(["0 seconds", "30 days"]),
            "orphan_idle": rng.choice(["1 day", "60 days"]), "orphan_action": rng.choice(["archive", "delete", "keep"]),
            "compact": rng.choice([True, False]), "vacuum_after": rng.choice(["0 hours", "168 hours"]),
            "log_retention": rng.choice(["0 seconds", "7 days"]), "progress_horizon": rng.choice(["1 day", "90 days"]),
            "progress_old_rows": rng.choice(["rollup", "drop", "keep"])}


def write_config(path: Path, policy: dict) -> str:
    def value(v):
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()
    jobs = ("keep_archives", "keep_archives_for", "rewind_batches", "rewind_within")
    ops = ("compact", "vacuum_after", "log_retention", "progress_horizon", "progress_old_rows")
    lines = ["[retention]"] + [f"{k} = {value(policy[k])}" for k in jobs + ("orphan_idle", "orphan_action")]
    lines += ["[retention.ops_tables]"] + [f"{k} = {value(policy[k])}" for k in ops] + ["compact_min_files = 2"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory) -> Path:
    """The history, moved aside: a copy put back at the path it was built at restarts like the original (the
    file source's log names input files by absolute path, and a restart reads the last batch's files again)."""
    root = tmp_path_factory.mktemp("retention")
    build_history(spark, root / "home")
    os.rename(root / "home", root / "history")
    return root / "history"


def files_of(home: Path) -> dict[str, int]:
    return {str(p.relative_to(home)): p.stat().st_size for p in home.rglob("*") if p.is_file()}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_floor(home: Path, job_checkpoint: Path, policy: dict) -> tuple[int, int]:
    """(floor, latest) from the policy alone, on the history as built (every batch is recent and restorable
    from its first batch on: the oracle checks that too)."""
    commits = sorted(int(p.name) for p in (job_checkpoint / "commits").iterdir() if p.name.isdigit())
    latest = commits[-1]
    keep = max(policy["min_batches"], policy["rewind_batches"], 1)
    floor = latest - keep + 1
    if policy["rewind_within"] != "0 seconds":
        floor = commits[0]
    return max(floor, commits[0]), latest


def expected_archives(policy: dict) -> set[str]:
    """The archives that must remain: newest keep_archives, younger than keep_archives_for, unfinished, and
    the newest one that verifies (a-young: a-broken is newer only than the others, and fails its checksum)."""
    days = {"0 seconds": 0, "15 days": 15, "45 days": 45}[policy["keep_archives_for"]]
    ranked = sorted(ARCHIVES, key=lambda a: ARCHIVES[a][0])  # newest first
    kept = set(ranked[:policy["keep_archives"]]) | {a for a, (age, _, _) in ARCHIVES.items() if age < days}
    kept |= {a for a, (_, finished, _) in ARCHIVES.items() if not finished} | {"a-young"}
    return kept


def apply_policy(history: Path, copy: Path, policy: dict, monkeypatch):
    shutil.copytree(history, copy, symlinks=True)
    monkeypatch.setenv("STATEOPS_SPARK_CONF",
                       json.dumps({"spark.sql.streaming.minBatchesToRetain": str(policy["min_batches"])}))
    scope = retention_scope(Layout(str(copy)), write_config(copy.parent / f"{copy.name}.toml", policy))
    before = files_of(copy)
    plan = retention.make_plan(scope)
    report = retention.apply(scope, plan, actor="property-test")
    return scope, plan, report, before, files_of(copy)


def check_policy(history: Path, copy: Path, policy: dict, scope, plan, report, before, after) -> None:
    assert report.ok, report.render()
    # Bytes: everything the file system lost outside the Delta tables is exactly what the plan said it
    # frees, plus what an orphan's archive moved (moved, not freed: it reappears under ops/_orphans).
    tables = ("ops/tables/", "tables/")
    gone = {rel: size for rel, size in before.items() if rel not in after}
    moved = sum(i.details.get("bytes_moved", 0) for i in plan.items if i.action == ARCHIVE_TREE)
    planned = sum(i.bytes for i in plan.items if i.action in (DELETE_FILES, DELETE_TREE))
    assert sum(s for r, s in gone.items() if not r.startswith(tables)) == planned + moved
    assert report.bytes - sum(r.bytes for r in report.results if r.target.startswith(str(copy / "ops/tables"))
                              or r.target.startswith(str(copy / "tables"))) == planned
    for item in plan.items:  # every file a plan lists is gone, table files included
        for rel, size in item.paths:
            path = os.path.relpath(os.path.join(item.target, rel), copy)
            assert path not in after and before[path] == size, (item.rule, path)
    # Every promised batch of every job's checkpoints restores, by the files (DESIGN.md's list).
    for job in JOBS:
        for checkpoint in (copy / "checkpoints" / job, copy / "checkpoints" / "_deadletter" / job):
            floor, latest = expected_floor(copy, history / checkpoint.relative_to(copy), policy)
            for batch in range(floor, latest + 1):
                assert needs_oracle(history / checkpoint.relative_to(copy), batch) == [], (checkpoint, batch)
                assert needs_oracle(checkpoint, batch) == [], (policy, checkpoint, batch)
    # Archives: exactly the expected ones remain.
    remaining = {p.name for p in (copy / "ops" / "user_activity" / "archives").iterdir()}
    assert remaining == expected_archives(policy), policy
    # The orphan, per policy.
    orphan = copy / "checkpoints" / ORPHAN
    acted = policy["orphan_idle"] == "1 day" and policy["orphan_action"] != "keep"
    assert orphan.exists() == (not acted)
    if acted and policy["orphan_action"] == "archive":
        [archive] = list((copy / "ops" / "_orphans" / "archives").iterdir())
        manifest = json.loads((archive / "manifest.json").read_text())
        original = history / "checkpoints" / ORPHAN
        assert {f["path"]: (f["size"], f["sha256"]) for f in manifest["files"]} == \
            {str(p.relative_to(original)): (p.stat().st_size, sha(p)) for p in original.rglob("*") if p.is_file()}
        assert all(sha(archive / "checkpoint" / f["path"]) == f["sha256"] for f in manifest["files"])
    # Temp files of interrupted writes and a checksum of nothing are gone (no lease was held).
    offsets = copy / "checkpoints" / "order_payments" / "offsets"
    assert not [p for p in offsets.iterdir() if p.name.endswith(".tmp") or p.name == ".99.crc"]
    # Progress rows past the horizon: rolled up (every batch counted once) or dropped or kept.
    layout = Layout(str(copy))
    month_ago = datetime.now(timezone.utc) - timedelta(days=30)
    old = [r for r in progress.read(layout).to_pylist() if r["timestamp"] < month_ago]
    horizon_acts = policy["progress_horizon"] == "1 day" and policy["progress_old_rows"] != "keep"
    assert (len(old) == 0) == horizon_acts
    rollup = read_table(layout.ops_table("progress_rollup"))
    if horizon_acts and policy["progress_old_rows"] == "rollup":
        assert sum(rollup["batches"].to_pylist()) == 6
    # Every item is journaled before and after, with its rule, path and the run id.
    journal = [r for r in actions.read(layout, action="retention") if r["run_id"] == report.run_id]
    for item in plan.items:
        phases = [r["phase"] for r in journal if r["details"]["item_id"] == item.item_id]
        assert phases == ["started", "done"], (item.item_id, phases)
        assert all(r["details"]["rule"] == item.rule and r["details"]["path"] == item.target
                   for r in journal if r["details"]["item_id"] == item.item_id)


def _cut(checkpoint: Path, batch: int) -> None:
    """Rewind a stopped checkpoint's logs to `batch` (later state versions are written again as the batches re-run)."""
    for folder in ("offsets", "commits"):
        for entry in (checkpoint / folder).iterdir():
            number = entry.name.strip(".").split(".")[0]
            if number.isdigit() and int(number) > batch:
                entry.unlink()


def _runs_a_batch(spark, home: Path, job: str, after: int) -> None:
    layout = Layout(str(home))
    generate(layout, GeneratorConfig(events=60, files=1, users=10, orders=10, seed=99,
                                     start="2026-01-01T03:00:00+00:00"))
    run_job(spark, load_jobs(None, layout)[job], layout)
    committed = sorted(int(p.name) for p in (home / "checkpoints" / job / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] > after, (job, home, committed)


def restart_checks(spark, history: Path, home: Path, policy: dict, restarts: bool) -> None:
    """Spark's view of a home retention was applied to (at the history's own path): the state at the latest
    and at the oldest promised batch reads back as before; and with `restarts`, each query restarts from its
    latest batch, and, cut back to the oldest promised batch, restarts from there."""
    applied = home.parent / "applied"
    if restarts:
        shutil.copytree(home, applied, symlinks=True)
    floors = {}
    for job in JOBS:
        floor, latest = expected_floor(home, history / "checkpoints" / job, policy)
        floors[job] = (floor, latest)
        for batch in sorted({floor, latest}):
            assert state_rows(spark, str(home / "checkpoints" / job), batch) == \
                state_rows(spark, str(history / "checkpoints" / job), batch), (job, batch)
        if restarts:
            _runs_a_batch(spark, home, job, latest)
    if not restarts:
        return
    shutil.rmtree(home)
    os.rename(applied, home)
    for job, (floor, _) in floors.items():
        _cut(home / "checkpoints" / job, floor)
        _runs_a_batch(spark, home, job, floor)


def test_random_policies_keep_every_promised_restart(spark, history, tmp_path, monkeypatch):
    rng = random.Random(20261122)
    policies = [AGGRESSIVE] + [random_policy(rng) for _ in range(POLICIES - 1)]
    for number, policy in enumerate(policies):
        spark_checked = number < 2
        copy = history.parent / "home" if spark_checked else tmp_path / f"home-{number}"
        scope, plan, report, before, after = apply_policy(history, copy, policy, monkeypatch)
        check_policy(history, copy, policy, scope, plan, report, before, after)
        if spark_checked:
            restart_checks(spark, history, copy, policy, restarts=number == 0)
        shutil.rmtree(copy)
