"""One move of a local home where user_activity ran, as a user makes it (tests/e2e/test_home_move.py): the stages that
act run once (tests/e2e/conftest.py `journey`), each test checks one."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from stateops.control import acquire
from stateops.jobs.definition.environment import read_settings
from stateops.layout import Layout
from tests.support.trees import file_hashes

STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")


def stateops(*args: str, home: str) -> subprocess.CompletedProcess:
    """The CLI on `home`, as a user runs it (no config file)."""
    env = {**os.environ, "STATEOPS_HOME": home}
    env.pop("STATEOPS_CONFIG", None)
    return subprocess.run([STATEOPS, *args], capture_output=True, text=True, timeout=600, env=env)


@dataclass
class Journey:
    """One move of a local home where user_activity ran, as a user makes it: each stage's outcome, for the test of
    that stage (the stages that act run once, here; each test checks one)."""

    old: Layout
    new: Layout
    before: dict[str, str]             # the old home's files and their sums before anything
    plan: subprocess.CompletedProcess  # without --confirm
    after_plan: dict[str, str]
    refused: subprocess.CompletedProcess  # --confirm while the job runs
    before_move: dict[str, str]        # the old home once that run ended (its lease's epoch stays), as the move found it
    moved: subprocess.CompletedProcess    # --confirm --json
    after: dict[str, str]              # the old home once moved
    landed: set[str]                   # the new home's landing files right after the move


def make_journey(old: Layout, new: Layout) -> Journey:
    """The move of `old` to `new`: the plan, the refusal while the job runs, the move with --json."""
    before = file_hashes(old.home)
    plan = stateops("home", "move", "--to", new.home, home=old.home)
    after_plan = file_hashes(old.home) if not os.path.exists(new.home) else {}
    running = acquire(old, "user_activity", run_id="a-run", settings=read_settings().control)
    try:
        refused = stateops("home", "move", "--to", new.home, "--confirm", home=old.home)
    finally:
        running.release()
    before_move = file_hashes(old.home)
    moved = stateops("home", "move", "--to", new.home, "--confirm", "--json", home=old.home)
    landed = set(os.listdir(new.landing("events"))) if moved.returncode == 0 else set()
    return Journey(old, new, before, plan, after_plan, refused, before_move, moved, file_hashes(old.home), landed)
