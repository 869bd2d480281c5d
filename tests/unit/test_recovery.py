"""The runbook's pure parts, without a JVM: the plan as data, verification checks, the sink epoch and Delta
alignment (real delta-rs tables), archives and their verification, the journal's lock, the replay rules
of the sink (write floor, insert-if-absent)."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from stateops.jobs.runtime.sink import DeltaSink
from stateops.storage import copies
from stateops import sinkstate
from stateops.control import maintenance, overrides
from stateops.delta import write_batch
from stateops.errors import ConfigError
from stateops.checkpoints import archive
from stateops.recovery import (JobTarget, RecoveryPlan, RecoveryRefused, RecoveryRequest, RecoverySettings,
                               preflight, verify)
from stateops.recovery.journal import recovery_journal
from stateops.runbooks import RunbookBusy, running
from stateops.recovery.model import Step
from stateops.sinkstate import SinkState
from stateops.roots import Roots

pytestmark = pytest.mark.unit


def _plan(**changes) -> RecoveryPlan:
    values = dict(
        runbook_id="user_activity-20260101T000000Z-abc123", job="user_activity", mode="adjust",
        request=RecoveryRequest("user_activity", "adjust", watermark_delay="20 minutes").to_dict(), actor="me@host",
        reason="late data", created_at="2026-01-01T00:00:00+00:00", checkpoint="/h/checkpoints/user_activity",
        query_id="q", latest_committed_batch=7, watermark="2026-01-01T01:00:00+00:00", state_partitions=4,
        sink_table="/h/tables/user_activity", running=None, restart_mode="bounded",
        archive={"id": "x", "path": "/h/ops/user_activity/archives/x", "method": "copy", "bytes": 2048,
                 "required_bytes": 4096, "free_bytes": 1 << 30},
        settings_before={"watermark_delay": "10 minutes", "shuffle_partitions": 4, "sink_epoch": 0},
        settings_after={"watermark_delay": "20 minutes", "shuffle_partitions": 4, "sink_epoch": 1},
        steps=(Step("stop", "stop it", False, True), Step("restart", "start it", True, True)),
        notes=("the watermark only moves forward",))
    values.update(changes)
    return RecoveryPlan(**values)


def test_plan_is_data_that_round_trips_through_json_and_reads_as_text():
    plan = _plan()
    assert RecoveryPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    text = plan.render()
    for words in ("adjust user_activity (dry run", "latest committed batch 7", "watermark_delay 10 minutes -> "
                  "20 minutes; sink_epoch 0 -> 1", "1. stop", "2. restart", "note: the watermark only moves forward",
                  "copy, 2.0 KiB"):
        assert words in text, words


def test_requests_with_the_same_parameters_are_the_same_runbook():
    a = RecoveryRequest("j", "rewind", to_batch=4, reason="x", confirm="j", dry_run=False, actor="a")
    b = RecoveryRequest("j", "rewind", to_batch=4, reason="y", actor="b")
    assert a.parameters() == b.parameters()
    assert a.parameters() != RecoveryRequest("j", "rewind", to_batch=5).parameters()


def _healthy(**changes) -> dict:
    audit = {"operators": [{"operator_id": 0, "store_name": "default", "rows_total": 10, "num_partitions": 4}]}
    args = dict(error=None, progress=[{"batch_id": 8, "input_rows": 5, "event_time_max_ms": 10_000},
                                      {"batch_id": 9, "input_rows": 5, "event_time_max_ms": 12_000}],
                batches_wanted=2, caught_up=False, start_watermark_ms=1_000, end_watermark_ms=2_000, delay_ms=1_000,
                single_watermark=True, first_batch=None, audit_start=audit, audit_after=audit, expected_partitions=4,
                duplicates=(0, []))
    args.update(changes)
    return verify.evaluate(**args)


def _failed(result: dict) -> list[str]:
    return [c["name"] for c in result["checks"] if not c["ok"]]


@pytest.mark.parametrize("changes,failing", [
    ({}, []),
    ({"error": "the restarted run ended"}, ["restart", "batches"]),
    ({"progress": [{"batch_id": 8, "input_rows": 5, "event_time_max_ms": 10_000}]}, ["batches"]),
    ({"progress": [{"batch_id": 8, "input_rows": 5, "event_time_max_ms": 10_000}], "caught_up": True}, []),
    ({"first_batch": 6}, ["first_batch"]),
    ({"end_watermark_ms": 1_000}, ["watermark"]),
    ({"end_watermark_ms": 1_000, "single_watermark": False}, []),
    ({"end_watermark_ms": 900, "single_watermark": False}, ["watermark"]),
    ({"audit_after": {"operators": [{"operator_id": 0, "store_name": "default", "rows_total": 21,
                                     "num_partitions": 4}]}}, ["state_rows"]),
    ({"expected_partitions": 6}, ["partitions"]),
    ({"duplicates": (2, [{"user_id": "u1"}])}, ["sink_keys"]),
])
def test_each_verification_check_fails_on_its_own_evidence(changes, failing):
    result = _healthy(**changes)
    assert _failed(result) == failing
    assert result["ok"] is (not failing)


def _txn_write(uri: str, value: int, app: str, batch: int) -> None:
    write_deltalake(uri, pa.table({"k": [value]}), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction(app, batch)]))


def test_delta_restore_keeps_the_newest_transaction_so_replays_need_a_new_epoch(tmp_path):
    """Measured on deltalake 1.6.6: after restore, transaction_version still reports the newest batch, so a
    replay under the same app id would be skipped as already written."""
    uri = str(tmp_path / "t")
    app = sinkstate.app_id("j", "q")
    for batch in range(5):
        _txn_write(uri, batch, app, batch)
    DeltaTable(uri).restore(2)
    assert DeltaTable(uri).transaction_version(app) == 4
    assert sinkstate.app_id("j", "q", 0) == "stateops/j/q" and sinkstate.app_id("j", "q", 3) == "stateops/j/q/epoch-3"


def test_aligned_version_drops_exactly_the_batches_the_restart_runs_again(tmp_path):
    uri = str(tmp_path / "t")
    mine, epoch, other = sinkstate.app_id("j", "q"), sinkstate.app_id("j", "q", 2), sinkstate.app_id("j", "z")
    _txn_write(uri, 0, other, 0)     # v0: an older checkpoint's write
    for batch in range(3):          # v1..v3: this checkpoint, batches 0..2
        _txn_write(uri, 10 + batch, mine, batch)
    _txn_write(uri, 20, epoch, 3)    # v4: batch 3 after an earlier runbook restart (epoch 2)
    _txn_write(uri, 21, epoch, 4)    # v5
    prefix = sinkstate.checkpoint_app_prefix("j", "q")
    assert sinkstate.aligned_version(uri, prefix, 4, 5) == 5      # nothing to drop
    assert sinkstate.aligned_version(uri, prefix, 2, 5) == 3      # batches 3, 4 run again
    assert sinkstate.aligned_version(uri, prefix, 0, 5) == 1
    assert sinkstate.aligned_version(uri, prefix, 3, 4) == 4      # from an archived version
    first = sinkstate.restore(uri, 3)
    assert first["restored"] and sinkstate.restore(uri, 3) == {"restored": False, "version": 3}
    assert sorted(DeltaTable(uri).to_pyarrow_table().column("k").to_pylist()) == [0, 10, 11, 12]
    assert [c["operation"] for c in DeltaTable(uri).history()].count("RESTORE") == 1
    assert sinkstate.duplicate_keys(uri, ("k",)) == (0, [])
    _txn_write(uri, 10, epoch, 5)
    assert sinkstate.duplicate_keys(uri, ("k",))[0] == 1


def test_epochs_are_never_reused_and_replay_rules_belong_to_their_epoch(layout):
    bounds = overrides.WatermarkBounds("1 minute", "1 hour")

    def set_(setting, value):
        overrides.set_override(layout, "j", setting, value, bounds=bounds, reason="test", actor="me")

    assert sinkstate.next_epoch(layout, "j") == 1 and sinkstate.sink_state(layout, "j") == SinkState()
    for epoch in (1, 3, 2):  # a restore may put a lower number in force; the next is still above all
        set_(overrides.SINK_EPOCH, str(epoch))
    assert sinkstate.next_epoch(layout, "j") == 4
    set_(overrides.SINK_REPLAY, sinkstate.replay_value(2, 1000, 5000))
    assert sinkstate.sink_state(layout, "j") == SinkState(2, 1000, 5000)
    set_(overrides.SINK_EPOCH, "4")
    assert sinkstate.sink_state(layout, "j") == SinkState(4)
    with pytest.raises(ConfigError, match="sink_epoch"):
        set_(overrides.SINK_EPOCH, "-1")


def test_archive_copy_verifies_and_any_change_is_named(tmp_path):
    source = tmp_path / "cp"
    (source / "offsets").mkdir(parents=True)
    (source / "offsets" / "0").write_text("v1\n{}\n")
    (source / "offsets" / ".0.crc").write_bytes(b"crc")
    (source / "metadata").write_text('{"id":"q"}')
    files = [f.__dict__ for f in copies.copy_tree(str(source), str(tmp_path / "copy"))]
    assert {f["path"] for f in files} == {"metadata", "offsets/0", "offsets/.0.crc"}
    assert copies.verify_tree(str(tmp_path / "copy"), files) == []
    (tmp_path / "copy" / "offsets" / "0").write_text("v1\n{changed}\n")
    (tmp_path / "copy" / "extra").write_text("x")
    os.remove(tmp_path / "copy" / "metadata")
    problems = copies.verify_tree(str(tmp_path / "copy"), files)
    assert problems[0] == "missing metadata" and problems[1] == "unexpected extra"
    assert problems[2].startswith("offsets/0: 13 bytes sha256") and "manifest says 6 bytes" in problems[2]


def test_a_runbook_is_executed_by_one_process_at_a_time(layout, tmp_path):
    directory = str(tmp_path / "rb")
    journal = recovery_journal(layout, "j", "rb", directory, "me")
    with journal.held():
        assert running(directory)
        with pytest.raises(RunbookBusy, match="being executed by another process"):
            with recovery_journal(layout, "j", "rb", directory, "me").held():
                pass
        journal.record("stop", "started")
        journal.record("stop", "done", {"how": "nothing was running"})
    assert not running(directory)
    again = recovery_journal(layout, "j", "rb", directory, "me")
    assert again.phase("stop") == "done" and again.details("stop") == {"how": "nothing was running"}


def test_a_job_locked_by_another_runbook_is_refused_with_what_to_do(layout, tmp_path):
    roots = Roots.from_layout(layout, {"j": layout.checkpoint("j")})
    target = JobTarget("j", layout.checkpoint("j"), layout.table("j"), "update", ("k",), None, "10 minutes",
                       overrides.WatermarkBounds("1 minute", "1 hour"), 4, str(tmp_path / "archives"), (), 1, roots)
    preflight.check_concurrency(layout, target, "mine")  # no lock: nothing to refuse
    maintenance.acquire(layout, "j", runbook_id="other", actor="someone", reason="test")
    preflight.check_concurrency(layout, target, "other")  # its own lock: a resume
    directory = archive.runbook_dir(target.archive_root, "other")
    with recovery_journal(layout, "j", "other", directory, "someone").held():
        with pytest.raises(RecoveryRefused, match="another runbook holds the job: .*; it is running now$"):
            preflight.check_concurrency(layout, target, "mine")
    with pytest.raises(RecoveryRefused, match="it did not finish; run it again with the same settings to resume"):
        preflight.check_concurrency(layout, target, "mine")
    archive.write_json(os.path.join(directory, archive.REPORT), {"outcome": "failed"})
    with pytest.raises(RecoveryRefused, match="it failed and keeps the job locked .* stateops jobs unlock j "
                                              "--runbook-id other$"):
        preflight.check_concurrency(layout, target, "mine")


def test_recovery_settings_refuse_bad_values(monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "two")
    with pytest.raises(ConfigError, match="STATEOPS_RECOVERY_VERIFY_BATCHES"):
        RecoverySettings.from_env()
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "0")
    with pytest.raises(ConfigError, match="STATEOPS_RECOVERY_VERIFY_BATCHES"):
        RecoverySettings.from_env()


def test_replay_rules_drop_rows_below_the_floor_and_insert_repeats_only_if_absent(tmp_path):
    uri = str(tmp_path / "sessions")
    sink = DeltaSink("j", uri, "unused", row_key=("user_id", "start"), time_column="start",
                     sink=SinkState(1, write_floor_ms=2_000, insert_if_absent_until_ms=5_000))
    ts = pa.timestamp("us", tz="UTC")
    batch = pa.table({"user_id": ["a", "b", "c"], "start": pa.array([1_000_000, 3_000_000, 9_000_000], ts),
                      "events": [1, 2, 3]})
    kept, repeats = sink._replayed(batch)
    assert kept.column("user_id").to_pylist() == ["b", "c"] and repeats
    later = pa.table({"user_id": ["d"], "start": pa.array([6_000_000], ts), "events": [1]})
    assert sink._replayed(later) == (later, False), "rows after the horizon cannot be repeats: plain append"
    write_batch(uri, pa.table({"user_id": ["b"], "start": pa.array([3_000_000], ts), "events": [99]}),
                app_id="old", batch_id=0)
    write_batch(uri, kept, app_id="new", batch_id=0, merge_keys=sink.row_key, insert_only=True)
    rows = sorted(DeltaTable(uri).to_pyarrow_table().select(["user_id", "events"]).to_pylist(),
                  key=lambda r: r["user_id"])
    assert rows == [{"user_id": "b", "events": 99}, {"user_id": "c", "events": 3}]
