"""The fault suite (marker `faults`, in the default run): what dies, and what is left afterwards.

- kill -9 at random points: two job chains (the append join `order_payments`, the MERGE window
  `user_activity`), each killed TRIALS times while it runs (`stateops jobs run` in its own process group,
  SIGKILL after 0 or 1 new commits plus a random delay: during startup, inside a batch, between the Delta
  commit and Spark's commit), restarted by the next trial, then finished. The deterministic kill between the
  Delta commit and Spark's commit is tests/e2e/test_kill_restart.py. After every trial the
  table holds no duplicate; at the end it equals the oracle (tests/oracle.py, replaying the batches as the
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

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.catalog import get_job, load_jobs
from stateops_cli.main import main
from jobs.failures import QueryFailed
from jobs.generator import GeneratorConfig, generate
from jobs.recovery import recover
from jobs.runner import run_job
from jobs.sink import query_app_id
from stateops.checkpoint import Checkpoint
from stateops.delta import open_table
from stateops.layout import Layout
from stateops.recovery import RecoveryRequest, archive
from stateops.recovery.model import RecoveryRefused
from tests import oracle
from tests.conftest import FAULT_COUNTS
from tests.delta_rows import table_rows

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")
TRIALS = 10  # per job: 20 kills in all
INPUT = GeneratorConfig(events=2400, files=36, users=120, late_share=0.03, duplicate_share=0.08,
                        malformed_share=0.02, orders=360, minutes_per_file=10, seed=41)
COLUMNS = {"order_payments": ["order_id", "payment_id", "order_time", "payment_time"],
           "user_activity": ["window_start", "window_end", "user_id", "events", "value_sum"]}
KEYS = {"order_payments": ["order_id", "payment_id"], "user_activity": ["window_start", "user_id"]}


def _committed(checkpoint: str) -> int:
    try:
        return len(Checkpoint(checkpoint).committed_batches())
    except FileNotFoundError:
        return 0


def _delta_batch(layout: Layout, job: str) -> int | None:
    """The newest batch of the job's query in its Delta table (None before the first)."""
    if not open_table(layout.table(job)):
        return None
    try:
        return DeltaTable(layout.table(job)).transaction_version(query_app_id(job, layout.checkpoint(job)))
    except (FileNotFoundError, OSError, ValueError):
        return None


