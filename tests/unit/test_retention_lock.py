"""Retention's lock per root with a local control home (flock): a second hold of a root is refused in one line
naming the holder, other roots are held alongside, and a released root is free again. The S3 locks:
tests/e2e/test_retention_lock_s3.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from stateops.layout import Layout
from stateops.retention import lock

pytestmark = pytest.mark.unit


def test_a_held_root_is_refused_naming_its_holder_and_other_roots_are_free(tmp_path):
    layout = Layout(str(tmp_path / "home"))
    first, other = str(tmp_path / "home"), str(tmp_path / "elsewhere")
    with lock.hold(layout, (first,), run_id="run-first", actor="alice"):
        with open(lock.lock_path(layout, first)) as handle:
            assert json.load(handle)["run_id"] == "run-first"
        with pytest.raises(lock.RetentionLockedError) as caught:
            with lock.hold(layout, (other, first), run_id="run-second", actor="bob"):
                pass
        message = str(caught.value)
        assert message.startswith(f"another retention run holds {first}: run run-first (pid ")
        assert "by alice" in message and "\n" not in message
        assert message.endswith("a run that died or stopped releases its lock by itself once 60 s without renewal")
        with lock.hold(layout, (other,), run_id="run-third", actor="carol"):  # the refused run released `other`
            pass
    with lock.hold(layout, (first, other), run_id="run-fourth", actor="dave"):
        pass
    with open(lock.lock_path(layout, first)) as handle:
        assert handle.read() == ""  # the holder is cleared on release


def test_a_run_whose_lock_is_taken_over_stops_before_its_next_item_and_journals_it(tmp_path, monkeypatch):
    """The runbook engine's lost-lock rule (tests/unit/test_runbooks.py) in a retention run: the first item acts,
    another process takes the root's lock over, the second item is never started; `actions` says so once, and the
    run ends in one line (exit 1)."""
    from stateops import actions
    from stateops.retention.executor import Executor
    from stateops.retention.model import Item, ItemResult, Plan
    from stateops.retention.policy import Policies
    from stateops.retention.scope import Scope
    from stateops.roots import Roots
    from stateops.runbooks import RunbookStopped

    layout = Layout(str(tmp_path / "home"))
    items = tuple(Item(item_id=f"r000{n}", rule="ops_vacuum", action="vacuum", job="alpha",
                       target=layout.deadletter_table("alpha"), bytes=0, files=0, reason="r") for n in (1, 2))
    plan = Plan("p", "2026-11-28T00:00:00+00:00", layout.home, (layout.home,), items)
    scope = Scope(layout, {}, Roots.from_layout(layout, {}), Policies())
    monkeypatch.setattr(lock, "LOCK_TTL_SECONDS", 0.4)  # a heartbeat every 0.1 s
    acted = []

    class TakenOverAfterTheFirstItem(Executor):
        def _run(self, asked, admission):  # the act itself is not under test: the order around it is
            acted.append(asked.item_id)
            path = lock.lock_path(layout, layout.home)
            os.replace(_fresh_file(path), path)  # what a taker of a stale lock does (stateops.storage.local)
            time.sleep(0.5)  # the holder's heartbeat finds it
            return ItemResult(asked.item_id, asked.rule, asked.target, "done")

    with pytest.raises(RunbookStopped) as stopped:
        TakenOverAfterTheFirstItem(scope, plan, actor="test", verify=lambda entry: [], archive=lambda *a: None,
                                   replan=lambda: plan, current=plan, run_id="run-1").apply()
    assert acted == ["r0001"]
    line = str(stopped.value)
    assert line.startswith("retention run run-1 stopped before its next write (r0002): its lock ") and "\n" not in line
    rows = [(r["details"]["item_id"], r["phase"]) for r in actions.read(layout, "alpha", "retention")]
    assert rows == [("r0001", "started"), ("r0001", "done"), ("r0002", "stopped")]


def _fresh_file(path: str) -> str:
    fresh = path + ".taker"
    open(fresh, "w").close()
    return fresh
