"""The retention planner (stateops/retention/planner.py) on constructed inputs: `promised_floor` on checkpoint
files built as data, and the Planner's checkpoint, orphan and archive decisions on an inventory taken
(stateops.retention.take_inventory) of a home written by hand (tests/support/fake_checkpoint.py).

Oracles are the rules of planner.py's docstring and docs/operations.md "Retention", applied by hand: batches
F..latest stay restorable, F keeping Spark's minBatchesToRetain, the job's rewind_batches and every batch
planned within rewind_within (never below the oldest restorable batch); a held lease plans no temp files
and only immutable files older than every kept one; a maintenance lock leaves the job alone; archives beyond
keep_archives and older than keep_archives_for go, except unfinished ones and the newest that verifies;
orphans idle for orphan_idle are archived, deleted or kept.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from stateops.layout import Layout
from stateops.checkpoints import restart
from stateops.retention import take_inventory
from stateops.checkpoints.listing import Tree
from stateops.retention.model import (ARCHIVE_RETENTION, ARCHIVE_TREE, CHECKPOINT_HISTORY, DELETE_FILES, DELETE_TREE,
                                      ORPHAN_CHECKPOINT, TEMP_FILES, UNREFERENCED_FILES, Plan)
from stateops.retention.planner import JobControl, make_plan, promised_floor
from stateops.retention.policy import JobPolicy, Policies, load_policies
from stateops.retention.scope import JobArea, Scope
from stateops.roots import Roots
from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint, crc_name

pytestmark = pytest.mark.unit

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
DAY = 86400
MINUTE_MS = 60_000
NOW_MS = int(NOW.timestamp() * 1000)


# --- promised_floor -------------------------------------------------------------------------------------

def _files(latest: int = 9, minutes_apart: int = 15) -> restart.CheckpointFiles:
    """Batches 0..latest committed, batch b planned (latest - b) * minutes_apart minutes before NOW."""
    batches = list(range(latest + 1))
    return restart.CheckpointFiles(Tree("/cp", {}), batches, batches, [], {}, {
        b: NOW_MS - (latest - b) * minutes_apart * MINUTE_MS for b in batches}, {})


@pytest.mark.parametrize("policy, min_batches, oldest, floor, reasons", [
    (JobPolicy(), 3, 0, 7, ["minBatchesToRetain 3"]),                     # 9 - 3 + 1
    (JobPolicy(rewind_batches=5), 3, 0, 5, ["minBatchesToRetain 3", "rewind_batches 5"]),
    (JobPolicy(rewind_batches=2), 3, 0, 7, ["minBatchesToRetain 3", "rewind_batches 2"]),
    (JobPolicy(), 0, 0, 9, ["minBatchesToRetain 0"]),                     # at least the latest batch
    # planned within 50 minutes of NOW: batches 7 (30 min), 8 (15), 9 (0); 6 is 45 min: also in
    (JobPolicy(rewind_within="50 minutes"), 3, 0, 6, ["minBatchesToRetain 3", "rewind_within 50 minutes"]),
    # within 10 minutes: batch 9 only; minBatchesToRetain keeps more
    (JobPolicy(rewind_within="10 minutes"), 3, 0, 7, ["minBatchesToRetain 3", "rewind_within 10 minutes"]),
    (JobPolicy(), 3, 8, 8, ["minBatchesToRetain 3", "batch 8 is the oldest still there"]),
    (JobPolicy(rewind_within="2 hours"), 3, 4, 4, ["rewind_within 2 hours", "batch 4 is the oldest still there"]),
    (JobPolicy(), 100, 0, 0, ["minBatchesToRetain 100"]),                 # more than there are: from batch 0
    (JobPolicy(), 100, None, 0, ["minBatchesToRetain 100"]),
    (JobPolicy(), 100, 2, 2, ["batch 2 is the oldest still there"]),
])
def test_the_promised_floor_keeps_the_largest_promise_but_never_below_what_is_there(
        policy, min_batches, oldest, floor, reasons):
    got, why = promised_floor(_files(), policy, min_batches, NOW, oldest)
    assert got == floor
    for reason in reasons:
        assert reason in why, why


def test_rewind_within_counts_batches_by_when_they_were_planned():
    files = _files(latest=9, minutes_apart=60)  # batch 9 now, batch 8 an hour ago, ...
    assert promised_floor(files, JobPolicy(rewind_within="3 hours"), 1, NOW, 0)[0] == 6
    assert promised_floor(files, JobPolicy(rewind_within="179 minutes"), 1, NOW, 0)[0] == 7
    files.timestamps.clear()  # no planning time known: nothing is within any window
    assert promised_floor(files, JobPolicy(rewind_within="3 hours"), 1, NOW, 0)[0] == 9


# --- a home written by hand -------------------------------------------------------------------------------

def _scope(layout: Layout, policies: Policies, min_batches: int = 2, jobs=("alpha", "beta")) -> Scope:
    areas = {j: JobArea(j, layout.checkpoint(j), layout.deadletter_checkpoint(j), layout.archives(j), layout.table(j),
                        layout.deadletter_table(j)) for j in jobs}
    return Scope(layout, areas, Roots.from_layout(layout, {j: layout.checkpoint(j) for j in jobs}), policies,
                 min_batches)


class Home:
    """alpha: HDFS store, batches 0..9 (two partitions: deltas 1..10, snapshots 4 and 8 | 6), an interrupted
    offsets write; its dead-letter checkpoint: batches 0..9, no state. beta: RocksDB with changelogs, batches 0..7
    (changelogs 1..8, zips 3 {a, b, w1} and 6 {b, c, w2}, z named by none; immutable files aged a < w1 < b < w2
    < c < z). Orphans: checkpoints/retired idle 30 days, its dead-letter checkpoint idle 3 days, and
    checkpoints/junk (not a checkpoint)."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.alpha = FakeCheckpoint(layout.checkpoint("alpha"), "alpha-q", provider=HDFS, partitions=2, crc=True)
        self.alpha.batches(range(10))
        self.alpha.store(0, partitions=[0], delta=range(1, 11), snapshot=[4, 8])
        self.alpha.store(0, partitions=[1], delta=range(1, 11), snapshot=[6])
        self.alpha_temp = self.alpha.temp("offsets", "10", crc=True)
        self.alpha_dead = FakeCheckpoint(layout.deadletter_checkpoint("alpha"), "alpha-dl", provider=None,
                                         partitions=2, crc=True).batches(range(10))
        self.beta = FakeCheckpoint(layout.checkpoint("beta"), "beta-q", provider=ROCKSDB, partitions=1, crc=True)
        self.beta.batches(range(8))
        self.beta.store(0, partitions=[0], changelog=range(1, 9),
                        zip={3: ["a.sst", "b.sst", "w1.log"], 6: ["b.sst", "c.sst", "w2.log"]})
        self.beta.immutable(0, 0, "z.sst")
        base = NOW.timestamp() - DAY
        for name, offset in (("SSTs/a.sst", 1000), ("logs/w1.log", 1500), ("SSTs/b.sst", 2000),
                             ("logs/w2.log", 2500), ("SSTs/c.sst", 3000), ("SSTs/z.sst", 4000)):
            self.beta.touch(base + offset, [f"state/0/0/{name}"])
        self.retired = FakeCheckpoint(layout.checkpoint("retired"), "old-q", crc=True).batches(range(2))
        self.retired.store(0, partitions=2, changelog=[1, 2])
        self.retired.touch(NOW.timestamp() - 30 * DAY)
        self.retired_dead = FakeCheckpoint(layout.deadletter_checkpoint("retired"), "old-dl").batches(range(2))
        self.retired_dead.touch(NOW.timestamp() - 3 * DAY)
        junk = Path(layout.checkpoint("junk"))
        junk.mkdir(parents=True)
        (junk / "notes.txt").write_text("not a checkpoint")

    def sizes(self, cp: FakeCheckpoint, rels) -> dict[str, int]:
        return {rel: cp.size(rel) for rel in rels}


