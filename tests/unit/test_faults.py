"""Fault points: a matching STATEOPS_FAULTS entry SIGKILLs the process at the point, nothing else does,
and a malformed entry is a one-line config error (real child processes, no JVM)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from stateops.errors import ConfigError
from stateops.faults import ENV, fault_point, parse

pytestmark = pytest.mark.unit

PROGRAM = ("from stateops.faults import fault_point\n"
           "for batch in range(5):\n"
           "    print(batch, flush=True)\n"
           "    fault_point('sink.after_commit', job='user_activity', batch=batch)\n"
           "print('survived', flush=True)\n")


def _child(faults: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if faults is not None:
        env[ENV] = faults
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60)


def test_a_matching_point_kills_the_process_there():
    done = _child("sink.after_commit:job=user_activity,batch=2")
    assert done.returncode == -signal.SIGKILL
    assert done.stdout.split() == ["0", "1", "2"]
    assert "fault sink.after_commit job=user_activity batch=2" in done.stderr


@pytest.mark.parametrize("faults", [None, "", "sink.after_commit:batch=9", "sink.after_commit:job=other",
                                    "sink.before_commit", "other.point:batch=2"])
def test_no_matching_point_no_kill(faults):
    done = _child(faults)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "survived"


def test_name_alone_fires_at_the_first_pass_and_entries_combine():
    assert _child("other.point;sink.after_commit").stdout.split() == ["0"]


@pytest.mark.parametrize("text", ["sink.after_commit:batch", ":batch=3", "sink.after_commit:=3",
                                  "sink.after_commit:batch=3=4"])
def test_malformed_entries_name_the_variable_and_the_syntax(text):
    with pytest.raises(ConfigError, match=rf"^{ENV}: .* Fix: write POINT or POINT:key=value"):
        parse(text)


def test_an_attribute_the_point_does_not_have_is_an_error(monkeypatch):
    monkeypatch.setenv(ENV, "sink.after_commit:batchid=3")
    with pytest.raises(ConfigError, match="has no attribute batchid. Fix: match on batch, job"):
        fault_point("sink.after_commit", job="user_activity", batch=3)


def test_then_freeze_python_stops_the_process_at_the_point_until_it_is_continued():
    env = {**os.environ, ENV: "sink.after_commit:job=user_activity,batch=1,then=freeze-python"}
    child = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert [child.stdout.readline().strip() for _ in range(2)] == ["0", "1"]
        _, status = os.waitpid(child.pid, os.WUNTRACED)  # stopped at the point, as a long pause would
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert out.split() == ["2", "3", "4", "survived"], err  # and went on from there
    assert "fault sink.after_commit job=user_activity batch=1: freezing process" in err


def test_an_unknown_action_is_a_config_error():
    with pytest.raises(ConfigError, match="then=pause is not an action. Fix: use then=kill or then=freeze"):
        parse("sink.after_commit:batch=3,then=pause")


def test_the_lease_clock_skew_and_the_fence_switch_are_read_from_the_same_variable(monkeypatch):
    from stateops.clock import age_seconds, now_iso
    from stateops.faults import clock_skew_seconds, fence_off

    monkeypatch.delenv(ENV, raising=False)
    assert (clock_skew_seconds(), fence_off()) == (0.0, False)
    stamp = now_iso()
    monkeypatch.setenv(ENV, "clock.skew:seconds=-30;fence.off")
    assert (clock_skew_seconds(), fence_off()) == (-30.0, True)
    assert -31 < age_seconds(stamp) < -29  # a clock 30 s behind sees a fresh heartbeat 30 s in its future


def test_a_sleep_pauses_the_matching_point_only_and_goes_on(monkeypatch):
    import time
    monkeypatch.setenv(ENV, "sink.after_commit:batch=2,then=sleep,seconds=0.3")
    began = time.monotonic()
    fault_point("sink.after_commit", job="user_activity", batch=1)
    assert time.monotonic() - began < 0.2
    fault_point("sink.after_commit", job="user_activity", batch=2)
    assert time.monotonic() - began >= 0.3


@pytest.mark.parametrize("seconds", ["soon", "-1"])
def test_a_sleep_without_a_number_of_seconds_is_an_error(seconds):
    with pytest.raises(ConfigError, match=rf"^{ENV}: .*seconds must be a number of seconds.* Fix: write seconds=S"):
        parse(f"sink.after_commit:then=sleep,seconds={seconds}")
