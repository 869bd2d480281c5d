"""Preflight of the recovery runbook (stateops/recovery/preflight.py) on constructed inputs: a JobTarget built as
data and a checkpoint written by hand (tests/support/fake_checkpoint.py), no JVM.

What is checked is what preflight decides (its module docstring): which request it refuses, with which
error type and which field or flag, and the plan it builds otherwise (latest batch, watermark, state
partitions, settings before and after, archive method and room, steps per mode, the running lease); and
that it writes nothing either way. Expected values are written out from the checkpoint as constructed.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from stateops.control import ControlSettings, overrides
from stateops.control.overrides import WatermarkBounds
from stateops.storage.holders import HOST, start_ticks
from stateops.control.store import ControlStore
from stateops.errors import ConfigError
from stateops.layout import Layout
from stateops.recovery import JobTarget, RecoveryRefused, RecoveryRequest, RecoverySettings, preflight
from stateops.checkpoints import archive
from stateops.roots import OutsideRootsError, Roots
from stateops.checkpoints.state_store import JOIN_FORMAT
from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint

pytestmark = pytest.mark.unit

JOB = "alpha"
RUNBOOK = "alpha-20260101T000000Z-abc123"
WATERMARK_MS = 1_767_229_200_000  # 2026-01-01T01:00:00Z: the watermark batch 5 ran with
SETTINGS = RecoverySettings(archive_margin=0.5, archive_min_free_bytes=0)
NOW = datetime(2026, 1, 1, 2, tzinfo=timezone.utc)


def _target(layout: Layout, **changes) -> JobTarget:
    roots = Roots.from_layout(layout, {JOB: layout.checkpoint(JOB)})
    values = dict(job=JOB, checkpoint=layout.checkpoint(JOB), sink_table=layout.table(JOB), output_mode="update",
                  row_key=("k",), output_time_column=None, watermark_delay="10 minutes",
                  bounds=WatermarkBounds("1 minute", "1 hour"), shuffle_partitions=8,
                  archive_root=layout.archives(JOB), landing=(layout.landing("events"),), inputs=1, roots=roots)
    values.update(changes)
    return JobTarget(**values)


def _alpha_checkpoint(layout, provider: str = ROCKSDB, conf: dict | None = None) -> FakeCheckpoint:
    """alpha's checkpoint: RocksDB (or `provider`), 4 shuffle partitions, batches 0..5 committed (batch 5 with
    the watermark WATERMARK_MS), each reading one landing file that is still there; four partitions with
    changelogs 1..6 and a snapshot zip of version 4 (naming a.sst)."""
    landing = Path(layout.landing("events"))
    landing.mkdir(parents=True)
    cp = FakeCheckpoint(layout.checkpoint(JOB), "alpha-query", provider=provider, partitions=4, crc=True, conf=conf)
    for b in range(6):
        (landing / f"{b}.json").write_text("{}")
        cp.source(0, b, [f"file://{landing}/{b}.json"])
        cp.batch(b, watermark_ms=WATERMARK_MS if b == 5 else 0)
    cp.store(0, partitions=4, changelog=range(1, 7), zip={4: ["a.sst"]})
    return cp


def _snapshot(root: str) -> dict[str, bytes]:
    """Every file under `root` with its bytes: what 'writes nothing' is checked against."""
    base = Path(root)
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in base.rglob("*") if p.is_file()}


def _plan(layout: Layout, request: RecoveryRequest, target: JobTarget | None = None,
          settings: RecoverySettings = SETTINGS):
    return preflight.build_plan(layout, target or _target(layout), request, runbook_id=RUNBOOK,
                                settings=settings, control=ControlSettings(), now=NOW)


def _refused(layout: Layout, request: RecoveryRequest, error=RecoveryRefused, target: JobTarget | None = None,
             settings: RecoverySettings = SETTINGS):
    """The refusal, after checking that nothing under the home changed."""
    before = _snapshot(layout.home)
    with pytest.raises(error) as caught:
        _plan(layout, request, target, settings)
    assert _snapshot(layout.home) == before
    return caught.value


# --- the request's values -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, values, field", [
    ("shrink", {}, "mode"),
    ("adjust", {}, "watermark_delay"),                                           # required
    ("repartition", {}, "shuffle_partitions"),
    ("rewind", {}, "to_batch"),
    ("restore", {}, "archive_id"),
    ("adjust", {"watermark_delay": "20 minutes", "shuffle_partitions": 4}, "shuffle_partitions"),  # not for this mode
    ("rewind", {"to_batch": 2, "watermark_delay": "20 minutes"}, "watermark_delay"),
    ("rewind", {"to_batch": 2, "archive_id": RUNBOOK}, "archive_id"),
    ("repartition", {"shuffle_partitions": 6, "to_batch": 2}, "to_batch"),
    ("adjust", {"watermark_delay": "2 hours"}, "watermark_delay"),           # outside the job's bounds
    ("adjust", {"watermark_delay": "30 seconds"}, "watermark_delay"),
    ("rebuild", {"watermark_delay": "soon"}, "watermark_delay"),
    ("repartition", {"shuffle_partitions": 0}, "shuffle_partitions"),
    ("rebuild", {"shuffle_partitions": -2}, "shuffle_partitions"),
    ("rewind", {"to_batch": -1}, "to_batch"),
    ("rewind", {"to_batch": True}, "to_batch"),
    ("rewind", {"to_batch": "3"}, "to_batch"),
    ("restore", {"archive_id": "../../etc"}, "archive id"),                  # not of the runbook id grammar
])
def test_a_value_the_mode_does_not_take_lacks_or_cannot_use_is_a_config_error_naming_it(layout, mode, values, field):
    """The core names the request's fields (the CLI says its flags: tests/spark/test_recovery.py); a value of
    another type is refused as the request is made, the rest when it is planned; nothing is written."""
    _alpha_checkpoint(layout)
    before = _snapshot(layout.home)
    with pytest.raises(ConfigError) as caught:
        _plan(layout, RecoveryRequest(JOB, mode, **values))
    assert caught.value.field == field and _snapshot(layout.home) == before


@pytest.mark.parametrize("confirm", [None, "beta", "ALPHA"])
def test_acting_needs_the_jobs_name_as_confirmation(layout, confirm):
    _alpha_checkpoint(layout)
    request = RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", dry_run=False, confirm=confirm)
    _refused(layout, request)


def test_a_confirmed_request_plans_to_act_and_a_dry_run_needs_no_confirmation(layout):
    _alpha_checkpoint(layout)
    acting = _plan(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", dry_run=False, confirm=JOB))
    assert acting.dry_run is False
    assert _plan(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes")).dry_run is True


# --- paths, checkpoint, concurrency ---------------------------------------------------------------------------

def test_an_archive_root_in_an_object_store_other_than_s3_is_refused(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes"),
             target=_target(layout, archive_root="gs://bucket/archives"))


def test_a_checkpoint_outside_the_roots_is_refused(layout, tmp_path):
    _alpha_checkpoint(layout)
    elsewhere = FakeCheckpoint(tmp_path / "elsewhere" / "cp").batches(range(2))
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes"), OutsideRootsError,
             target=_target(layout, checkpoint=elsewhere.path))


def test_nothing_to_recover_without_a_checkpoint_or_a_committed_batch(layout):
    Path(layout.home).mkdir(parents=True)
    request = RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes")
    _refused(layout, request)  # no checkpoint folder
    FakeCheckpoint(layout.checkpoint(JOB)).batch(0, commit=False)
    _refused(layout, request)  # offsets/0, no commit


def test_another_runbooks_lock_refuses_and_the_same_runbooks_lock_resumes(layout):
    _alpha_checkpoint(layout)
    request = RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes")
    store = ControlStore(layout, JOB)
    store.write("maintenance", {"job": JOB, "runbook_id": "alpha-20251231T000000Z-000000", "actor": "a",
                                "reason": "r", "since": "2025-12-31T00:00:00+00:00"})
    _refused(layout, request)
    store.write("maintenance", {"job": JOB, "runbook_id": RUNBOOK, "actor": "a", "reason": "r",
                                "since": "2025-12-31T00:00:00+00:00"})
    assert _plan(layout, request).runbook_id == RUNBOOK


# --- the plan ---------------------------------------------------------------------------------------------

def test_an_adjust_plan_names_the_checkpoint_the_settings_the_archive_and_writes_nothing(layout):
    checkpoint = _alpha_checkpoint(layout)
    before = _snapshot(layout.home)
    plan = _plan(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason=" late data "))
    assert _snapshot(layout.home) == before
    assert (plan.runbook_id, plan.job, plan.mode, plan.checkpoint) == (RUNBOOK, JOB, "adjust", checkpoint.path)
    assert (plan.query_id, plan.latest_committed_batch, plan.state_partitions) == ("alpha-query", 5, 4)
    assert plan.watermark == "2026-01-01T01:00:00+00:00"
    assert plan.created_at == "2026-01-01T02:00:00+00:00" and plan.reason == "late data"
    store = "rocksdb (changelog on), join format 1, checkpoint format 1"  # as its offset log and files say
    assert plan.settings_before == {"watermark_delay": "10 minutes", "shuffle_partitions": 4, "sink_epoch": 0,
                                    "state_store": store}
    assert plan.settings_after == {"watermark_delay": "20 minutes", "shuffle_partitions": 4, "sink_epoch": 1,
                                   "state_store": store}
    assert (plan.running, plan.restart_mode, plan.sink_table) == (None, "bounded", layout.table(JOB))
    size = checkpoint.size()
    assert {k: plan.archive[k] for k in ("id", "path", "method", "bytes", "required_bytes")} == {
        "id": RUNBOOK, "path": f"{layout.archives(JOB)}/{RUNBOOK}", "method": "copy", "bytes": size,
        "required_bytes": int(2 * size * 1.5)}  # a copy and a rollback copy, x (1 + margin 0.5), + 0 kept free
    assert plan.archive["free_bytes"] >= plan.archive["required_bytes"]


_COMMON = ["stop", "audit_before", "archive", "adjust"]


@pytest.mark.parametrize("mode, values, steps", [
    ("adjust", {"watermark_delay": "20 minutes"}, _COMMON + ["align_sink", "restart", "verify"]),
    ("repartition", {"shuffle_partitions": 6}, _COMMON + ["repartition", "align_sink", "restart", "verify"]),
    ("rewind", {"to_batch": 3}, _COMMON + ["rewind_cut", "align_sink", "restart", "verify"]),
    ("rebuild", {}, _COMMON + ["fresh_checkpoint", "restart", "verify"]),
])
def test_each_mode_has_its_steps_in_order(layout, mode, values, steps):
    _alpha_checkpoint(layout)
    plan = _plan(layout, RecoveryRequest(JOB, mode, **values))
    assert [s.name for s in plan.steps] == steps
    assert plan.step("archive").destructive is (mode == "rebuild")  # rebuild renames the checkpoint away
    assert plan.step("restart").idempotent is True  # the job ran bounded (no lease)


def test_repartition_refuses_the_partitions_the_state_has_and_plans_another_count(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "repartition", shuffle_partitions=4))
    plan = _plan(layout, RecoveryRequest(JOB, "repartition", shuffle_partitions=6))
    assert plan.settings_after["shuffle_partitions"] == 6 and plan.settings_before["shuffle_partitions"] == 4


def test_adjust_to_the_delay_in_force_is_refused(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay="10 minutes"))
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay=" 10 minutes "))


def test_adjust_to_the_delay_in_force_spelled_otherwise_is_refused(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay="600 seconds"))


def test_rewind_needs_an_earlier_batch_with_its_logs_and_state_retained(layout):
    checkpoint = _alpha_checkpoint(layout)
    for to_batch in (5, 9):  # the latest committed batch, or later: nothing to rewind
        _refused(layout, RecoveryRequest(JOB, "rewind", to_batch=to_batch))
    plan = _plan(layout, RecoveryRequest(JOB, "rewind", to_batch=1))
    assert plan.step("rewind_cut").destructive and plan.latest_committed_batch == 5
    checkpoint.remove("offsets/0")  # batch 1 needs offsets/0 (its previous batch) and offsets/1
    _refused(layout, RecoveryRequest(JOB, "rewind", to_batch=1))
    assert _plan(layout, RecoveryRequest(JOB, "rewind", to_batch=2)).request["to_batch"] == 2
    checkpoint.remove("state/0/3/2.changelog")  # partition 3 loads version 3 from changelogs 1..3: 2 is gone
    _refused(layout, RecoveryRequest(JOB, "rewind", to_batch=2))
    assert _plan(layout, RecoveryRequest(JOB, "rewind", to_batch=3)).request["to_batch"] == 3  # 4.zip: loads


def test_rewind_to_a_batch_whose_snapshot_lost_an_sst_is_refused(layout):
    checkpoint = _alpha_checkpoint(layout)
    for p in range(4):
        checkpoint.remove(f"state/0/{p}/SSTs/a.sst")  # 4.zip names it: versions 4..6 cannot load
    _refused(layout, RecoveryRequest(JOB, "rewind", to_batch=3))


def test_rebuild_of_an_append_sink_needs_an_idempotent_key(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "rebuild"), target=_target(layout, output_mode="append", row_key=()))
    plan = _plan(layout, RecoveryRequest(JOB, "rebuild"), _target(layout, output_mode="append", row_key=("id",)))
    assert plan.mode == "rebuild"


def test_rebuild_with_several_inputs_needs_all_the_input_read(layout):
    """(A Kafka job's rebuild needs every record from where its checkpoint started: tests/spark/test_kafka_jobs.py,
    on a broker whose records were deleted.)"""
    _alpha_checkpoint(layout)
    two = _target(layout, landing=(layout.landing("events"), layout.landing("other")), inputs=2)
    assert _plan(layout, RecoveryRequest(JOB, "rebuild"), two).mode == "rebuild"  # every file read is there
    os.remove(f"{layout.landing('events')}/2.json")
    _refused(layout, RecoveryRequest(JOB, "rebuild"), target=two)
    assert _plan(layout, RecoveryRequest(JOB, "rebuild")).mode == "rebuild"  # one input: a write floor instead


def test_rebuild_renames_the_checkpoint_away_and_takes_the_partitions_asked_or_the_jobs(layout):
    checkpoint = _alpha_checkpoint(layout)
    plan = _plan(layout, RecoveryRequest(JOB, "rebuild"))
    size = checkpoint.size()
    assert (plan.archive["method"], plan.archive["required_bytes"]) == ("rename", int(size * 1.5))  # rollback copy
    store = "rocksdb (changelog on), join format 1, checkpoint format 1"  # the old checkpoint's, kept
    assert plan.settings_after == {"watermark_delay": "10 minutes", "shuffle_partitions": 8, "sink_epoch": 1,
                                   "state_store": store}
    assert f"the new checkpoint keeps the old one's state store and formats: {store}" in plan.notes
    plan = _plan(layout, RecoveryRequest(JOB, "rebuild", watermark_delay="30 minutes", shuffle_partitions=12))
    assert plan.settings_after == {"watermark_delay": "30 minutes", "shuffle_partitions": 12, "sink_epoch": 1,
                                   "state_store": store}


def _manifest(layout: Layout, runbook_id: str, total_bytes: int) -> None:
    archive.write_json(f"{layout.archives(JOB)}/{runbook_id}/{archive.MANIFEST}", {
        "archive_id": runbook_id, "job": JOB, "total_bytes": total_bytes, "files": [],
        "settings": {"watermark_delay": "25 minutes", "shuffle_partitions": 3, "sink_epoch": 0}})


def test_restore_needs_an_archive_of_the_job_and_brings_its_settings_back(layout):
    checkpoint = _alpha_checkpoint(layout)
    source = "alpha-20251201T000000Z-0a0b0c"
    _refused(layout, RecoveryRequest(JOB, "restore", archive_id="beta-20251201T000000Z-0a0b0c"))  # another job's
    _refused(layout, RecoveryRequest(JOB, "restore", archive_id=source))  # not there
    _manifest(layout, source, total_bytes=1000)
    plan = _plan(layout, RecoveryRequest(JOB, "restore", archive_id=source))
    assert [s.name for s in plan.steps] == ["verify_source", *_COMMON, "restore_checkpoint", "align_sink", "restart",
                                            "verify"]
    assert plan.settings_after == {"watermark_delay": "25 minutes", "shuffle_partitions": 3, "sink_epoch": 1,
                                   "state_store": "rocksdb (changelog on), join format 1, checkpoint format 1"}
    size = checkpoint.size()  # renamed away (0) + the restored copy (1000) + a rollback copy
    assert (plan.archive["method"], plan.archive["required_bytes"]) == ("rename", int((1000 + size) * 1.5))


def test_no_room_for_the_archive_is_refused(layout):
    _alpha_checkpoint(layout)
    _refused(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes"),
             settings=RecoverySettings(archive_margin=0.2, archive_min_free_bytes=1 << 60))


def test_sink_epochs_continue_from_the_override_history(layout):
    _alpha_checkpoint(layout)
    overrides.set_override(layout, JOB, overrides.SINK_EPOCH, "3", bounds=_target(layout).bounds, reason="earlier",
                           actor="t")
    plan = _plan(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes"))
    assert (plan.settings_before["sink_epoch"], plan.settings_after["sink_epoch"]) == (3, 4)


# --- the running job ----------------------------------------------------------------------------------------

def _lease(layout: Layout, *, mode: str | None, heartbeat_age: float = 0.0) -> None:
    beat = (datetime.now(timezone.utc) - timedelta(seconds=heartbeat_age)).isoformat(timespec="milliseconds")
    store = ControlStore(layout, JOB)
    store.write("lease", {"lease_id": "l1", "job": JOB, "run_id": "run-1", "dagster_run_id": None, "runbook_id": None,
                          "pid": os.getpid(), "pid_started": start_ticks(os.getpid()), "host": HOST, "started": beat,
                          "heartbeat": beat, "mode": mode})


@pytest.mark.parametrize("mode, heartbeat_age, restart_mode, stale", [
    ("continuous", 0.0, "continuous", False),
    ("bounded", 0.0, "bounded", False),
    (None, 0.0, "bounded", False),              # a holder that did not say: run it once
    ("continuous", 3600.0, "continuous", True),  # no heartbeat for an hour: stale, still how it ran
])
def test_the_running_lease_decides_how_the_job_restarts(layout, mode, heartbeat_age, restart_mode, stale):
    _alpha_checkpoint(layout)
    _lease(layout, mode=mode, heartbeat_age=heartbeat_age)
    plan = _plan(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes"))
    assert plan.restart_mode == restart_mode
    assert (plan.running["run_id"], plan.running["pid"], plan.running["stale"]) == ("run-1", os.getpid(), stale)
    assert plan.step("restart").idempotent is (restart_mode == "bounded")


# --- resuming ---------------------------------------------------------------------------------------------

def test_an_interrupted_runbook_is_resumed_only_for_the_same_request(layout):
    _alpha_checkpoint(layout)
    request = RecoveryRequest(JOB, "rewind", to_batch=3, reason="first try")
    assert preflight.unfinished(layout, _target(layout), request) is None  # no lock
    plan = _plan(layout, request)
    directory = f"{layout.archives(JOB)}/{RUNBOOK}"
    archive.write_json(f"{directory}/{archive.PLAN}", plan.to_dict())
    store = ControlStore(layout, JOB)
    store.write("maintenance", {"job": JOB, "runbook_id": RUNBOOK, "actor": "a", "reason": "r", "since": "x"})
    again = RecoveryRequest(JOB, "rewind", to_batch=3, reason="second try", confirm=JOB, dry_run=False)
    assert preflight.unfinished(layout, _target(layout), again) == plan
    assert preflight.unfinished(layout, _target(layout), RecoveryRequest(JOB, "rewind", to_batch=2)) is None
    archive.write_json(f"{directory}/{archive.REPORT}", {"outcome": "failed"})
    assert preflight.unfinished(layout, _target(layout), again) is None  # it ended: nothing to resume


@pytest.mark.parametrize("request_", [RecoveryRequest(JOB, "rewind", to_batch=3),
                                      RecoveryRequest(JOB, "repartition", shuffle_partitions=8)])
def test_a_checkpoint_in_format_2_is_refused_by_the_modes_that_cut_state_files_by_version(layout, request_):
    cp = _alpha_checkpoint(layout)
    cp.write("state/0/0/7_0f1e2d3c-aaaa-bbbb-cccc-123456789abc.changelog", b"x")  # a version in format 2
    refused = _refused(layout, request_)
    assert f"cannot {request_.mode} a checkpoint in format 2" in str(refused) and "Fix: rebuild" in str(refused)
    assert _plan(layout, RecoveryRequest(JOB, "rebuild")).mode == "rebuild"  # a new checkpoint: allowed


@pytest.mark.parametrize("store, join_format, refused", [
    ("memory", "2", None),
    ("rocksdb", "4", "cannot repartition a stream-stream join in state format 4"),
    ("rocksdb", "3", None)])
def test_repartition_is_refused_where_sparks_offline_repartition_cannot_rewrite_the_state(layout, store, join_format,
                                                                                          refused):
    """Measured on Spark 4.2's own checkpoints (tests/spark/test_store_matrix.py): the offline repartition fails on
    the in-memory store after writing the next offsets/N, and leaves a join in state format 4 unreadable. The
    in-memory store's state is re-placed by StateOps' writer instead (an idempotent step); a join in format 4 on
    RocksDB is refused first, with the fix."""
    cp = _alpha_checkpoint(layout, HDFS if store == "memory" else ROCKSDB, {JOIN_FORMAT: join_format})
    cp.operator(0, "symmetricHashJoin")
    request = RecoveryRequest(JOB, "repartition", shuffle_partitions=8)
    if refused is None:
        plan = _plan(layout, request)
        assert plan.mode == "repartition"
        step = plan.step("repartition")
        assert step.idempotent == (store == "memory") and ("StateOps' writer" in step.action) == (store == "memory")
        return
    line = str(_refused(layout, request))
    assert refused in line and "--mode rebuild --partitions N" in line and "\n" not in line
    assert _plan(layout, RecoveryRequest(JOB, "rewind", to_batch=3)).mode == "rewind"  # the store allows a rewind


@pytest.mark.parametrize("store, operator, join_format, refused", [
    ("memory", "dedupeWithinWatermark", "2", None),
    ("rocksdb", "symmetricHashJoin", "2", None),
    ("rocksdb", "symmetricHashJoin", "4", "stream-stream join in state format 4"),
    ("rocksdb", "transformWithStateInPandasExec", "2", "transformWithState"),
    ("memory", "dedupeWithinWatermark", "2", "already in the"),
])
def test_switch_store_plans_its_step_or_refuses_what_the_target_cannot_hold(layout, store, operator, join_format,
                                                                            refused):
    cp = _alpha_checkpoint(layout, HDFS if store == "memory" else ROCKSDB, {JOIN_FORMAT: join_format})
    cp.operator(0, operator)
    to = "memory" if store == "rocksdb" else ("memory" if refused == "already in the" else "rocksdb")
    request = RecoveryRequest(JOB, "switch-store", to_store=to)
    if refused is None:
        plan = _plan(layout, request)
        assert [s.name for s in plan.steps] == ["stop", "audit_before", "archive", "adjust", "switch_store",
                                                "align_sink", "restart", "verify"]
        assert plan.step("switch_store").destructive and plan.step("switch_store").idempotent
        assert plan.settings_after["state_store"].startswith(to) and plan.settings_before["state_store"].startswith(
            store)
        return
    line = str(_refused(layout, request))
    assert refused in line and "\n" not in line
    if refused != "already in the":
        assert line.startswith(f"{JOB}: cannot switch the state to the memory store: ") and "Fix: " in line


def test_switch_store_needs_a_store_it_knows(layout):
    _alpha_checkpoint(layout)
    assert "to_store: is required for mode switch-store" in str(
        _refused(layout, RecoveryRequest(JOB, "switch-store"), ConfigError))
    assert "to_store: 'disk' is not a state store. Fix: pass to_store rocksdb or memory" in str(
        _refused(layout, RecoveryRequest(JOB, "switch-store", to_store="disk"), ConfigError))
    assert "to_store: does not apply to mode adjust" in str(_refused(
        layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", to_store="memory"), ConfigError))