def _with_crc(*rels: str) -> list[str]:
    return sorted({r for rel in rels for r in (rel, crc_name(rel))})


def _logs(offsets: range, commits: range) -> list[str]:
    return _with_crc(*[f"offsets/{b}" for b in offsets], *[f"commits/{b}" for b in commits])


def _plan(layout: Layout, policies: Policies, controls=None, verify=lambda entry: [], min_batches: int = 2) -> Plan:
    scope = _scope(layout, policies, min_batches)
    return make_plan(take_inventory(scope), controls or {}, verify, NOW)


def _items(plan: Plan, rule: str, target: str):
    return [i for i in plan.items if i.rule == rule and i.target == target]


def _only(plan: Plan, rule: str, target: str):
    [item] = _items(plan, rule, target)
    return item


def _reasons(plan: Plan, target: str) -> list[str]:
    return [s["reason"] for s in plan.skipped if s["target"] == target]


def _home(layout) -> Home:
    return Home(layout)


def test_checkpoint_history_keeps_minbatches_or_the_jobs_rewind_batches(layout):
    home = _home(layout)
    policies = load_policies({"retention": {"jobs": {"alpha": {"rewind_batches": 4}}}}, ["alpha", "beta"])
    plan = _plan(home.layout, policies)
    # alpha: rewind_batches 4 -> floor 6 -> version 7 loads from snapshot 4 (partition 0) and 6 (partition 1)
    alpha = _only(plan, CHECKPOINT_HISTORY, home.alpha.path)
    expected = _with_crc(*[f"state/0/0/{v}.delta" for v in (1, 2, 3)],
                         *[f"state/0/1/{v}.delta" for v in (1, 2, 3, 4, 5)]) + _logs(range(0, 5), range(0, 6))
    assert dict(alpha.paths) == home.sizes(home.alpha, expected)
    assert (alpha.job, alpha.action, alpha.files, alpha.bytes) == ("alpha", DELETE_FILES, len(expected),
                                                                   home.alpha.size(*expected))
    assert (alpha.details["floor"], alpha.details["latest"], alpha.details["live"]) == (6, 9, False)
    # its dead-letter checkpoint follows the job's policy: logs only (no state)
    dead = _only(plan, CHECKPOINT_HISTORY, home.alpha_dead.path)
    assert dead.job == "alpha" and [p for p, _ in dead.paths] == _logs(range(0, 5), range(0, 6))
    # beta: minBatchesToRetain 2 -> floor 6 -> version 7 loads from 6.zip: changelogs 1..5 and 3.zip go
    beta = _only(plan, CHECKPOINT_HISTORY, home.beta.path)
    assert [p for p, _ in beta.paths] == (_with_crc(*[f"state/0/0/{v}.changelog" for v in range(1, 6)],
                                                    "state/0/0/3.zip") + _logs(range(0, 5), range(0, 6)))
    unreferenced = _only(plan, UNREFERENCED_FILES, home.beta.path)
    assert [p for p, _ in unreferenced.paths] == _with_crc("state/0/0/SSTs/a.sst", "state/0/0/SSTs/z.sst",
                                                           "state/0/0/logs/w1.log")
    assert _items(plan, UNREFERENCED_FILES, home.alpha.path) == []  # HDFS: no immutable files
    temp = _only(plan, TEMP_FILES, home.alpha.path)
    assert [p for p, _ in temp.paths] == sorted([home.alpha_temp, crc_name(home.alpha_temp)])
    kept = {k["target"]: (k["floor"], k["latest"]) for k in plan.kept}
    assert kept[home.alpha.path] == (6, 9) and kept[home.beta.path] == (6, 7) and kept[home.alpha_dead.path] == (6, 9)


