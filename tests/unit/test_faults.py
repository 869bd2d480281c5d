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
