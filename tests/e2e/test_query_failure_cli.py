"""A query failing at runtime, through `stateops jobs run` in its own process: exit code 1 and one line on
stderr (job, query, batch, Spark's error class, the first line of its message, what to do, the log), with
the full trace (and Spark's console output) in the run's log under ops/<job>/logs/."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from tests.support.scenarios import rocksdb_config

# Long tier (the default run: the one line, the exit code and the log's place, from a failed query's error, in
# tests/unit/test_failures.py).
pytestmark = [pytest.mark.e2e, pytest.mark.long]

INPUT = GeneratorConfig(events=300, files=2, users=20, seed=1)
STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")


def test_corrupt_state_is_one_line_exit_1_and_a_full_log(spark, layout, tmp_path, monkeypatch):
    monkeypatch.setenv("STATEOPS_CONFIG", rocksdb_config(tmp_path, "user_activity"))  # a torn RocksDB changelog
    generate(layout, INPUT)
    spec = load_jobs()["user_activity"]
    run_job(spark, spec, layout, settings=read_settings())
    checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
    failing_batch = checkpoint.latest_committed_batch() + 1
    # What a torn write or a bad disk leaves: the newest changelog of one state partition is garbage.
    newest = max((f for f in checkpoint.state_files() if f.kind == "changelog"), key=lambda f: f.version)
    Path(newest.path).write_bytes(b"not a changelog")
    generate(layout, replace(INPUT, files=1, seed=2, start="2026-01-01T01:00:00+00:00"))

    proc = subprocess.run([STATEOPS, "jobs", "run", "user_activity"], env={**os.environ, "STATEOPS_HOME": layout.home},
                          capture_output=True, text=True, timeout=900)

    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(f"Error: user_activity: query user_activity failed in batch {failing_batch} with "
                           "CANNOT_LOAD_STATE_STORE"), line
    # Spark writes checkpoint files with Hadoop's checksums (FileSystemBasedCheckpointFileManager, session.py):
    # the garbage is caught by the changelog's `.crc` before RocksDB reads it.
    assert "An error occurred during loading state" in line
    assert f"(root cause: org.apache.hadoop.fs.ChecksumException: Checksum error: file:{newest.path} " in line
    assert "What to do:" in line and "`stateops audit user_activity --fast`" in line
    log = re.search(r"Full trace: (\S+)$", line).group(1)
    assert log.startswith(f"{layout.ops_dir('user_activity')}/logs/") and log.endswith(".log")
    text = Path(log).read_text()
    assert line.removeprefix("Error: ") in text
    assert "StreamingQueryException: " in text and "Traceback (most recent call last)" in text  # all of it
    assert "Caused by: org.apache.hadoop.fs.ChecksumException" in text and "=== Streaming Query ===" in text
    assert "ERROR MicroBatchExecution: Query user_activity [id" in text  # Spark's own log: here, not on stderr
