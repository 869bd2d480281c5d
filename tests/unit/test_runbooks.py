"""The runbook engine's rules (stateops.runbooks), once for every runbook built on it (recovery, the home move,
retention's locks): resume after a kill at each step, one process at a time, a lost lock stops the next write, the
mirror. On local disk, no JVM; the journal on S3 is the storage contract's (tests/e2e/test_runbook_s3.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from stateops.faults import ENV
from stateops.layout import Layout
from stateops.recovery.journal import recovery_journal
from stateops.relocation.executor import Move
from stateops.relocation.plan import make_plan
from stateops.runbooks import Journal, RunbookBusy, RunbookStopped, Step, read_entries, run_step, run_steps
from stateops.storage import LockLost

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A drill runbook of three steps, each leaving its mark in acts.log; `c` is not idempotent and knows whether it
# completed (its own file exists).
DRILL = textwrap.dedent("""
    import os, sys
    from stateops.runbooks import Journal, Step, run_step
    folder = sys.argv[1]
    def act(name):
        def go():
            with open(os.path.join(folder, "acts.log"), "a") as handle:
                handle.write(name + "\\n")
            if name == "c":
                open(os.path.join(folder, "c.done"), "w").close()
            return {"by": name}
        return go
    journal = Journal(os.path.join(folder, "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb",
                      fix="run it again")
    with journal.held():
        for name in "abc":
            run_step(journal, name, act(name), idempotent=name != "c",
                     completed=lambda: os.path.exists(os.path.join(folder, "c.done")))
""")


def _drill(folder: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop(ENV, None)
    if fault:
        env[ENV] = fault
    return subprocess.run([sys.executable, "-c", DRILL, folder], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("fault,acts", [
    ("drill.after_step:step=a", "abc"),
    ("drill.after_step:step=b", "abc"),
    ("drill.after_step:step=c", "abc"),
    ("drill.before_done:step=b", "abbc"),   # acted, not journaled done: an idempotent step acts again
    ("drill.before_done:step=c", "abc"),    # not idempotent: its completed check counts it done, it does not act
])
def test_a_runbook_killed_at_each_step_resumes_where_it_stopped(tmp_path, fault, acts):
    killed = _drill(str(tmp_path), fault)
    assert killed.returncode == -9, killed.stderr
    finished = _drill(str(tmp_path))
    assert finished.returncode == 0, finished.stderr
    assert (tmp_path / "acts.log").read_text().split() == list(acts)
    entries = read_entries(str(tmp_path / "rb"))
    assert [e["step"] for e in entries if e["phase"] == "done"] == ["a", "b", "c"], "each step done once, in order"
    if fault.endswith("before_done:step=c"):
        assert entries[-1]["details"] == {"detected": "completed before the interruption"}


def _take_over(journal: Journal) -> None:
    """What a process that finds the runbook's lock stale does (stateops.storage.local: a new file under the lock's
    name), and the holder's next heartbeat, which finds it."""
    (lock,) = journal.holding.locks
    fresh = lock.path + ".taker"
    open(fresh, "w").close()
    os.replace(fresh, lock.path)
    with pytest.raises(LockLost):
        lock.renew()


