"""The store switch killed at random places (SIGKILL at fault points, stateops/faults.py), run again each time from the
CLI in a new process: inside the switch (after a store was written to the scratch folder, after a store folder's old
files left, after a file moved in, after the offset log was rewritten) and around it (the step acted but not yet
journaled, journaled done, the restart done). Each attempt resumes the one runbook; the last ends with the state of
the switched batch equal, row for row, to the state before (Spark's state reader), in RocksDB, the table equal to the
oracle (nothing lost, nothing duplicated), and the old in-memory state restorable from the runbook's archive: restored,
the job runs on it again, oracle-exact.

The kills are drawn from the points the switch passes (seeded, so a failure replays); `STATEOPS_TEST_SEED` picks
other draws. Each point fires on a count of the attempt it is in (a resumed attempt counts its own writes from 0)."""
from __future__ import annotations

import json
import os
import random
import signal

import pytest

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import maintenance
from stateops.jobs.definition.environment import Environment
from stateops.jobs.demo.generator import generate
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints import archive
from stateops.runbooks import read_entries
from stateops.checkpoints.state_store import HDFS_PROVIDER, ROCKSDB_PROVIDER
from tests.support.audit_queries import state_rows
from tests.support.cli_attempts import attempt
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import SMALL, builtin, more_input

pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
SEED = int(os.environ.get("STATEOPS_TEST_SEED", "7"))
INSIDE = ["part=write,n=0", "part=write,n=1", "part=cleared,n=0", "part=moved,n=1", "part=moved,n=5",
          "part=moved,n=9", "part=recorded"]
AROUND = [("runbook.before_done", "step=switch_store"), ("runbook.after_step", "step=switch_store"),
          ("runbook.after_step", "step=restart")]


def test_a_switch_killed_anywhere_resumes_and_the_old_state_stays_restorable(spark, layout, tmp_path, monkeypatch):
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.{JOB}]\nstate_store = "memory"\nshuffle_partitions = 4\n')
    for name, value in {"STATEOPS_CONFIG": str(config), "STATEOPS_HOME": layout.home,
                        "STATEOPS_RECOVERY_VERIFY_BATCHES": "1", "STATEOPS_ARCHIVE_MIN_FREE_BYTES": "0"}.items():
        monkeypatch.setenv(name, value)
    environment = Environment.from_env(layout=layout)
    generate(layout, SMALL)
    run_job(spark, environment.catalog.job(JOB), layout, settings=environment.settings)
    checkpoint = layout.checkpoint(JOB)
    batch = Checkpoint.open(checkpoint).latest_committed_batch()
    before = state_rows(spark, checkpoint, batch)
    assert any(before.values())
    more_input(layout, hour=2, seed=71)
    draw = random.Random(SEED)
    kills = [("switch.part", f"job={JOB},{at}") for at in sorted(draw.sample(INSIDE, 4), key=INSIDE.index)]
    kills += [(point, at) for point, at in AROUND]
    root = builtin(layout, JOB).archive_path(layout)
    command = ["recover", "run", JOB, "--mode", "switch-store", "--to", "rocksdb", "--confirm", JOB, "--json"]

    runbook = None
    for point, at in kills:
        done = attempt(layout.home, command, f"{point}:{at}")
        assert done.returncode == -signal.SIGKILL, (point, at, done.stderr[-3000:])
        assert f"fault {point} job={JOB}" in done.stderr
        runbook = runbook or maintenance.current(layout, JOB).runbook_id
        assert maintenance.current(layout, JOB).runbook_id == runbook, "one runbook, resumed each time"
        assert archive.verify(root, runbook) == [], f"the archive verifies after the kill at {point}:{at}"

    final = attempt(layout.home, command, None)
    assert final.returncode == 0, final.stderr[-3000:]
    report = json.loads(final.stdout)
    assert report["outcome"] == "succeeded" and report["runbook_id"] == runbook
    journal = read_entries(archive.runbook_dir(root, runbook))
    assert [e["phase"] for e in journal if e["step"] == "switch_store"].count("done") == 1
    switched = Checkpoint.open(checkpoint)
    assert switched.state_provider(batch) == ROCKSDB_PROVIDER
    assert state_rows(spark, checkpoint, batch) == before, "the switched batch's state, row for row"
    assert_equals_oracle(layout, builtin(layout, JOB))

    # The old state is in the archive: restored, the job is back on the in-memory store and runs on, exact.
    restored = attempt(layout.home, ["recover", "run", JOB, "--mode", "restore", "--archive", runbook, "--confirm",
                                      JOB, "--json"], None)
    assert restored.returncode == 0, restored.stderr[-3000:]
    back = Checkpoint.open(checkpoint)
    assert back.state_provider(back.offset_batches()[-1]) == HDFS_PROVIDER
    assert state_rows(spark, checkpoint, batch) == before
    assert_equals_oracle(layout, builtin(layout, JOB))
