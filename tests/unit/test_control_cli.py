"""`stateops jobs status|stop|override|lock|unlock|describe|run` against real control records and ops
tables, without a JVM: JSON contracts, one-line refusals with exit 2, effective settings and sources."""
from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.cli.main import main
from stateops.jobs.runtime.runner import run_job
from stateops import actions
from stateops.control import ControlSettings, LeaseHeldError, acquire, current_lease, maintenance
from stateops.errors import ConfigError

pytestmark = pytest.mark.unit

JOB = "user_activity"
FAST = ControlSettings(heartbeat_seconds=0.1, lease_timeout_seconds=5)


def _run(layout, *args, config=None):
    extra = ["--config", str(config)] if config else []
    return CliRunner().invoke(main, ["--home", layout.home, *extra, *args])


def _one_line_error(result, *words):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_run_is_refused_in_one_line_while_the_lease_or_the_lock_is_held(layout):
    with acquire(layout, JOB, run_id="holder-run", dagster_run_id="dag-7", settings=FAST):
        _one_line_error(_run(layout, "jobs", "run", JOB), "user_activity is already running", "run holder-run",
                        "Dagster run dag-7", f"pid {os.getpid()}", "since ")
    maintenance.acquire(layout, JOB, runbook_id="rb-9", actor="alice", reason="archive state")
    _one_line_error(_run(layout, "jobs", "run", JOB), "under maintenance", "runbook rb-9", "alice", "archive state")
    _one_line_error(_run(layout, "jobs", "run", JOB, "--runbook-id", "rb-other"), "runbook rb-9")


class _Started(Exception):
    """The session factory was called: the test stops the run there."""


def test_run_starts_spark_only_once_it_holds_the_lease(layout):
    """A JVM starting under load takes minutes: a run that started it before taking the lease left a stale
    holder's job without a writer that long (the fleet soak). The factory is called with the lease held, and
    never while another run holds it."""
    seen = []

    def factory():
        seen.append(current_lease(layout, JOB))
        raise _Started

    with acquire(layout, JOB, run_id="holder-run", settings=FAST):
        with pytest.raises(LeaseHeldError):
            run_job(factory, get_job(JOB), layout, settings=read_settings(), run_id="second")
    assert seen == []
    with pytest.raises(_Started):
        run_job(factory, get_job(JOB), layout, settings=read_settings(), run_id="mine")
    assert [lease.run_id for lease in seen] == ["mine"]
    assert current_lease(layout, JOB) is None, "the run released its lease"


@pytest.mark.parametrize("stop", [False, True])
def test_a_run_asked_to_stop_does_not_start_its_queries_again(layout, monkeypatch, stop):
    """The fleet soak: a run the daemon launched before the fleet's stop took the lease after it, was asked in turn,
    and went on starting its failing queries again for minutes. A transient failure is retried (3 attempts in all),
    but not once a stop was requested."""
    from stateops.jobs.runtime import runner
    from stateops.jobs.runtime.failures import QueryFailed

    attempts = []

    def failing(session, spec, layout_, lease, **kwargs):
        attempts.append(lease.lease.run_id)
        if stop:  # the operator's stop, while the queries start
            assert _run(layout, "jobs", "stop", JOB, "--reason", "deploy").exit_code == 0
        raise QueryFailed(JOB, JOB, 47, "StreamingQueryException", "Python worker failed to connect back.",
                          "advice", "log")

    monkeypatch.setattr(runner, "_run_queries", failing)
    monkeypatch.setattr(runner, "TRANSIENT_PAUSE_SECONDS", 0.0)
    with pytest.raises(QueryFailed):
        run_job(lambda: None, get_job(JOB), layout, settings=read_settings(), run_id="mine")
    assert attempts == ["mine"] * (1 if stop else runner.TRANSIENT_ATTEMPTS)
    assert len(actions.read(layout, JOB, actions.QUERY_RETRY)) == len(attempts) - 1
    assert current_lease(layout, JOB) is None, "the run released its lease"


