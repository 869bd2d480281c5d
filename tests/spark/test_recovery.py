"""The runbook on real Spark and Delta, in this process: every refusal is one line and changes nothing (the
file system compared before and after); a restart forced to fail by an incompatible change (the state
store provider switched on the same checkpoint) rolls back by itself and the query runs again on the
archived state; a rebuild of an append job whose oldest input is gone writes no partial session and
no duplicate, and no dead letter again.

Oracles: the file system (sha256 of every file under the home), tests/support/oracle.py, the Delta table, the
checkpoint's offset log, the override history."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.environment import Environment, get_job, read_settings
from stateops.cli.main import main
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.failures import QueryFailed
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER
from tests.support.scenarios import rocksdb_config
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import acquire, current_lease, maintenance, overrides
from stateops.control.stop import RECORD as STOP_RECORD
from stateops.control.store import ControlStore
from stateops.recovery import RecoveryRequest
from stateops.checkpoints import archive
from stateops.control import ControlSettings
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark

JOB = "user_activity"
INPUT = GeneratorConfig(events=400, files=4, users=30, late_share=0.05, duplicate_share=0.05, minutes_per_file=15,
                        seed=31)
COLUMNS = ["window_start", "window_end", "user_id", "events", "value_sum"]
MINUTE = 60_000



def _refused(layout, args: list[str], started: bool = False) -> str:
    """The one line of a refusal (exit 2). Refused in preflight, nothing else is printed; refused once started
    (the stop), stdout shows the journaled steps."""
    result = CliRunner().invoke(main, ["--home", layout.home, "recover", "run", *args])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    assert "refused" in result.stdout if started else result.stdout == ""
    return line


def test_every_refusal_is_one_line_and_changes_nothing(spark, layout, tmp_path, monkeypatch):
    generate(layout, replace(INPUT, orders=60))
    run_job(spark, get_job(JOB), layout, settings=read_settings())
    table = tmp_path / "stateops" / "tables" / "order_payments"
    table.mkdir(parents=True)
    (table / "_delta_log").write_text("not a Delta log")  # the sink's first write fails: batch 0 never commits
    with pytest.raises(QueryFailed):
        run_job(spark, get_job("order_payments"), layout, settings=read_settings())
    assert Checkpoint.open(layout.checkpoint("order_payments")).committed_batches() == []
    adjust = [JOB, "--mode", "adjust", "--watermark", "20 minutes"]
    before = file_hashes(layout.home)

    dry = CliRunner().invoke(main, ["--home", layout.home, "recover", "run", *adjust])
    assert dry.exit_code == 0 and "Dry run: nothing was changed" in dry.output and "1. stop" in dry.output

    assert "'nobody' does not confirm the runbook. Fix: pass --confirm user_activity" in _refused(
        layout, [*adjust, "--confirm", "nobody"])
    assert _refused(layout, [JOB, "--mode", "adjust", "--watermark", "3 hours", "--confirm", JOB]) == (
        "Error: watermark_delay: '3 hours' is outside user_activity's bounds [5 minutes, 2 hours]. Fix: choose a "
        "delay within the bounds, or widen watermark_min/watermark_max in the config file deliberately")
    assert "--to-batch: is required for mode rewind" in _refused(layout, [JOB, "--mode", "rewind", "--confirm", JOB])
    assert "user_sessions: nothing to recover" in _refused(
        layout, ["user_sessions", "--mode", "adjust", "--watermark", "20 minutes", "--confirm", "user_sessions"])
    assert "order_payments: nothing to recover: " in _refused(
        layout, ["order_payments", "--mode", "adjust", "--watermark", "5 minutes", "--confirm", "order_payments"])
    assert "cannot rewind to batch 9: batch 9 is not before the latest committed batch" in _refused(
        layout, [JOB, "--mode", "rewind", "--to-batch", "9", "--confirm", JOB])
    # An archive folder outside the home is fine (a root of its own job); one inside another job's area is not.
    config = tmp_path / "neighbour.toml"
    config.write_text(f'[jobs.{JOB}]\narchive_dir = "{layout.checkpoint("user_sessions")}/archives"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    refused = _refused(layout, [*adjust, "--confirm", JOB])
    assert f"jobs.{JOB}.archive_dir" in refused and "overlaps the checkpoint of user_sessions" in refused
    monkeypatch.delenv("STATEOPS_CONFIG")
    monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", str(10 ** 18))
    assert "not enough room for the archive" in _refused(layout, [*adjust, "--confirm", JOB])
    monkeypatch.delenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES")
    assert file_hashes(layout.home) == before

    maintenance.acquire(layout, JOB, runbook_id="other-runbook", actor="someone", reason="by hand")
    locked = file_hashes(layout.home)
    assert "another runbook holds the job: runbook other-runbook (someone" in _refused(
        layout, [*adjust, "--confirm", JOB])
    assert file_hashes(layout.home) == locked
    maintenance.release(layout, JOB, runbook_id="other-runbook", actor="someone")

    # A query that does not stop: a live lease whose holder never looks at stop requests.
    monkeypatch.setenv("STATEOPS_RECOVERY_STOP_TIMEOUT_SECONDS", "2")
    with acquire(layout, JOB, run_id="stuck-run", mode="continuous", settings=ControlSettings.from_env()) as stuck:
        held = file_hashes(layout.home, skip=("ops/tables/actions", f"ops/{JOB}/archives", f"ops/{JOB}/control/.lock"))
        assert "did not stop within 2 s and could not be terminated; nothing was changed" in _refused(
            layout, [*adjust, "--confirm", JOB], started=True)
        assert current_lease(layout, JOB).lease_id == stuck.lease.lease_id
    assert file_hashes(layout.home, skip=("ops/tables/actions", f"ops/{JOB}/archives", f"ops/{JOB}/control")) == {
        k: v for k, v in held.items() if not k.startswith(f"ops/{JOB}/control")}
    assert ControlStore(layout, JOB).read(STOP_RECORD) is None, "the stop request was withdrawn"
    assert maintenance.current(layout, JOB) is None, "the maintenance lock was released"
    assert overrides.in_force(layout, JOB) == {}


def _break_provider(checkpoint: str):
    """on_event: once the runbook adjusted the settings, switch the checkpoint's state store provider (it may
    not change between restarts of one checkpoint): the restart must fail."""
    def hook(event) -> None:
        if event.step == "adjust" and event.phase == "done":
            cp = Checkpoint(checkpoint)
            path = os.path.join(checkpoint, "offsets", str(cp.offset_batches()[-1]))
            lines = open(path).read().splitlines()
            meta = json.loads(lines[1])
            meta["conf"]["spark.sql.streaming.stateStore.providerClass"] = HDFS_PROVIDER
            lines[1] = json.dumps(meta)
            with open(path, "w") as handle:
                handle.write("\n".join(lines))
            crc = os.path.join(checkpoint, "offsets", f".{os.path.basename(path)}.crc")
            if os.path.exists(crc):  # the fenced checkpoint file manager writes none; Hadoop's own one did
                os.remove(crc)

    return hook


def test_a_restart_that_fails_rolls_back_and_the_query_runs_on_the_archived_state(spark, layout, monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    monkeypatch.setenv("STATEOPS_CONFIG", rocksdb_config(tmp_path, JOB))  # the failure: its RocksDB state on memory
    generate(layout, INPUT)
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    run_job(spark, spec, layout, settings=read_settings())
    archived_batch = Checkpoint(checkpoint).latest_committed_batch()
    generate(layout, GeneratorConfig(events=200, files=2, users=30, start="2026-01-01T01:00:00+00:00",
                                     minutes_per_file=15, seed=32))

    environment = Environment.from_env(layout=layout)
    report = recover(environment, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason="late data",
                                                  confirm=JOB, dry_run=False), spark=spark,
                     on_event=_break_provider(checkpoint))

    assert report.outcome == "rolled_back"
    assert "CANNOT_LOAD_STATE_STORE" in report.error and report.error.count("\n") == 0
    assert report.rollback["verification"]["ok"], report.rollback
    directory = report.archive_path
    failed = Checkpoint(os.path.join(directory, archive.FAILED))
    assert failed.state_provider(failed.offset_batches()[-1]) == HDFS_PROVIDER, "the failed attempt is kept"
    cp = Checkpoint(checkpoint)
    assert cp.state_provider(cp.offset_batches()[-1]) == ROCKSDB_PROVIDER
    assert cp.latest_committed_batch() > archived_batch, "the query ran again on the archived state"
    assert not archive.verify(spec.archive_path(layout), report.runbook_id)
    changes = [(c.setting, c.value) for c in overrides.history(layout, JOB)]
    assert changes == [("watermark_delay", "20 minutes"), ("sink_epoch", "1"), ("watermark_delay", None),
                       ("sink_epoch", "2")]
    assert maintenance.current(layout, JOB) is None and current_lease(layout, JOB) is None
    batches = oracle.typed_batches(layout.landing("events"), "events", checkpoint)
    assert set(table_rows(layout.table(JOB), COLUMNS)) == oracle.user_activity(batches, 10 * MINUTE)
    steps = [(e["step"], e["phase"]) for e in report.steps]
    assert ("restart", "failed") in steps and ("rollback_verify", "done") in steps

    listed = CliRunner().invoke(main, ["--home", layout.home, "archives", "list", JOB, "--json"])
    (item,) = json.loads(listed.output)
    assert (item["archive_id"], item["outcome"], item["latest_committed_batch"]) == (
        report.runbook_id, "rolled_back", archived_batch)
    shown = CliRunner().invoke(main, ["--home", layout.home, "archives", "show", report.runbook_id, "--verify"])
    assert shown.exit_code == 0 and "verify: ok, every file matches the manifest" in shown.output
    assert "outcome                  rolled_back: " in shown.output and "rollback_restart" in shown.output
    offsets = os.path.join(directory, archive.CHECKPOINT, "offsets", str(archived_batch))
    with open(offsets, "a") as handle:
        handle.write("\n")
    shown = CliRunner().invoke(main, ["--home", layout.home, "archives", "show", report.runbook_id, "--verify"])
    assert shown.exit_code == 1 and f"verify: 1 problems: offsets/{archived_batch}: " in shown.output


def test_rebuild_with_missing_input_writes_no_partial_row_and_no_duplicate(spark, layout):
    job = "user_sessions"
    spec = get_job(job)
    generate(layout, GeneratorConfig(events=600, files=6, users=20, minutes_per_file=15, duplicate_share=0.05,
                                     seed=33))
    for name in os.listdir(layout.landing("events")):  # a bad line in each file, its arrival (mtime) kept
        path = os.path.join(layout.landing("events"), name)
        stat = os.stat(path)
        with open(path, "a") as handle:
            handle.write(f"not an event ({name})\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    run_job(spark, spec, layout, settings=read_settings())
    columns = ["session_start", "session_end", "user_id", "events", "first_event_time", "last_event_time"]
    delay = spec.watermark_seconds * 1000
    before = set(table_rows(layout.table(job), columns))
    dead = sorted(table_rows(layout.deadletter_table(job), ["raw"]))
    assert len(dead) == oracle.malformed_count(layout.landing("events"), "events") > 0
    assert before == oracle.user_sessions(oracle.typed_batches(layout.landing("events"), "events"), delay)
    landing = layout.landing("events")
    oldest = min((n for n in os.listdir(landing) if not n.startswith((".", "_"))),
                 key=lambda n: os.path.getmtime(os.path.join(landing, n)))
    os.remove(os.path.join(landing, oldest))  # input retention took the oldest file

    environment = Environment.from_env(layout=layout)
    report = recover(environment, RecoveryRequest(job, "rebuild", confirm=job, dry_run=False), spark=spark)

    assert report.outcome == "succeeded", (report.error, report.verification)
    assert any("1 of the 6 files the old checkpoint read are gone" in note for note in report.notes)
    replay = json.loads(overrides.in_force(layout, job)[overrides.SINK_REPLAY].value)
    floor = replay["write_floor_ms"]
    assert floor is not None and replay["insert_if_absent_until_ms"] == max(r[0] for r in before)
    rebuilt = oracle.user_sessions(oracle.typed_batches(landing, "events"), delay)
    partial = {r for r in rebuilt if r[0] < floor and r not in before}
    assert partial, "the replay without the oldest file makes partial sessions: the floor must keep them out"
    got = table_rows(layout.table(job), columns)
    assert len(got) == len({(r[2], r[0]) for r in got}), "no idempotent key twice"
    assert sorted(table_rows(layout.deadletter_table(job), ["raw"])) == dead, "the replay judged no line again"
    keys = {(r[2], r[0]) for r in before}
    assert set(got) == before | {r for r in rebuilt if r[0] >= floor and (r[2], r[0]) not in keys}
