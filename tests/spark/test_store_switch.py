"""The runbook's store switch (`stateops recover run JOB --mode switch-store --to rocksdb|memory`): a job's state
moves between Spark's in-memory store and RocksDB without replaying any input, both ways, and what cannot move is
refused in one line before anything changes.

Oracles: Spark's state reader (every operator and store, the same rows before and after, at the same batch),
Spark's offset log (the provider it restarts with) and state files (the target provider's kinds at version N+1),
the checkpoint's file-source log (the restart read only the files that arrived after the switch), the batch
recomputation of the input (tests/support/outcomes.py), the file system before and after a refusal."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.cli.main import main
from stateops.jobs.definition.environment import Environment
from stateops.jobs.demo.generator import generate
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.recovery import RecoveryRequest
from stateops.checkpoints import archive
from stateops.recovery.store_switch import SCRATCH
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER
from tests.support.audit_queries import state_rows
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import SMALL, builtin, more_input
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark

KINDS = {ROCKSDB_PROVIDER: {"zip"}, HDFS_PROVIDER: {"snapshot"}}
# order_payments: orders and payments too; user_actions: many users, so that some go quiet and time out
INPUT = {"order_payments": replace(SMALL, orders=80), "user_actions": replace(SMALL, users=300)}


def _configure(layout, tmp_path, monkeypatch, job: str, store: str) -> None:
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{job}]\nstate_store = "{store}"\n')
    for name, value in {"STATEOPS_CONFIG": str(config), "STATEOPS_HOME": layout.home,
                        "STATEOPS_RECOVERY_VERIFY_BATCHES": "1", "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}.items():
        monkeypatch.setenv(name, value)


def _run(spark, layout, job: str) -> None:
    """Run the job once (bounded) as the test's config has it."""
    environment = Environment.from_env(layout=layout)
    run_job(spark, environment.catalog.job(job), layout, settings=environment.settings)


def _switch(spark, layout, job: str, to: str, seed: int, hour: int):
    """Land new input, switch the job's store, and check the switch against Spark's own reader and logs."""
    checkpoint = Checkpoint.open(layout.checkpoint(job))
    batch = checkpoint.latest_committed_batch()
    before = state_rows(spark, checkpoint.path, batch)
    read_before = {p for p, _ in checkpoint.source_files().get(0, [])}
    if job == "order_payments":  # orders numbered apart from the earlier ones
        generate(layout, replace(INPUT[job], files=2, events=0, orders=40, seed=seed, first_order=seed * 1000,
                                 start=f"2026-01-01T{hour:02d}:00:00+00:00"))
    else:
        more_input(layout, hour=hour, seed=seed, base=INPUT.get(job, SMALL))
    environment = Environment.from_env(layout=layout)
    report = recover(environment, RecoveryRequest(job, "switch-store", to_store=to, confirm=job, dry_run=False,
                                                  reason="the state outgrew its store"), spark=spark)
    assert report.outcome == "succeeded", (report.error, report.verification)
    provider = ROCKSDB_PROVIDER if to == "rocksdb" else HDFS_PROVIDER
    after = Checkpoint.open(checkpoint.path)
    assert after.state_provider(batch) == provider and after.state_provider(after.offset_batches()[-1]) == provider
    assert {f.kind for f in after.state_files() if f.version == batch + 1} == KINDS[provider]
    assert state_rows(spark, checkpoint.path, batch) == before, "the state of the switched batch is the same rows"
    assert any(before.values()), "there was state to switch"
    (step,) = [e["details"] for e in report.steps if e["step"] == "switch_store" and e["phase"] == "done"]
    assert sum(sum(counts) for counts in step["rows"].values()) == sum(len(v) for v in before.values())
    # the restart read only the files that arrived after the switch: every batch after it names new files only
    cut = checkpoint.source_offsets(batch)[0]["logOffset"]  # the file-source log entry batch N ended at
    new_reads = [p for p, entry in after.source_files().get(0, []) if entry > cut]
    assert new_reads and not set(new_reads) & read_before
    assert after.committed_batches()[-1] > batch
    assert not os.path.exists(os.path.join(checkpoint.path, SCRATCH))
    assert not archive.verify(builtin(layout, job).archive_path(layout), report.runbook_id), "the archive verifies"
    assert_equals_oracle(layout, builtin(layout, job))
    return report


# user_activity in the default run; the session windows, the join (four stores each way) and applyInPandasWithState
# in the long tier: the switch's writer writes each store by its schema alone (tests/unit/test_store_switch.py: every
# write and what a kill between two leaves; the refusals below)
@pytest.mark.parametrize("job", ["user_activity", *(pytest.param(job, marks=pytest.mark.long)
                                                    for job in ("user_sessions", "order_payments", "user_actions"))])
