"""The fault suite (marker `faults`, in the default run): what dies, and what is left afterwards.

- kill -9 at random points: two job chains (the append join `order_payments`, the MERGE window
  `user_activity`), each killed TRIALS times while it runs (a few in the default run, 20 in the long tier) (`stateops jobs run` in its own process group,
  SIGKILL after 0 or 1 new commits plus a random delay: during startup, inside a batch, between the Delta
  commit and Spark's commit), restarted by the next trial, then finished. The deterministic kill between the
  Delta commit and Spark's commit is tests/e2e/test_kill_restart.py. After every trial the
  table holds no duplicate; at the end it equals the oracle (tests/support/oracle.py, replaying the batches as the
  checkpoint's logs say they were composed) and every malformed line is in the dead-letter table. The counts
  are printed in pytest's terminal summary.
- a corrupted state file (truncated, as a torn write leaves it): the deep audit reports STATE_UNREADABLE
  naming the store, the query fails on it, and `recover --mode restore` from the archive repairs it: the
  query runs again and the table equals the oracle.
- an archive that runs out of space (a 1 MiB tmpfs as the archive root; small files take a page each there):
  the runbook fails with one line, the original checkpoint is byte for byte untouched, nothing half-copied
  is left behind, and the job runs on.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.environment import Environment, get_job, load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.failures import QueryFailed
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.layout import Layout
from stateops.recovery import RecoveryRequest
from stateops.checkpoints import archive
from stateops.recovery.model import RecoveryRefused
from stateops.cli.main import main
from stateops.checkpoints.restart import DELTAS
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.delta_writers import spark_writer_available
from tests.support.kill_trials import chain, committed, record_counts, trial_counts
from tests.support.outcomes import COLUMNS, outcome
from tests.support.scenarios import SMALL, more_input
from tests.support.tiers import trials
from tests.support.trees import file_hashes

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

TRIALS = trials(2)  # per job
FILES = max(7, round(3.6 * TRIALS))  # about as many micro-batches as the trials may advance, and more after them
INPUT = GeneratorConfig(events=66 * FILES, files=FILES, users=120, late_share=0.03, duplicate_share=0.08,
                        malformed_share=0.02, orders=10 * FILES, minutes_per_file=10, seed=41)


@pytest.mark.long  # the default run: the deterministic kill between the Delta commit and commits/N (test_kill_restart), the store switch killed between any two writes (tests/unit/test_store_switch.py)
def test_kill_9_at_random_points_loses_nothing_and_duplicates_nothing(spark, tmp_path, record_property):
    homes = {job: Layout(str(tmp_path / job)) for job in COLUMNS}
    for layout in homes.values():
        generate(layout, INPUT)
    # The two chains overlap their JVM startups; every other trial writes with Delta's Spark writer (when
    # scripts/setup fetched its jars; without Maven the chains run on delta-rs).
    with ThreadPoolExecutor(max_workers=len(homes)) as pool:
        done = dict(zip(homes, pool.map(lambda job: chain(homes[job], job, TRIALS, seed=len(job),
                                                          alternate_writers=spark_writer_available()), homes)))

    for job, layout in homes.items():
        spec = load_jobs()[job]
        result = run_job(spark, spec, layout, settings=read_settings())  # the last restart finishes the input
        counts = {**trial_counts(done[job]),
                  "trials_on_the_spark_writer": len(done[job][1::2]) if spark_writer_available() else 0,
                  "batches": committed(layout.checkpoint(job)), **outcome(layout, spec),
                  "skipped_on_last_restart": result.batches_skipped}
        counts["duplicates"] += counts.pop("duplicates_after_a_trial")
        record_counts(record_property, f"kill -9 {job}", counts)
        assert counts["duplicates"] == 0 and counts["lost"] == 0 and counts["invented"] == 0, counts
        assert counts["dead_letters"] == counts["malformed_lines"], counts
    assert sum(len(t) for t in done.values()) == 2 * TRIALS


JOB = "user_activity"


@pytest.mark.long  # the default run: a failed restart rolled back onto the archived state (test_recovery),
# the archive's verification (tests/unit/test_recovery.py)
def test_a_corrupted_state_file_is_found_by_the_audit_and_repaired_from_the_archive(spark, scenario, monkeypatch,
                                                                                   record_property):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    layout = scenario("user_activity_small")  # SMALL, run once
    spec = get_job(JOB)
    environment = Environment.from_env(layout=layout)
    adjusted = recover(environment, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason="an archive",
                                                    confirm=JOB, dry_run=False), spark=spark)
    assert adjusted.outcome == "succeeded", adjusted.error
    more_input(layout, hour=2, seed=44)
    run_job(spark, get_job(JOB), layout, settings=read_settings())

    checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
    newest = max((f for f in checkpoint.state_files() if f.kind in DELTAS), key=lambda f: f.version)  # the store's own
    data = Path(newest.path).read_bytes()
    Path(newest.path).write_bytes(data[: len(data) // 2])  # a torn write

    audited = CliRunner().invoke(main, ["--home", layout.home, "audit", JOB, "--json"])
    assert audited.exit_code == 1, audited.output
    report = json.loads(audited.stdout)
    (broken,) = [f for f in report["findings"] if f["code"] == "STATE_UNREADABLE"]
    assert broken["severity"] == "error" and broken["store_name"] == "default", broken
    assert f"batch {checkpoint.latest_committed_batch()}" in broken["message"]
    assert f"--mode restore --archive ID --confirm {JOB}" in broken["recommendation"]
    more_input(layout, hour=3, seed=45)
    with pytest.raises(QueryFailed, match="CANNOT_LOAD_STATE_STORE"):
        run_job(spark, get_job(JOB), layout, settings=read_settings())

    environment = Environment.from_env(layout=layout)
    restored = recover(environment, RecoveryRequest(JOB, "restore", archive_id=adjusted.runbook_id, reason="corrupt",
                                                    confirm=JOB, dry_run=False), spark=spark)
    assert restored.outcome == "succeeded", restored.error
    run_job(spark, get_job(JOB), layout, settings=read_settings())
    again = CliRunner().invoke(main, ["--home", layout.home, "audit", JOB, "--json"])
    assert "STATE_UNREADABLE" not in again.stdout and again.exit_code in (0, 1), again.output
    delay = get_job(JOB).watermark_seconds * 1000
    assert delay == spec.watermark_seconds * 1000, "the restore brought the archived settings back"
    expected = oracle.user_activity(oracle.typed_batches(layout.landing("events"), "events",
                                                         layout.checkpoint(JOB)), delay)
    got = table_rows(layout.table(JOB), COLUMNS[JOB])
    archives = [os.path.basename(a["path"].rstrip("/")) for a in archive.list_archives(spec.archive_path(layout))]
    counts = {"rows": len(got), "expected_rows": len(expected), "duplicates": len(got) - len(set(got)),
              "lost": len(expected - set(got)), "invented": len(set(got) - expected), "archives": len(archives),
              "lost_archives": sum(1 for a in archives if archive.verify(spec.archive_path(layout), a))}
    record_counts(record_property, "corrupt state -> restore", counts)
    assert set(got) == expected and counts["duplicates"] == 0, counts
    assert adjusted.runbook_id in archives and counts["lost_archives"] == 0, "every archive is whole"


@pytest.mark.long  # the default run: no room for the archive refused before a runbook acts (tests/unit/test_recovery_preflight.py)
def test_an_archive_that_runs_out_of_space_fails_cleanly_and_leaves_the_original(spark, layout, tmp_path, monkeypatch,
                                                                                small_archive_root, record_property):
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\narchive_dir = "{small_archive_root}"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    spec = get_job(JOB)
    generate(layout, replace(SMALL, files=16))  # enough batches for more files than the small disk's inodes
    run_job(spark, spec, layout, settings=read_settings())
    checkpoint = spec.checkpoint_path(layout)
    before = file_hashes(checkpoint)
    assert sum(os.path.getsize(os.path.join(checkpoint, p)) for p in before) < 1 << 20 < len(before) * 4096

    request = RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason="full disk", confirm=JOB,
                              dry_run=False)
    environment = Environment.from_env(layout=layout)
    with pytest.raises(RecoveryRefused, match="not enough room for the archive"):  # the default margin: refused
        recover(environment, request, spark=spark)
    assert file_hashes(checkpoint) == before
    monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", "0")  # now the bytes fit, the files do not

    environment = Environment.from_env(layout=layout)
    report = recover(environment, request, spark=spark)

    assert report.outcome == "rolled_back", report  # nothing was changed, so nothing stays locked
    assert "No space left on device" in report.error and report.error.count("\n") == 0, report.error
    assert "the checkpoint is untouched" in report.error
    assert file_hashes(checkpoint) == before, "the original checkpoint is untouched"
    left = [os.path.join(d, n) for d, _, names in os.walk(small_archive_root) for n in names]
    assert not [p for p in left if f"{os.sep}{archive.CHECKPOINT}{os.sep}" in p], "no half copy is left"
    record_counts(record_property, "archive out of space", {"checkpoint_files": len(before), "original_changed": 0,
                                                             "half_copied_files_left": 0})
    more_input(layout, hour=4, seed=46)
    resumed = run_job(spark, get_job(JOB), layout, settings=read_settings())
    assert resumed.batches == 2, "the job runs on after the failed runbook"