@pytest.mark.parametrize("args", [["jobs", "run", JOB], ["jobs", "status", JOB], ["jobs", "stop", JOB],
                                  ["jobs", "lock", JOB, "--reason", "x"]])
def test_object_store_home_is_refused(tmp_path, args):
    result = CliRunner().invoke(main, ["--home", "memory://stateops", *args])
    _one_line_error(result, "STATEOPS_HOME memory://stateops", "POSIX", "Fix:")


def test_status_shows_lease_stop_lock_and_overrides(layout):
    result = _run(layout, "jobs", "status", JOB, "--json")
    assert result.exit_code == 0, result.output
    idle = json.loads(result.output)
    assert (idle["state"], idle["lease"], idle["stop_request"], idle["maintenance_lock"], idle["overrides"]) == \
        ("idle", None, None, None, {})
    assert idle["checkpoint"] == {"path": f"{layout.home}/checkpoints/{JOB}", "latest_committed_batch": None,
                                  "watermark": None}

    assert _run(layout, "jobs", "override", JOB, "--watermark", "20 minutes", "--reason", "late data",
                "--actor", "alice").exit_code == 0
    held = acquire(layout, JOB, run_id="r-1", dagster_run_id="d-1", settings=FAST)
    stop = _run(layout, "jobs", "stop", JOB, "--reason", "deploy", "--actor", "bob", "--grace", "30")
    assert stop.exit_code == 0 and "stop requested: user_activity run r-1" in stop.output
    maintenance.acquire(layout, JOB, runbook_id="rb-1", actor="carol", reason="repair")
    status = json.loads(_run(layout, "jobs", "status", JOB, "--json").output)
    assert status["state"] == "running"
    lease = status["lease"]
    assert (lease["run_id"], lease["dagster_run_id"], lease["pid"], lease["stale"]) == \
        ("r-1", "d-1", os.getpid(), False)
    assert 0 <= lease["heartbeat_age_seconds"] < 5
    assert (status["stop_request"]["actor"], status["stop_request"]["grace_seconds"]) == ("bob", 30)
    assert (status["maintenance_lock"]["runbook_id"], status["maintenance_lock"]["reason"]) == ("rb-1", "repair")
    assert status["overrides"]["watermark_delay"]["value"] == "20 minutes"
    text = _run(layout, "jobs", "status").output  # every job, as text
    assert "user_activity: running - run r-1 (Dagster run d-1)" in text and "user_sessions: idle - no lease" in text
    assert "maintenance lock: runbook rb-1 (carol" in text and "watermark_delay = 20 minutes (alice" in text
    held.release()
    assert json.loads(_run(layout, "jobs", "status", "--json").output)[0]["state"] == "idle"


def test_stop_says_when_nothing_runs_and_waits_for_the_release(layout):
    result = _run(layout, "jobs", "stop", JOB, "--wait", "5")
    assert result.exit_code == 0 and result.output.strip() == "user_activity is not running; nothing to stop"

    held = acquire(layout, JOB, run_id="stubborn", settings=FAST)  # nobody polls its stop request
    result = _run(layout, "jobs", "stop", JOB, "--wait", "0.5")
    assert result.exit_code == 1
    assert "Error: user_activity is still running after 0.5 s: run stubborn has not released its lease" in result.output

    first = held.stop_request()  # still pending: the run did not stop

    def release_when_asked_again():
        while held.stop_request() == first:
            threading.Event().wait(0.05)
        held.release()

    threading.Thread(target=release_when_asked_again, daemon=True).start()
    result = _run(layout, "jobs", "stop", JOB, "--wait", "60")
    assert result.exit_code == 0 and "user_activity stopped: run stubborn no longer holds the lease" in result.output
    assert [r["run_id"] for r in actions.read(layout, JOB, "stop_request")] == ["stubborn", "stubborn"]


