"""The retirement of a home's old dead-letter query (stateops.jobs.runtime.retirement) killed at each of its steps:
`stateops jobs run` SIGKILLed (its JVM with it) after the behind gap's dead letters are written (`judged`), after the
retirement is recorded (`recorded`), after the old checkpoint's archive is copied and verified (`archived`); then
run again without the fault. Oracle: every bad line of every landing file is one dead letter, exactly once; the output
equals the batch recomputation; the old checkpoint is gone and its archive, byte for byte, verifies."""
from __future__ import annotations

import os
import random
import subprocess

import pytest

from stateops.control.store import ControlStore
from stateops.faults import ENV
from stateops.jobs.runtime.retirement import RECORD
from stateops.layout import Layout
from stateops.checkpoints.archive import read_json
from stateops.storage.copies import verify_tree

from tests.support.kill_trials import STATEOPS, run_until_fault
from tests.support.legacy_homes import (deadletters, expected_deadletters, output_is_the_oracle,
                                       run_deadletter_query, run_stateful_query)
from tests.support.scenarios import builtin, more_input
from tests.support.tiers import FULL
from tests.support.trees import file_hashes

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

JOB = "user_activity"
STEPS = ["judged", "recorded", "archived"]


@pytest.mark.long  # the default run: the retirement behind and ahead (test_deadletters), a refused run retiring nothing (test_state_compatibility)
def test_a_retirement_killed_at_a_step_is_finished_by_the_next_run(spark, tmp_path):
    """Every step in the long tier, one at random in the default run."""
    for step in STEPS if FULL else [random.Random().choice(STEPS)]:
        _killed_at(spark, tmp_path / step, step)


def _killed_at(spark, folder, step: str) -> None:
    layout = Layout(str(folder / "stateops"))
    spec = builtin(layout, JOB)
    more_input(layout, hour=0, seed=91, files=2)                         # both queries
    run_stateful_query(spark, spec, layout)
    run_deadletter_query(spark, spec, layout)
    more_input(layout, hour=2, seed=92, files=1)                         # the stateful query only: behind
    run_stateful_query(spark, spec, layout)
    legacy = layout.deadletter_checkpoint(JOB)
    old_files = file_hashes(legacy)
    more_input(layout, hour=3, seed=93, files=1)

    run_until_fault(JOB, layout.home, f"retirement.step:job={JOB},step={step}")
    assert os.path.exists(legacy), "killed before the old checkpoint is removed"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run([STATEOPS, "jobs", "run", JOB], env={**env, "STATEOPS_HOME": layout.home},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    assert deadletters(layout) == expected_deadletters(layout)
    output_is_the_oracle(layout, spec)
    assert not os.path.exists(legacy)
    record = ControlStore(layout, JOB).read(RECORD)
    assert record["behind"]["files"] == 1
    archive = os.path.join(layout.home, "ops", "_orphans", "archives", record["archive_id"])
    assert file_hashes(os.path.join(archive, "checkpoint")) == old_files
    assert verify_tree(os.path.join(archive, "checkpoint"), read_json(os.path.join(archive, "manifest.json"))["files"]) == []