def _kill_trial(layout: Layout, job: str, rng: random.Random, env: dict[str, str] | None = None) -> dict:
    """One run of `stateops jobs run JOB` (with `env` added to its environment), SIGKILLed at a random point.
    Returns where it landed."""
    checkpoint = layout.checkpoint(job)
    before = _committed(checkpoint)
    target = before + rng.randint(0, 1)
    delay = rng.uniform(0.0, 1.2)
    proc = subprocess.Popen([STATEOPS, "jobs", "run", job], env={**os.environ, "STATEOPS_HOME": layout.home, **(env or {})},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while _committed(checkpoint) < target:
            if proc.poll() is not None:
                raise AssertionError(f"{job} ended before the kill: {proc.stderr.read()[-2000:]}")
            assert time.monotonic() < deadline, f"{job} made no progress"
            time.sleep(0.02)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL, f"{job} ended before the kill"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    after = _committed(checkpoint)
    in_delta = _delta_batch(layout, job)
    rows = table_rows(layout.table(job), KEYS[job]) if open_table(layout.table(job)) else []
    return {"committed_before": before, "committed_after": after,
            "delta_ahead": in_delta is not None and in_delta >= after,  # killed between Delta and commits/N
            "duplicates": len(rows) - len(set(rows))}


def _chain(layout: Layout, job: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [_kill_trial(layout, job, rng) for _ in range(TRIALS)]


def _report(record_property, scenario: str, counts: dict) -> None:
    """The counts, printed in pytest's terminal summary whether the test passes or not."""
    record_property(FAULT_COUNTS, f"{scenario}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


def _expected(layout: Layout, job: str) -> set[tuple]:
    spec = load_jobs()[job]
    delay = spec.watermark_seconds * 1000
    batches = {i.name: oracle.typed_batches(layout.landing(i.name), i.name, layout.checkpoint(job))
               for i in spec.inputs}
    if job == "order_payments":
        return oracle.order_payments(batches["orders"], batches["payments"], delay)
    return oracle.user_activity(batches["events"], delay)


def test_kill_9_at_random_points_loses_nothing_and_duplicates_nothing(spark, tmp_path, record_property):
    homes = {job: Layout(str(tmp_path / job)) for job in COLUMNS}
    for layout in homes.values():
        generate(layout, INPUT)
    with ThreadPoolExecutor(max_workers=len(homes)) as pool:  # the two chains overlap their JVM startups
        trials = dict(zip(homes, pool.map(lambda job: _chain(homes[job], job, seed=len(job)), homes)))

    for job, layout in homes.items():
        result = run_job(spark, load_jobs()[job], layout)  # the last restart finishes the input
        got = table_rows(layout.table(job), COLUMNS[job])
        expected = _expected(layout, job)
        spec = load_jobs()[job]
        malformed = sum(oracle.malformed_count(layout.landing(i.name), i.name) for i in spec.inputs)
        dead = table_rows(layout.deadletter_table(job), ["raw"]) if open_table(layout.deadletter_table(job)) else []
        duplicates = len(got) - len(set(got)) + sum(t["duplicates"] for t in trials[job])
        counts = {"trials": len(trials[job]), "batches": _committed(layout.checkpoint(job)),
                  "killed_between_delta_and_commit": sum(t["delta_ahead"] for t in trials[job]),
                  "killed_before_first_new_commit": sum(t["committed_after"] == t["committed_before"]
                                                        for t in trials[job]),
                  "rows": len(got), "expected_rows": len(expected), "duplicates": duplicates,
                  "lost": len(expected - set(got)), "invented": len(set(got) - expected),
                  "dead_letters": len(dead), "malformed_lines": malformed,
                  "skipped_on_last_restart": result.batches_skipped}
        _report(record_property, f"kill -9 {job}", counts)
        assert counts["duplicates"] == 0 and counts["lost"] == 0 and counts["invented"] == 0, counts
        assert len(dead) == malformed, counts
    assert sum(len(t) for t in trials.values()) >= 20


def _sha(root: str) -> dict[str, str]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


SMALL = GeneratorConfig(events=400, files=4, users=30, late_share=0.05, duplicate_share=0.05, malformed_share=0.02,
                        minutes_per_file=15, seed=43)
JOB = "user_activity"


def _more_input(layout: Layout, seed: int, hour: int) -> None:
    generate(layout, replace(SMALL, files=2, seed=seed, start=f"2026-01-01T{hour:02d}:00:00+00:00"))


def test_a_corrupted_state_file_is_found_by_the_audit_and_repaired_from_the_archive(spark, layout, monkeypatch,
                                                                                   record_property):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    spec = get_job(JOB)
    generate(layout, SMALL)
    run_job(spark, spec, layout)
    adjusted = recover(layout, RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason="an archive",
                                               confirm=JOB, dry_run=False), spark=spark)
    assert adjusted.outcome == "succeeded", adjusted.error
    _more_input(layout, seed=44, hour=2)
    run_job(spark, get_job(JOB), layout)

    checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
    newest = max((f for f in checkpoint.state_files() if f.kind == "changelog"), key=lambda f: f.version)
    data = Path(newest.path).read_bytes()
    Path(newest.path).write_bytes(data[: len(data) // 2])  # a torn write

    audited = CliRunner().invoke(main, ["--home", layout.home, "audit", JOB, "--json"])
    assert audited.exit_code == 1, audited.output
    report = json.loads(audited.stdout)
    (broken,) = [f for f in report["findings"] if f["code"] == "STATE_UNREADABLE"]
    assert broken["severity"] == "error" and broken["store_name"] == "default", broken
    assert f"batch {checkpoint.latest_committed_batch()}" in broken["message"]
    assert f"--mode restore --archive ID --confirm {JOB}" in broken["recommendation"]
    _more_input(layout, seed=45, hour=3)
    with pytest.raises(QueryFailed, match="CANNOT_LOAD_STATE_STORE"):
        run_job(spark, get_job(JOB), layout)

    restored = recover(layout, RecoveryRequest(JOB, "restore", archive_id=adjusted.runbook_id, reason="corrupt",
                                               confirm=JOB, dry_run=False), spark=spark)
    assert restored.outcome == "succeeded", restored.error
    run_job(spark, get_job(JOB), layout)
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
    _report(record_property, "corrupt state -> restore", counts)
    assert set(got) == expected and counts["duplicates"] == 0, counts
    assert adjusted.runbook_id in archives and counts["lost_archives"] == 0, "every archive is whole"


@pytest.fixture
def small_archive_root(layout):
    """A 1 MiB tmpfs inside the home (the roots guard admits it): every file takes at least a page there, so
    a checkpoint of a few hundred small files that the runbook's size check admits does not fit."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: the out-of-space case runs where the tests run as root (CI)")
    root = os.path.join(layout.home, "small_disk")
    os.makedirs(root)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", root], capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(root)
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the out-of-space case needs one")
    try:
        yield root
    finally:
        subprocess.run(["umount", root], check=False)
        os.rmdir(root)


def test_an_archive_that_runs_out_of_space_fails_cleanly_and_leaves_the_original(spark, layout, tmp_path, monkeypatch,
                                                                                small_archive_root, record_property):
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\narchive_dir = "{small_archive_root}"\n')
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    spec = get_job(JOB)
    generate(layout, replace(SMALL, files=12))
    run_job(spark, spec, layout)
    checkpoint = spec.checkpoint_path(layout)
    before = _sha(checkpoint)
    assert sum(os.path.getsize(os.path.join(checkpoint, p)) for p in before) < 1 << 20 < len(before) * 4096

    request = RecoveryRequest(JOB, "adjust", watermark_delay="20 minutes", reason="full disk", confirm=JOB,
                              dry_run=False)
    with pytest.raises(RecoveryRefused, match="not enough room for the archive"):  # the default margin: refused
        recover(layout, request, spark=spark)
    assert _sha(checkpoint) == before
    monkeypatch.setenv("STATEOPS_ARCHIVE_MIN_FREE_BYTES", "0")  # now the bytes fit, the files do not

    report = recover(layout, request, spark=spark)

    assert report.outcome == "rolled_back", report  # nothing was changed, so nothing stays locked
    assert "No space left on device" in report.error and report.error.count("\n") == 0, report.error
    assert "the checkpoint is untouched" in report.error
    assert _sha(checkpoint) == before, "the original checkpoint is untouched"
    left = [os.path.join(d, n) for d, _, names in os.walk(small_archive_root) for n in names]
    assert not [p for p in left if f"{os.sep}{archive.CHECKPOINT}{os.sep}" in p], "no half copy is left"
    _report(record_property, "archive out of space", {"checkpoint_files": len(before), "original_changed": 0,
                                                      "half_copied_files_left": 0})
    _more_input(layout, seed=46, hour=4)
    resumed = run_job(spark, get_job(JOB), layout)
    assert resumed.batches == 2, "the job runs on after the failed runbook"