def test_override_cli_refuses_out_of_bounds_and_describe_shows_sources(layout, tmp_path):
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nwatermark_max = "1 hour"\nmax_files_per_trigger = 3\n')
    _one_line_error(_run(layout, "jobs", "override", JOB, "--watermark", "90 minutes", "--reason", "x", config=config),
                    "watermark_delay: '90 minutes' is outside user_activity's bounds [5 minutes, 1 hour]", "Fix:")
    _one_line_error(_run(layout, "jobs", "override", JOB, "--shuffle-partitions", "0", "--reason", "x"),
                    "shuffle_partitions: '0' is not a positive integer")
    _one_line_error(_run(layout, "jobs", "override", JOB, "--watermark", "20 minutes"), "reason: is required")
    assert _run(layout, "jobs", "override", JOB, "--json").output.strip() == "[]", "nothing was written"

    done = _run(layout, "jobs", "override", JOB, "--watermark", "45 minutes", "--shuffle-partitions", "6",
                "--reason", "late partner feed", "--actor", "alice", "--runbook-id", "rb-3", config=config)
    assert done.exit_code == 0, done.output
    info = json.loads(_run(layout, "jobs", "describe", JOB, "--json", config=config).output)
    delay, partitions = info["settings"]["watermark_delay"], info["settings"]["shuffle_partitions"]
    assert (delay["value"], delay["source"], delay["actor"], delay["reason"], delay["runbook_id"]) == \
        ("45 minutes", "override", "alice", "late partner feed", "rb-3")
    assert info["watermark"]["delay"] == "45 minutes" and info["shuffle_partitions"] == 6
    assert (partitions["source"], partitions["in_checkpoint"]) == ("override", None)
    assert "new checkpoint only" in partitions["note"]
    assert info["settings"]["max_files_per_trigger"] == {"value": 3, "source": "config file", "file": str(config)}
    assert info["settings"]["trigger_interval"] == {"value": "10 seconds", "source": "spec default"}
    text = _run(layout, "jobs", "describe", JOB, config=config).output
    assert "watermark_delay        45 minutes (override by alice at " in text
    assert "runbook rb-3: late partner feed" in text

    # The config narrows the bounds after the override: describe says so, and a run refuses to start.
    config.write_text('[jobs.user_activity]\nwatermark_max = "30 minutes"\n')
    info = json.loads(_run(layout, "jobs", "describe", JOB, "--json", config=config).output)
    assert "outside user_activity's bounds [5 minutes, 30 minutes]" in info["settings"]["watermark_delay"]["problem"]
    with pytest.raises(ConfigError, match="override watermark_delay of user_activity: set by alice .* no longer valid"):
        # refused before Spark is touched
        run_job(None, get_job(JOB, str(config)), layout, settings=read_settings())
    assert current_lease(layout, JOB) is None, "the refused start released the lease"

    cleared = _run(layout, "jobs", "override", JOB, "--clear", "watermark", "--reason", "back", config=config)
    assert cleared.exit_code == 0 and "watermark_delay override cleared (was 45 minutes)" in cleared.output
    history = json.loads(_run(layout, "jobs", "override", JOB, "--json").output)
    assert [(h["setting"], h["previous"], h["value"]) for h in history] == [
        ("watermark_delay", None, "45 minutes"), ("shuffle_partitions", None, "6"),
        ("watermark_delay", "45 minutes", None)]


def test_lock_and_unlock(layout):
    locked = _run(layout, "jobs", "lock", JOB, "--reason", "manual repair", "--runbook-id", "rb-5")
    assert locked.exit_code == 0 and "--runbook-id rb-5" in locked.output
    _one_line_error(_run(layout, "jobs", "lock", JOB, "--reason", "mine", "--runbook-id", "rb-6"), "runbook rb-5")
    _one_line_error(_run(layout, "jobs", "unlock", JOB, "--runbook-id", "rb-6"), "pass --runbook-id rb-5")
    assert _run(layout, "jobs", "unlock", JOB, "--runbook-id", "rb-5").exit_code == 0
    assert _run(layout, "jobs", "unlock", JOB, "--runbook-id", "rb-5").output.strip() == \
        "user_activity was not locked; nothing to release"
    assert maintenance.current(layout, JOB) is None
