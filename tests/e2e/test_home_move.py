"""Moving a home with every job's state (issue 44): `stateops home move --to URL`, as a user runs it.

Default run, one stage a test (the stages that act run once, in the module's fixture): a local home where
user_activity ran (tests/support/scenarios.py) moved to another folder: the plan changes nothing, a running job
without --stop is refused, the move reports each step in --json, the old home is unchanged byte for byte but its
MOVED.json and refuses every command naming the new one, the next run at the new home reads only the files landed
after the move and its table equals the batch recomputation of all input, and a copy of the home made by hand
(`cp -a`) is refused before it runs, naming the move command.

Long tier: the four jobs and a Kafka job, after several runs, moved local -> S3 -> another bucket -> local, each
time with new input after the move (tables against their oracles, deep audits equal before and after), and moves
killed at random points then run again (tests/e2e/test_home_move_chain.py).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from stateops.jobs.definition.environment import read_settings
from stateops.layout import Layout
from tests.support.home_moves import stateops
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import builtin, more_input
from tests.support.trees import file_hashes

pytestmark = pytest.mark.e2e


def test_the_plan_says_what_it_would_rewrite_and_changes_nothing(journey):
    assert journey.plan.returncode == 0, journey.plan.stderr
    assert "rewrite in the copy (they name the old home): " in journey.plan.stdout
    assert "file source logs" in journey.plan.stdout
    assert journey.after_plan == journey.before, "the plan changes nothing, and makes no new home"


def test_a_running_job_is_refused_in_one_line_naming_stop(journey):
    refused = journey.refused
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "user_activity is running" in refused.stderr and "add --stop" in refused.stderr


def test_the_move_reports_each_step_and_its_progress(journey):
    moved = journey.moved
    assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
    events = [json.loads(line) for line in moved.stdout.splitlines()]
    steps = [(e["step"], e.get("phase")) for e in events if e.get("phase") in ("started", "done")]
    for step in ("lock", "copy", "rewrite", "verify", "mark", "unlock"):
        assert (step, "done") in steps, steps
    assert any(e.get("phase") == "progress" and e["files"] == e["of_files"] for e in events)
    assert events[-1]["step"] == "moved" and events[-1]["to"] == journey.new.home


def test_the_old_home_is_unchanged_but_its_mark_and_refuses_every_command_naming_the_new_one(journey):
    before, after = journey.before_move, journey.after
    assert set(after) - set(before) == {"MOVED.json"}
    assert {rel: after[rel] for rel in before} == before, "the old home is unchanged but its mark"
    status = stateops("jobs", "status", home=journey.old.home)
    assert status.returncode == 2 and f"was moved to {journey.new.home}" in status.stderr, status.stderr


def test_the_next_run_at_the_new_home_reads_only_new_files_and_equals_the_oracle(journey, spark):
    new = journey.new
    more_input(new, hour=3, seed=7)  # two files landed after the move
    lines = sum(1 for name in set(os.listdir(new.landing("events"))) - journey.landed
                for line in open(os.path.join(new.landing("events"), name)) if line.strip())
    from stateops.jobs.runtime.runner import run_job

    spec = builtin(new, "user_activity")
    result = run_job(spark, spec, new, settings=read_settings())
    assert result.input_rows == lines, "the next run read only the files landed after the move"
    assert_equals_oracle(new, spec)


@pytest.mark.long  # the default run: a landing moved without its checkpoint and a checkpoint moved away refused
# before a run (tests/unit/test_relocation.py, the same placement check)
def test_a_copy_of_the_home_made_by_hand_is_refused_before_it_runs(journey, tmp_path):
    by_hand = tmp_path / "copied"
    shutil.copytree(journey.new.home, by_hand)
    more_input(Layout(str(by_hand)), hour=5, seed=8)
    untouched = file_hashes(str(by_hand / "checkpoints"))
    run = stateops("jobs", "run", "user_activity", home=str(by_hand))
    assert run.returncode == 2, run.stdout + run.stderr
    assert "stateops home move --to URL" in run.stderr and "nothing was run" in run.stderr
    assert file_hashes(str(by_hand / "checkpoints")) == untouched