def test_a_held_lease_plans_no_temp_files_and_only_immutable_files_older_than_every_kept_one(layout):
    home = _home(layout)
    controls = {"alpha": JobControl(lease="run r1, pid 1 on h"), "beta": JobControl(lease="run r2, pid 2 on h")}
    plan = _plan(home.layout, Policies(), controls)
    assert _items(plan, TEMP_FILES, home.alpha.path) == []
    assert any(r.startswith("2 temp file(s) kept") for r in _reasons(plan, home.alpha.path))
    # floor 8 (minBatchesToRetain 2) is still promised and its history planned, marked live
    alpha = _only(plan, CHECKPOINT_HISTORY, home.alpha.path)
    assert alpha.details == {"floor": 8, "latest": 9, "live": True}
    assert [p for p, _ in alpha.paths] == (_with_crc(*[f"state/0/0/{v}.delta" for v in range(1, 8)],
                                                     "state/0/0/4.snapshot",
                                                     *[f"state/0/1/{v}.delta" for v in range(1, 6)])
                                           + _logs(range(0, 7), range(0, 8)))
    # beta keeps b, c, w2 (6.zip): a and w1 are older than all three; z is newer and may be in use
    unreferenced = _only(plan, UNREFERENCED_FILES, home.beta.path)
    assert [p for p, _ in unreferenced.paths] == _with_crc("state/0/0/SSTs/a.sst", "state/0/0/logs/w1.log")


def test_a_maintenance_lock_or_checkpoint_history_false_leaves_the_checkpoints_alone(layout):
    home = _home(layout)
    plan = _plan(home.layout, Policies(), {"alpha": JobControl(maintenance="runbook alpha-x")})
    for cp in (home.alpha, home.alpha_dead):
        assert [i for i in plan.items if i.target == cp.path] == []
        assert _reasons(plan, cp.path) == ["under maintenance: runbook alpha-x"]
    assert _items(plan, CHECKPOINT_HISTORY, home.beta.path)  # another job is not affected
    policies = load_policies({"retention": {"jobs": {"beta": {"checkpoint_history": False}}}}, ["alpha", "beta"])
    plan = _plan(home.layout, policies)
    assert [i for i in plan.items if i.target == home.beta.path] == []
    assert _reasons(plan, home.beta.path) == ["checkpoint_history = false"]
    assert _items(plan, CHECKPOINT_HISTORY, home.alpha.path)