def test_switch_store_both_ways_keeps_the_state_and_replays_nothing(spark, layout, tmp_path, monkeypatch, job):
    _configure(layout, tmp_path, monkeypatch, job, "memory")
    generate(layout, INPUT.get(job, SMALL))
    _run(spark, layout, job)
    assert Checkpoint.open(layout.checkpoint(job)).state_provider(0) == HDFS_PROVIDER
    _switch(spark, layout, job, "rocksdb", seed=61, hour=2)
    described = CliRunner().invoke(main, ["jobs", "describe", job, "--json"])
    assert '"changelog": {' in described.output and '"value": true' in described.output.split('"changelog"')[1][:80]
    _switch(spark, layout, job, "memory", seed=62, hour=4)


def test_what_the_in_memory_store_cannot_hold_is_refused_in_one_line(spark, layout, tmp_path, monkeypatch):
    _configure(layout, tmp_path, monkeypatch, "order_payments", "rocksdb")
    generate(layout, INPUT["order_payments"])
    _run(spark, layout, "order_payments")
    before = file_hashes(layout.home)
    for args, expected in (
            (["order_payments", "--mode", "switch-store", "--to", "memory"],
             "order_payments: cannot switch the state to the memory store: operator 0 is a stream-stream join in "
             "state format 4, whose stores are column families, which the in-memory store does not have"),
            (["order_payments", "--mode", "switch-store", "--to", "rocksdb"],
             "order_payments: its state is already in the rocksdb store; nothing to switch. Fix: pass the other --to"),
            (["order_payments", "--mode", "switch-store", "--to", "disk"],
             "--to: 'disk' is not a state store. Fix: pass --to rocksdb or memory"),
            (["order_payments", "--mode", "switch-store"], "--to: is required for mode switch-store")):
        done = CliRunner().invoke(main, ["recover", "run", *args, "--confirm", "order_payments"])
        assert done.exit_code == 2, done.output
        (line,) = done.stderr.strip().splitlines()
        assert expected in line, line
    assert file_hashes(layout.home) == before, "a refusal changes nothing"


def test_the_memory_guard_switches_a_job_whose_state_passes_the_threshold(spark, layout, tmp_path, monkeypatch):
    """An in-memory job whose state passes audit.state_memory_share_error of the heap the settings name: the deep
    audit's STATE_MEMORY error makes the growth sensor launch the switch-store runbook (auto mode), which completes:
    the same state, now in RocksDB, whose deep audits (the runbook's own) hold no STATE_MEMORY: the next ticks
    launch nothing more."""
    from dagster import instance_for_test

    from stateops.audit import deep_audit, record
    from tests.support.sensor_harness import RUNBOOK_OP, Harness

    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nstate_store = "memory"\nshuffle_partitions = 4\n\n'
                      "[audit]\nstate_memory_heap_bytes = 65536\n\n"  # 64 KiB: this state is past half of it
                      '[remediation.jobs.user_activity]\nmode = "auto"\n')
    for name, value in {"STATEOPS_CONFIG": str(config), "STATEOPS_HOME": layout.home,
                        "STATEOPS_RECOVERY_VERIFY_BATCHES": "1", "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}.items():
        monkeypatch.setenv(name, value)
    job = "user_activity"
    generate(layout, SMALL)
    _run(spark, layout, job)
    checkpoint = layout.checkpoint(job)
    batch = Checkpoint.open(checkpoint).latest_committed_batch()
    before = state_rows(spark, checkpoint, batch)
    environment = Environment.from_env(layout=layout)
    target = environment.catalog.job(job)
    from stateops.jobs.definition.targets import resolve_audit

    audit = resolve_audit(job, environment.catalog)
    report = deep_audit(spark, checkpoint, thresholds=audit.thresholds, layout=layout, job=job)
    (found,) = [f for f in report.findings if f.code == "STATE_MEMORY"]
    assert found.severity == "error", found
    record(layout, report)
    more_input(layout, hour=2, seed=63)
    with instance_for_test() as instance:
        harness = Harness(instance)
        ticked = harness.tick("state_growth_sensor")
        (request,) = ticked.run_requests
        run_config = request.run_config["ops"][RUNBOOK_OP]["config"]
        assert (request.job_name, run_config["mode"], run_config["to_store"], run_config["confirm"]) == (
            "state_recovery", "switch-store", "rocksdb", job)
        assert request.tags["stateops/rule"] == "growth.state_memory -> switch-store (rocksdb)"
        assert harness.launch(request).success
        for _ in range(3):  # the runbook's own deep audits (RocksDB now) are the latest: nothing more to act on
            result = harness.tick("state_growth_sensor", ticked.cursor)
            (part,) = [p for p in result.skip_reason.skip_message.split(" | ") if p.startswith(job)]
            assert not result.run_requests and "shows no growth to act on" in part, part
    switched = Checkpoint.open(checkpoint)
    assert switched.state_provider(batch) == ROCKSDB_PROVIDER
    assert switched.state_provider(switched.offset_batches()[-1]) == ROCKSDB_PROVIDER
    assert state_rows(spark, checkpoint, batch) == before
    assert_equals_oracle(layout, builtin(layout, target.name))
