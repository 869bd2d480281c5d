"""A batch's time in parts (stateops.profile.parts) names the part that was made slow on purpose.

One run of a user's job over four files, one batch each (tests/support/slow_parts_job.py; the run: the `slowed`
fixture): batch 1's parse is slowed, batch 2's state updates, batch 3's sink (a `sleep` fault before its Delta
commit). Real Spark, real Delta; oracle: the sleeps themselves (each batch's largest part is the one slowed, and it
took most of the sleep at least), and the batches' durations as Spark reported them (the parts add up to them, the
unexplained rest small). The four built-in jobs' parts are checked the same way by their oracle tests
(tests/spark/test_jobs_oracle.py).
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stateops.faults import ENV as FAULTS
from stateops.profile.parts import largest
from stateops.profile.report import profiles
from tests.support.user_configs import events_job_config
from tests.support.slow_parts_job import (EVENTS_PER_FILE, FILES, PARSE_PAUSE, SINK_PAUSE, SPEC, STATE_PAUSE,
                                          USERS)

pytestmark = pytest.mark.spark


def test_the_part_made_slow_is_the_batchs_largest_and_the_parts_add_up(slowed):
    batches = {b["batch_id"]: b for b in profiles(slowed, SPEC.name, batches=20)}
    assert set(range(FILES)) <= set(batches), sorted(batches)
    slow = {1: ("read_parse", EVENTS_PER_FILE * PARSE_PAUSE),
              2: ("state_updates:applyInPandasWithState", USERS * STATE_PAUSE / 2),
              3: ("sink_write", SINK_PAUSE)}
    for batch_id, (part, seconds) in slow.items():
        parts = batches[batch_id]["parts"]
        assert largest(parts) == part, (batch_id, parts, batches[batch_id]["operators"])
        assert parts[part] >= 0.7 * seconds * 1000, (batch_id, parts)
    for batch in batches.values():
        parts = batch["parts"]
        assert abs(sum(parts.values()) - batch["duration_ms"]) <= len(parts), batch  # whole ms, rounded each
    median = sorted(batches.values(), key=lambda b: b["duration_ms"])[len(batches) // 2]
    assert median["parts"]["rest"] <= 0.15 * median["duration_ms"], median
    (op,) = batches[2]["operators"]
    assert op["operator"] == "applyInPandasWithState" and op["update_ms"] >= USERS * STATE_PAUSE * 1000 * 0.7, op


def test_jobs_profile_prints_the_batches_and_their_parts(slowed, tmp_path):
    """The CLI over the progress table alone: JSON with the contract's fields, text with the parts' medians."""
    from stateops.cli.main import main

    env = {"STATEOPS_HOME": slowed.home, FAULTS: ""}
    config = events_job_config(tmp_path, SPEC)

    runner = CliRunner()
    done = runner.invoke(main, ["--config", str(config), "jobs", "profile", "slow_parts", "--batches", "2", "--json"],
                         env=env)
    assert done.exit_code == 0, done.output
    found = json.loads(done.output)
    last = found[-1]["batch_id"]  # the files' three batches, and the no-data batch the watermark's move runs
    assert last >= 2 and [b["batch_id"] for b in found] == [last - 1, last]
    for batch in found:
        assert {"batch_id", "duration_ms", "parts", "operators"} <= set(batch)
        assert {"planning", "read_parse", "state_commit", "sink_write", "dead_letters", "rest"} <= set(batch["parts"])
        (op,) = batch["operators"]
        assert {"commit_ms", "update_ms", "removal_ms", "store"} <= set(op)
        assert op["operator"] == "applyInPandasWithState"
    text = runner.invoke(main, ["--config", str(config), "jobs", "profile", "slow_parts"], env=env)
    assert text.exit_code == 0, text.output
    assert text.output.startswith(f"slow_parts: {last + 1} batches (0..{last}), median "), text.output
    assert "state_updates:applyInPandasWithState" in text.output
    unknown = runner.invoke(main, ["--config", str(config), "jobs", "profile", "nobody"], env=env)
    assert unknown.exit_code == 2 and "nobody" in unknown.output