def test_a_checkpoint_that_cannot_restore_a_promised_batch_is_left_alone_but_its_temp_files_go(layout):
    home = _home(layout)
    home.alpha.remove("state/0/1/7.delta")  # partition 1 loads 7..10 from snapshot 6 + deltas: batches 6..9 lost
    plan = _plan(home.layout, Policies())
    assert _items(plan, CHECKPOINT_HISTORY, home.alpha.path) == []
    assert any("batch 8 " in r for r in _reasons(plan, home.alpha.path))  # the floor is 8 (minBatchesToRetain 2)
    assert [p for p, _ in _only(plan, TEMP_FILES, home.alpha.path).paths] == sorted(
        [home.alpha_temp, crc_name(home.alpha_temp)])


def test_a_job_checkpoint_without_a_committed_batch_is_skipped(layout):
    FakeCheckpoint(layout.checkpoint("alpha")).batch(0, commit=False)
    plan = _plan(layout, Policies())
    assert plan.items == () and _reasons(plan, layout.checkpoint("alpha")) == ["no committed batch yet"]


# --- orphans ----------------------------------------------------------------------------------------------

def test_an_orphan_idle_for_orphan_idle_is_archived_and_a_younger_one_kept(layout):
    home = _home(layout)
    plan = _plan(home.layout, Policies())  # orphan_idle 14 days, orphan_action archive
    item = _only(plan, ORPHAN_CHECKPOINT, home.retired.path)
    archive_id = "orphan-retired-20260601T000000Z"
    assert (item.action, item.job, item.bytes, item.files) == (ARCHIVE_TREE, None, 0, 0)  # frees nothing yet
    assert item.details == {"last_modified": NOW.timestamp() - 30 * DAY, "bytes_moved": home.retired.size(),
                            "files_moved": len(home.retired.files()), "archive_id": archive_id,
                            "destination": f"{home.layout.home}/ops/_orphans/archives/{archive_id}"}
    assert _items(plan, ORPHAN_CHECKPOINT, home.retired_dead.path) == []  # idle 3 days
    assert len(_reasons(plan, home.retired_dead.path)) == 1
    junk = home.layout.checkpoint("junk")
    assert [i for i in plan.items if i.target == junk] == [] and len(_reasons(plan, junk)) == 1


def test_orphans_are_deleted_or_kept_as_the_policy_says(layout):
    home = _home(layout)
    policies = load_policies({"retention": {"orphan_action": "delete", "orphan_idle": "2 days"}}, ["alpha", "beta"])
    plan = _plan(home.layout, policies)
    for cp in (home.retired, home.retired_dead):
        item = _only(plan, ORPHAN_CHECKPOINT, cp.path)
        assert (item.action, item.bytes, item.files) == (DELETE_TREE, cp.size(), len(cp.files()))
    dead = _only(plan, ORPHAN_CHECKPOINT, home.retired_dead.path)
    assert dead.details["bytes_moved"] == 0 and "archive_id" not in dead.details
    kept = _plan(home.layout, load_policies({"retention": {"orphan_action": "keep", "orphan_idle": "2 days"}},
                                            ["alpha", "beta"]))
    assert _items(kept, ORPHAN_CHECKPOINT, home.retired.path) == []
    assert _items(kept, ORPHAN_CHECKPOINT, home.retired_dead.path) == []


def test_a_dead_letter_orphan_is_archived_under_a_name_of_its_own(layout):
    home = _home(layout)
    plan = _plan(home.layout, load_policies({"retention": {"orphan_idle": "1 day"}}, ["alpha", "beta"]))
    ids = {i.target: i.details["archive_id"] for i in plan.items if i.rule == ORPHAN_CHECKPOINT}
    assert ids == {home.retired.path: "orphan-retired-20260601T000000Z",
                   home.retired_dead.path: "orphan-deadletter-retired-20260601T000000Z"}


# --- archives ---------------------------------------------------------------------------------------------

