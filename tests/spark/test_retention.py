"""Retention on checkpoint histories made by real queries (tests/retention_support.py), over many random
policies: every kept query restarts and its state, read with Spark's state reader, is what it was; every
promised rewind point still restores (the recovery runbook's rewind check passes, the state reader loads it,
and a copy rewound to it by the runbook's surgery runs a batch);
the plan's byte count is what the file system lost; old archives and orphans go per policy, the last
verified archive and unfinished ones never.

Each policy is applied to a fresh copy of the same history. The file-level oracle (DESIGN.md's list of what
a restart needs) runs for every policy; Spark's state reader and restarts for the most aggressive policy
and one random one (they cost a JVM job each). Then: the refusals (one line each), an archive whose
runbook is running, the Dagster asset on a real instance, and the same on moto's S3 server.
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
from fsspec.implementations.local import LocalFileSystem

from stateops.jobs.definition.environment import Environment, load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.retention import retention_scope
from stateops.jobs.runtime.runner import run_job
from stateops import actions, progress, retention
from stateops.delta import read_table
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.layout import Layout
from stateops.checkpoints.rewind import rewind, rewind_problems
from stateops.retention.model import ARCHIVE_TREE, DELETE_FILES, DELETE_TREE
from stateops.control import ControlSettings
from tests.support.retention_history import ARCHIVES, JOBS, ORPHAN, needs_oracle, state_rows
from tests.support.tiers import trials

pytestmark = pytest.mark.spark

POLICIES = trials(2, full=8)  # random policies: the aggressive one and random ones (each checked in full)
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
    config = write_config(copy.parent / f"{copy.name}.toml", policy)
    scope = retention_scope(Environment.from_env(layout=Layout(str(copy)), config_path=config))
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
    covered = {os.path.relpath(os.path.join(i.target, rel), copy) for i in plan.items for rel, _ in i.paths}
    trees = tuple(os.path.relpath(i.target, copy) + "/" for i in plan.items if i.action in (DELETE_TREE, ARCHIVE_TREE))
    unplanned = {r: s for r, s in gone.items() if not r.startswith(tables + trees) and r not in covered}
    assert sum(s for r, s in gone.items() if not r.startswith(tables)) == planned + moved, unplanned
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
                if batch < latest:  # the recovery runbook's own check before a rewind
                    assert rewind_problems(Checkpoint(str(checkpoint)), batch) == [], (policy, checkpoint, batch)
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


def _runs_a_batch(spark, home: Path, job: str, after: int) -> None:
    layout = Layout(str(home))
    generate(layout, GeneratorConfig(events=60, files=1, users=10, orders=10, seed=99,
                                     start="2026-01-01T03:00:00+00:00"))
    run_job(spark, load_jobs(None, layout)[job], layout, settings=read_settings())
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
        rewind(str(home / "checkpoints" / job), floor)  # the recovery runbook's rewind surgery
        _runs_a_batch(spark, home, job, floor)


@pytest.mark.long  # the default run: every rule's refusals and a plan applied through Dagster (this module), retention on 3.5 checkpoints against the reader (test_spark35_checkpoints), the store matrix's history removed (test_store_matrix)
def test_random_policies_keep_every_promised_restart(spark, retention_history, tmp_path, monkeypatch):
    history = retention_history
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


# --- refusals (one line each) ---------------------------------------------------------------------------

def _one_line(text: str) -> str:
    text = text.strip()
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


def _cli(*args: str):
    from click.testing import CliRunner

    from stateops.cli.main import main
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_apply_without_yes_and_missing_roots_refuse_in_one_line(retention_home, tmp_path):
    home = retention_home
    before = files_of(home)
    result = _cli("--home", str(home), "retention", "apply")
    assert result.exit_code == 2 and "needs --yes" in _one_line(result.output)
    assert files_of(home) == before
    missing = tmp_path / "nowhere"
    for command in (("inventory",), ("retention", "plan"), ("retention", "apply", "--yes")):
        result = _cli("--home", str(missing), *command)
        assert result.exit_code == 2, result.output
        assert f"the StateOps home {missing} does not exist" in _one_line(result.output)
    # A job whose checkpoint is configured outside the home, on a root that is not there.
    config = tmp_path / "outside.toml"
    config.write_text(f'[jobs.user_activity]\ncheckpoint = "{tmp_path}/unmounted/user_activity"\n')
    result = _cli("--home", str(home), "--config", str(config), "retention", "plan")
    assert result.exit_code == 2 and "checkpoint root" in _one_line(result.output)
    assert "does not exist" in result.output and files_of(home) == before


def test_path_escapes_in_a_saved_plan_are_refused(retention_home, tmp_path):
    """A saved plan edited to reach outside the roots: through `..`, and through a symlink inside the home
    that points outside. Both items are refused in one line each, the outside files stay."""
    home = retention_home
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not retention's")
    os.symlink(outside, home / "checkpoints" / "order_payments" / "linked")
    scope = retention_scope(Environment.from_env(layout=Layout(str(home))))
    plan = retention.make_plan(scope).to_dict()
    [temp] = [i for i in plan["items"] if i["rule"] == "temp_files" and i["job"] == "order_payments"]
    dotted = {**temp, "item_id": "x1", "target": f"{temp['target']}/../../../../outside", "paths": [["precious", 15]]}
    linked = {**temp, "item_id": "x2", "target": f"{temp['target']}/linked", "paths": [["precious", 15]]}
    plan["items"] = [dotted, linked]
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(plan))
    result = _cli("--home", str(home), "retention", "apply", "--yes", "--plan", str(saved), "--json")
    assert result.exit_code == 2, result.output
    report = json.loads(result.output)
    reasons = {r["item_id"]: _one_line(r["reason"]) for r in report["results"]}
    assert {r["outcome"] for r in report["results"]} == {"refused"}
    assert "the path contains '..'" in reasons["x1"]
    assert f"outside the roots (resolves to {outside.resolve()})" in reasons["x2"]
    assert (outside / "precious").read_text() == "not retention's"
    # The planner itself never lists what the symlink leads to.
    fresh = retention.make_plan(scope)
    assert not [i for i in fresh.items for rel, _ in i.paths if "linked" in rel]


def test_a_hand_edited_plan_deletes_nothing_the_plan_command_would_not_plan(retention_home, tmp_path):
    """Issue 20 item 4: an `orphan_checkpoint` `delete_tree` item pointed at `tables/user_activity` deleted the
    job's output table. A plan file is a request: each item is admitted only as a fresh plan has it. Forged
    items (a job's sink table, with and without the job's name; an ops table; the landing zone; a row cutoff
    moved into the future; a needed file added to a real item) are refused, or narrowed, one line each; the
    real items still apply; the tables, input and needed files are all there after, and the exit code is 2."""
    home = retention_home
    config = write_config(tmp_path / "delete-orphans.toml", {**AGGRESSIVE, "orphan_action": "delete"})
    config_text = open(config).read().replace("[retention.ops_tables]",
                                              'deadletter_keep = "1 seconds"\n[retention.ops_tables]')
    open(config, "w").write(config_text)
    layout = Layout(str(home))
    scope = retention_scope(Environment.from_env(layout=layout, config_path=config))
    plan = retention.make_plan(scope).to_dict()
    [orphan] = [i for i in plan["items"] if i["rule"] == "orphan_checkpoint" and i["action"] == DELETE_TREE
                and i["target"].endswith(ORPHAN)]
    [history_item] = [i for i in plan["items"] if i["rule"] == "checkpoint_history"
                      and i["target"] == layout.checkpoint("user_activity")]
    [dead] = [i for i in plan["items"] if i["rule"] == "deadletter_retention" and i["job"] == "user_activity"]
    sink, progress_table = layout.table("user_activity"), layout.ops_table("progress")
    commits = home / "checkpoints" / "user_activity" / "commits"
    latest = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    needed = (f"commits/{latest}", (commits / str(latest)).stat().st_size)
    forged = {
        "f-sink": {**orphan, "target": sink},
        "f-sink-as-job": {**orphan, "target": sink, "job": "user_activity"},
        "f-ops": {**orphan, "target": progress_table},
        "f-landing": {**orphan, "target": layout.landing("events")},
        "f-future": {**dead, "details": {**dead["details"], "cutoff": "2999-01-01T00:00:00+00:00"}},
        "f-needed": {**history_item, "paths": history_item["paths"] + [list(needed)]},
        "f-orphan": orphan,
    }
    plan["items"] = [{**item, "item_id": item_id} for item_id, item in forged.items()]
    saved = tmp_path / "forged.json"
    saved.write_text(json.dumps(plan))
    before_rows = {uri: read_table(uri).num_rows for uri in (sink, progress_table)}
    dead_rows = read_table(layout.deadletter_table("user_activity")).num_rows
    landing_before = files_of(home / "landing")

    result = _cli("--home", str(home), "--config", config, "retention", "apply", "--yes", "--plan", str(saved),
                  "--json")
    assert result.exit_code == 2, result.output
    results = {r["item_id"]: r for r in json.loads(result.output)["results"]}
    outcomes = {item_id: r["outcome"] for item_id, r in results.items()}
    assert outcomes == {"f-sink": "refused", "f-sink-as-job": "refused", "f-ops": "refused", "f-landing": "refused",
                        "f-future": "done", "f-needed": "done", "f-orphan": "done"}
    reasons = {item_id: _one_line(r["reason"]) for item_id, r in results.items() if r["outcome"] == "refused"}
    assert "which touches user_activity's" in reasons["f-sink"]
    assert "would not plan orphan_checkpoint/delete_tree" in reasons["f-sink-as-job"]
    assert "ops_vacuum/vacuum" in reasons["f-ops"] and "not orphan_checkpoint/delete_tree" in reasons["f-ops"]
    assert "landing zones" in reasons["f-landing"]
    # The untouched: both tables whole, the input as it was, the latest commit a restart needs.
    assert {uri: read_table(uri).num_rows for uri in (sink, progress_table)} == before_rows
    assert files_of(home / "landing") == landing_before
    assert (commits / str(latest)).is_file()
    # The real items applied as planned: the orphan is gone, the history item freed what the plan listed,
    # and only the dead letters before the plan's own cutoff went (none was recorded after it).
    assert not (home / "checkpoints" / ORPHAN).exists()
    assert results["f-needed"]["bytes"] == history_item["bytes"]
    assert results["f-future"]["details"]["rows"] == dead["details"]["rows"] == dead_rows


def test_a_second_concurrent_run_is_refused(retention_home):
    """Another process holds the root's retention lock: apply refuses in one line naming that run, and
    nothing is changed; once it has exited (its lock released by the kernel) apply runs."""
    home = retention_home
    import subprocess
    import sys
    import time

    scope = retention_scope(Environment.from_env(layout=Layout(str(home))))
    plan = retention.make_plan(scope)
    assert plan.items
    ready = home.parent / "holder.ready"
    code = ("import sys, time, pathlib\n"
            "from stateops.layout import Layout\nfrom stateops.retention import lock\n"
            f"with lock.hold(Layout({str(home)!r}), {scope.roots_to_lock()!r}, run_id='run-elsewhere', actor='t'):\n"
            f"    pathlib.Path({str(ready)!r}).write_text('held')\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, env={**os.environ})
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the lock holder did not start"
            time.sleep(0.1)
        before = files_of(home)
        with pytest.raises(retention.RetentionLockedError) as caught:
            retention.apply(scope, plan, actor="second")
        assert "another retention run holds" in _one_line(str(caught.value))
        assert "run run-elsewhere" in str(caught.value)
        result = _cli("--home", str(home), "retention", "apply", "--yes")
        assert result.exit_code == 2 and "another retention run holds" in _one_line(result.output)
        assert files_of(home) == before
    finally:
        holder.communicate(b"", timeout=60)
    assert retention.apply(scope, retention.make_plan(scope), actor="after").ok


def test_a_checkpoint_whose_lease_is_held_keeps_its_temp_files(retention_home):
    """While order_payments' lease is held: the plan keeps its temp files (skipped, with the holder), and a
    plan made before the lease was taken has its temp-file item refused in one line; the files stay."""
    home = retention_home
    from stateops.control import acquire

    layout = Layout(str(home))
    scope = retention_scope(Environment.from_env(layout=layout))
    offsets = home / "checkpoints" / "order_payments" / "offsets"
    temps = sorted(p.name for p in offsets.iterdir() if p.name.endswith(".tmp") or p.name == ".99.crc")
    assert len(temps) == 2
    earlier = retention.make_plan(scope)
    target = str(home / "checkpoints" / "order_payments")
    assert [i for i in earlier.items if i.rule == "temp_files" and i.target == target]
    with acquire(layout, "order_payments", run_id="live-run", settings=ControlSettings.from_env()):
        now = retention.make_plan(scope)
        assert not [i for i in now.items if i.rule == "temp_files" and i.target == target]
        [skip] = [s for s in now.skipped if s["target"] == target and "temp file(s) kept" in s["reason"]]
        assert "live-run" in skip["reason"]
        report = retention.apply(scope, earlier, actor="test")
    [refused] = [r for r in report.results if r.rule == "temp_files" and r.target == target]
    assert refused.outcome == "refused" and "lease is held" in _one_line(refused.reason)
    assert sorted(p.name for p in offsets.iterdir() if p.name.endswith(".tmp") or p.name == ".99.crc") == temps


# --- Dagster --------------------------------------------------------------------------------------------

def test_dagster_retention_asset_plans_then_applies_when_configured(retention_home, dagster_instance, tmp_path,
                                                                  monkeypatch):
    """The `retention` asset on a real instance, through the job the Launchpad runs: without config it plans
    only (nothing under the checkpoints or archives changes) and shows bytes and files, total and per rule,
    as the plan made here says; with `apply: true` the file system loses exactly the bytes the plan's
    deleting rules list; the second run charts storage over time (a PNG next to the plan, linked from the metadata)."""
    home = retention_home
    from dagster import build_schedule_context

    from stateops.dagster.definitions import defs
    from stateops.dagster.resources import PathsResource
    from stateops.dagster.retention.asset import plans_dir, retention_schedule

    monkeypatch.setenv("STATEOPS_CONFIG", write_config(tmp_path / "aggressive.toml", AGGRESSIVE))
    scope = retention_scope(Environment.from_env(layout=Layout(str(home))))
    expected = retention.make_plan(scope)
    job = defs.resolve_job_def("retention_job")
    outside_ops = lambda files: {k: v for k, v in files.items() if not k.startswith("ops/")}  # noqa: E731
    before = files_of(home)

    def run(apply: bool) -> dict:
        result = job.execute_in_process(instance=dagster_instance, resources={"paths": PathsResource(home=str(home))},
                                        run_config={"ops": {"retention": {"config": {"apply": apply}}}})
        assert result.success
        [event] = result.get_asset_materialization_events()
        return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}

    planned = run(False)
    assert outside_ops(files_of(home)) == outside_ops(before)
    assert [p.name for p in (home / "ops" / "user_activity" / "archives").iterdir()]
    assert planned["applied"] is False and planned["plan_bytes"] == expected.bytes > 0
    assert planned["plan_files"] == expected.files
    for rule, totals in expected.per_rule().items():
        assert (planned[f"plan_bytes/{rule}"], planned[f"plan_files/{rule}"]) == (totals["bytes"], totals["files"])
        assert f"| {rule} | {totals['items']} | {totals['bytes']:,} | {totals['files']:,} |" in planned["per_rule"]
    assert planned["storage_bytes"] > 0
    deleting = ("checkpoint_history", "unreferenced_files", "temp_files", "archive_retention")
    before = files_of(home)
    applied = run(True)
    after = files_of(home)
    gone = sum(size for rel, size in before.items() if rel not in after and not rel.startswith(("ops/tables/", "tables/")))
    orphan_moved = next(i.details["bytes_moved"] for i in expected.items if i.rule == "orphan_checkpoint")
    assert gone == sum(applied.get(f"plan_bytes/{r}", 0) for r in deleting) + orphan_moved > 0
    assert applied["freed_bytes"] >= gone - orphan_moved
    plan_file = Path(applied["plan"])
    assert applied["chart"] == str(plan_file.with_suffix(".png"))  # a file, not an image in the event log
    assert json.loads(plan_file.read_text())["plan_id"] == applied["plan_id"]
    assert plan_file.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert plan_file.parent == Path(plans_dir(str(home)))
    # The daily schedule: its runs apply only when the config file says so.
    with build_schedule_context(instance=dagster_instance, resources={"paths": PathsResource(home=str(home))}) as ctx:
        request = retention_schedule().evaluate_tick(ctx).run_requests[0]
    assert request.run_config["ops"]["retention"]["config"]["apply"] is False


# --- object store ---------------------------------------------------------------------------------------

@pytest.mark.long  # retention on S3 in the long tier too (tests/e2e/test_s3_home.py: plan, apply, the job restarts)
def test_object_store_plan_and_apply_match_local_disk(retention_history, retention_s3_home, tmp_path, monkeypatch):
    """Inventory, plan and apply against S3 (moto on loopback) give the plan the same history gets on local
    disk, item for item; applying it leaves exactly the files the local apply leaves; the bytes the bucket
    lost are the plan's; the journal (`actions`, a Delta table in the bucket) has every item."""
    history = retention_history
    fs, url = retention_s3_home
    prefix = url.removeprefix("s3://")
    policy = {**AGGRESSIVE, "orphan_idle": "0 seconds"}  # an upload has no old mtimes to age the orphan by
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({"spark.sql.streaming.minBatchesToRetain": "1"}))
    config = write_config(tmp_path / "policy.toml", policy)
    local = tmp_path / "local"
    shutil.copytree(history, local, symlinks=True)
    local_scope = retention_scope(Environment.from_env(layout=Layout(str(local), str(tmp_path / "control-local")),
                                                       config_path=config))
    s3_scope = retention_scope(Environment.from_env(layout=Layout(url, str(tmp_path / "control")), config_path=config))

    inventory = retention.take_inventory(s3_scope).to_dict()
    local_inventory = retention.take_inventory(local_scope).to_dict()
    assert inventory["totals"]["checkpoints_bytes"] == local_inventory["totals"]["checkpoints_bytes"]
    assert [(c["job"], c["kind"], c["latest_committed_batch"], c["oldest_restorable_batch"], c["bytes"])
            for c in inventory["checkpoints"]] == \
        [(c["job"], c["kind"], c["latest_committed_batch"], c["oldest_restorable_batch"], c["bytes"])
         for c in local_inventory["checkpoints"]]
    assert {a["archive_id"] for a in inventory["archives"]} == set(ARCHIVES)

    def items(plan, home):
        return sorted((i.rule, i.action, os.path.relpath(i.target.split("://")[-1], home), i.paths, i.bytes)
                      for i in plan.items)
    s3_plan = retention.make_plan(s3_scope)
    local_plan = retention.make_plan(local_scope)
    assert items(s3_plan, prefix) == items(local_plan, str(local)) and s3_plan.items

    def listing(files: dict[str, int]) -> dict[str, int]:  # outside Delta tables (their rewrites differ)
        return {rel: size for rel, size in files.items() if not rel.startswith(("ops/tables/", "tables/"))
                and "/_orphans/" not in f"/{rel}"}

    def bucket() -> dict[str, int]:
        return {os.path.relpath(p, prefix): info["size"]
                for p, info in fs.find(prefix, detail=True).items()}
    fs.invalidate_cache()
    before = bucket()
    report = retention.apply(s3_scope, s3_plan, actor="s3-test")
    assert report.ok, report.render()
    local_report = retention.apply(local_scope, local_plan, actor="local-test")
    assert local_report.ok, local_report.render()
    fs.invalidate_cache()
    after = bucket()
    assert listing(after) == listing(files_of(local))
    moved = sum(i.details.get("bytes_moved", 0) for i in s3_plan.items if i.action == ARCHIVE_TREE)
    gone = sum(size for rel, size in listing(before).items() if rel not in after)
    assert gone == sum(i.bytes for i in s3_plan.items if i.action in (DELETE_FILES, DELETE_TREE)) + moved
    # Each archived orphan (a job's checkpoint and its dead-letter checkpoint alike) has its own archive
    # holding every file and byte the plan moved; on local disk too.
    for plan, reader in ((s3_plan, fs), (local_plan, LocalFileSystem())):
        archived = [i for i in plan.items if i.action == ARCHIVE_TREE]
        assert len({i.details["destination"] for i in archived}) == len(archived) >= 2
        for item in archived:
            manifest = json.loads(reader.cat(item.details["destination"].removeprefix("s3://") + "/manifest.json"))
            assert manifest["source"] == item.target
            assert (sum(f["size"] for f in manifest["files"]), len(manifest["files"])) == \
                (item.details["bytes_moved"], item.details["files_moved"])
    journal = [r for r in actions.read(Layout(url), action="retention") if r["run_id"] == report.run_id]
    assert sorted(r["details"]["item_id"] for r in journal if r["phase"] == "done") == \
        sorted(i.item_id for i in s3_plan.items)


def test_an_archive_whose_runbook_is_running_is_kept(retention_home, tmp_path):
    """The aggressive policy deletes every old finished archive but the newest verified one; an archive whose
    runbook holds its lock (the recovery journal's own lock) is kept, and goes at the next run after."""
    home = retention_home
    from stateops.recovery.journal import recovery_journal

    layout = Layout(str(home))
    config = write_config(tmp_path / "aggressive.toml", AGGRESSIVE)
    scope = retention_scope(Environment.from_env(layout=layout, config_path=config))
    folder = Path(layout.archives("user_activity")) / "a-old"
    with recovery_journal(layout, "user_activity", "a-old", str(folder), actor="test").held():
        plan = retention.make_plan(scope)
        assert str(folder) not in [i.target for i in plan.items]
        assert {a["archive_id"]: a["runbook_running"] for a in retention.take_inventory(scope).to_dict()["archives"]
                }["a-old"] is True
        assert retention.apply(scope, plan, actor="test").ok
    assert folder.is_dir()
    assert str(folder) in [i.target for i in retention.make_plan(scope).items if i.rule == "archive_retention"]