def test_a_runbook_is_acted_by_one_process_at_a_time_and_the_mirror_gets_every_entry(tmp_path):
    mirrored, reported = [], []
    journal = Journal(str(tmp_path / "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb",
                      fix="wait for it", mirror=mirrored.append, report=reported.append)
    late = Journal(str(tmp_path / "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb", fix="wait for it")
    with journal.held():
        with pytest.raises(RunbookBusy, match=r"^drill rb is being executed by another process now \(pid "):
            with Journal(str(tmp_path / "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb",
                         fix="wait for it").held():
                pass
        run_steps(journal, [Step("a", lambda: {"n": 1}), Step("b", lambda: None)])
        with pytest.raises(RunbookBusy, match="has journal entry 0 written by another process"):
            late.record("a", "started")  # it read the journal before the first entry was written
    assert [(e.step, e.phase, e.details) for e in mirrored] == [
        ("a", "started", {}), ("a", "done", {"n": 1}), ("b", "started", {}), ("b", "done", {})]
    again = Journal(str(tmp_path / "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb", fix="-",
                    mirror=mirrored.append, report=reported.append)
    with again.held():
        assert run_step(again, "a", lambda: pytest.fail("a done step acts again")) == {"n": 1}
    assert len(mirrored) == 4, "a skipped step is reported, not journaled nor mirrored"
    assert [(e.step, e.phase) for e in reported[-1:]] == [("a", "skipped")]


def test_a_lost_lock_stops_the_next_write_in_one_line_and_the_mirror_says_so(tmp_path):
    mirrored = []
    journal = Journal(str(tmp_path / "rb"), kind="drill", runbook_id="rb", job="j", title="drill rb",
                      fix="run it again once the other process ended", mirror=mirrored.append)
    with journal.held():
        journal.record("a", "started")
        _take_over(journal)
        for _ in range(2):
            with pytest.raises(RunbookStopped) as stopped:
                journal.record("a", "done", {"n": 1})
    line = str(stopped.value)
    assert line.startswith("drill rb stopped before its next write (a): its lock ") and "\n" not in line
    assert line.endswith("Fix: run it again once the other process ended") and stopped.value.exit_code == 1
    assert [(e["step"], e["phase"]) for e in read_entries(str(tmp_path / "rb"))] == [("a", "started")]
    assert [(e.step, e.phase) for e in mirrored] == [("a", "started"), ("a", "stopped")], "journaled once"


def _home(tmp_path) -> Layout:
    layout = Layout(str(tmp_path / "home"))
    for n in range(3):
        os.makedirs(layout.landing("events"), exist_ok=True)
        with open(os.path.join(layout.landing("events"), f"e-{n}.json"), "w") as handle:
            handle.write(json.dumps({"n": n}) + "\n")
    return layout


def _move_losing_its_lock_at(step: str, tmp_path) -> tuple[Move, list]:
    """A move of a small home whose lock another process takes over as `step` starts."""
    old = _home(tmp_path)
    plan = make_plan(old, str(tmp_path / "new"), running=[], outside=[])
    events = []

    def report(name, event):
        events.append((name, event.get("phase")))
        if (name, event.get("phase")) == (step, "started"):
            _take_over(move.journal)

    from stateops.jobs.definition.environment import read_settings

    move = Move(plan, ["job"], settings=read_settings().control, actor="test", stop=False, report=report)
    return move, events


def _recovery_losing_its_lock_at(step: str, tmp_path):
    """The recovery runbook's journal (mirrored into `actions`) whose lock is taken over as `step` starts."""
    layout = Layout(str(tmp_path / "home"))
    journal = None

    def report(event):
        if (event.step, event.phase) == (step, "started"):
            _take_over(journal)

    journal = recovery_journal(layout, "job", "rb", str(tmp_path / "rb"), "test", on_event=report)
    return journal


@pytest.mark.parametrize("runbook", ["move", "recovery"])
def test_a_runbook_whose_lock_is_lost_stops_before_its_next_write(runbook, tmp_path):
    """The move's copy (a write per file) and recovery's archive step: the lock taken over as the step starts, the
    step's first write is refused, in one line, and nothing is written after."""
    if runbook == "move":
        move, events = _move_losing_its_lock_at("copy", tmp_path)
        with pytest.raises(RunbookStopped) as stopped:
            move.run()
        copied = [rel for rel in os.listdir(tmp_path / "new")] if (tmp_path / "new").exists() else []
        assert copied == ["ops"], "no file of the home was copied: only the move's own journal"
        assert ("copy", "stopped") in events and ("copy", "done") not in events
        entries = read_entries(move.directory)
        assert "the move " in str(stopped.value) and "(copy)" in str(stopped.value)
    else:
        journal = _recovery_losing_its_lock_at("archive", tmp_path)
        acted = []

        def archive():
            journal.ensure_held("archive")  # the step's first write
            acted.append("archive")

        with journal.held():
            with pytest.raises(RunbookStopped) as stopped:
                run_step(journal, "archive", archive)
        assert acted == []
        entries = read_entries(str(tmp_path / "rb"))
        from stateops import actions

        mirrored = [(r["action"], r["phase"]) for r in actions.read(Layout(str(tmp_path / "home")), "job")]
        assert ("recovery.archive", "stopped") in mirrored and ("recovery.archive", "failed") not in mirrored
        assert "runbook rb of job" in str(stopped.value) and "(archive)" in str(stopped.value)
    assert "\n" not in str(stopped.value) and stopped.value.exit_code == 1
    assert [e["phase"] for e in entries if e["step"] in ("copy", "archive")] == ["started"], entries