def _archive(root: str, archive_id: str, age_days: float, *, finished: bool = True, manifest: bool = True) -> str:
    """A runbook archive: <root>/<id>/{checkpoint/metadata, manifest.json (created age_days before NOW),
    report.json when the runbook finished}."""
    folder = Path(root) / archive_id
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "checkpoint" / "metadata").write_text('{"id":"q"}')
    if manifest:
        created = (NOW - timedelta(days=age_days)).isoformat()
        (folder / "manifest.json").write_text(f'{{"archive_id": "{archive_id}", "created_at": "{created}", '
                                              '"files": [{"path": "metadata", "size": 10, "sha256": "x"}]}')
    if finished:
        (folder / "report.json").write_text('{"outcome": "succeeded"}')
    return str(folder)


def _broken(*ids: str):
    return lambda entry: [f"{entry.archive_id}: corrupt"] if entry.archive_id in ids else []


def test_archives_beyond_keep_archives_and_older_than_keep_archives_for_go_except_protected_ones(layout):
    root = layout.archives("alpha")
    paths = {a: _archive(root, a, days, finished=finished) for a, days, finished in (
        ("a1", 60, True), ("a2", 45, True), ("a3", 40, False), ("a4", 35, True), ("a5", 20, True), ("a6", 2, True))}
    _archive(root, "a7", 90, manifest=False)  # no manifest: never judged, never deleted
    policies = load_policies({"retention": {"keep_archives": 2, "keep_archives_for": "30 days"}}, ["alpha", "beta"])
    plan = _plan(layout, policies, verify=_broken("a4", "a6"))
    # newest first: a6 a5 | a4 a3 a2 a1 beyond the newest 2, all older than 30 days; a3's runbook did not finish;
    # the newest that verifies is a5 (a6 is corrupt), which is not a candidate anyway
    deleted = [i for i in plan.items if i.rule == ARCHIVE_RETENTION]
    assert [i.target for i in deleted] == [paths["a4"], paths["a2"], paths["a1"]]
    assert all(i.action == DELETE_TREE and i.job == "alpha" and i.details["protected"] == "a5" for i in deleted)
    assert [i.files for i in deleted] == [3, 3, 3]  # checkpoint/metadata, manifest.json, report.json
    assert {"target": paths["a5"], "job": "alpha", "reason": "the newest archive that verifies against its manifest"} \
        in plan.kept


def test_the_newest_archive_that_verifies_is_never_deleted_and_none_is_when_none_verifies(layout):
    root = layout.archives("alpha")
    paths = {a: _archive(root, a, days) for a, days in (("a1", 60), ("a2", 50), ("a3", 40))}
    policies = load_policies({"retention": {"keep_archives": 0, "keep_archives_for": "30 days"}}, ["alpha", "beta"])
    plan = _plan(layout, policies, verify=_broken("a2", "a3"))
    assert [i.target for i in plan.items if i.rule == ARCHIVE_RETENTION] == [paths["a3"], paths["a2"]]
    plan = _plan(layout, policies, verify=_broken("a1", "a2", "a3"))
    assert [i for i in plan.items if i.rule == ARCHIVE_RETENTION] == []
    assert len(_reasons(plan, paths["a3"])) == 1  # said once, on the newest
    plan = _plan(layout, policies, {"alpha": JobControl(maintenance="runbook alpha-x")})
    assert [i for i in plan.items if i.rule == ARCHIVE_RETENTION] == []
    assert all(_reasons(plan, p) == ["under maintenance: runbook alpha-x"] for p in paths.values())


def test_a_jobs_archives_follow_its_policy_and_orphan_archives_the_default(layout):
    ages = (("1", 50), ("2", 40), ("3", 1))
    orphans = {a: _archive(f"{layout.home}/ops/_orphans/archives", f"orphan-x-{a}", days) for a, days in ages}
    alpha = {a: _archive(layout.archives("alpha"), f"alpha-{a}", days) for a, days in ages}
    beta = {a: _archive(layout.archives("beta"), f"beta-{a}", days) for a, days in ages}
    policies = load_policies({"retention": {"keep_archives": 1, "keep_archives_for": "30 days",
                                            "jobs": {"alpha": {"keep_archives": 3}}}}, ["alpha", "beta"])
    plan = _plan(layout, policies)
    deleted = [(i.target, i.job) for i in plan.items if i.rule == ARCHIVE_RETENTION]
    # newest first: 3 (1 day) is kept by keep_archives 1; 2 and 1 are older than 30 days; alpha keeps 3 archives
    assert deleted == [(beta["2"], "beta"), (beta["1"], "beta"), (orphans["2"], None), (orphans["1"], None)]
    assert not any(target in alpha.values() for target, _ in deleted)
