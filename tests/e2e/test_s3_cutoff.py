"""A store cut off in the middle of a command (issue 53): each CLI command that reads or plans on an S3 home, run
with its requests through a fault proxy (tests/support/faults/proxy.py) that refuses every request from the k-th on
(a connection reset: the store gone at that exact moment of the command's work), for several k across the command's
requests. Each run ends by itself in one line, exit 1 (or 0 when the cut came after its last request), and never
with a traceback. The embedded server is moto's (its own process); the home is user_activity run over S3_INPUT.

Long tier: 5 commands, each cut at up to 6 moments, a CLI process each; and two against a store that never
answers, ended within the bound STATEOPS_STORAGE_TIMEOUT_SECONDS names. The unit guard of the same rule, on a fake
file system that fails each call once: tests/unit/test_storage_failures.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.faults.proxy import FaultProxy

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.long, pytest.mark.usefixtures("s3_spark")]

STATEOPS = os.path.join(os.path.dirname(sys.executable), "stateops")
COMMANDS = {
    "audit --fast": ["audit", "user_activity", "--fast"],
    "retention plan": ["retention", "plan"],
    "archives list": ["archives", "list", "user_activity"],
    "home move (plan)": ["home", "move", "--to", "{elsewhere}"],
    "jobs status": ["jobs", "status"],
}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([STATEOPS, *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_cut_off_from_its_store_ends_by_itself_in_one_line(name, s3_scenario, s3_homes):
    layout, _batches = s3_scenario("user_activity")
    args = [a.replace("{elsewhere}", f"{layout.home}-moved") for a in COMMANDS[name]]
    env = {**os.environ, **s3_homes.env, "STATEOPS_HOME": layout.home}
    env.pop("STATEOPS_CONFIG", None)
    with FaultProxy(s3_homes.env["AWS_ENDPOINT_URL"], "cli") as proxy:
        whole = _run(args, proxy.env(env))
        assert whole.returncode == 0, whole.stderr[-2000:]
        requests = len(proxy.log())
        assert requests > 0, "the command asked the store nothing"
        cuts = sorted({0, 1, requests // 4, requests // 2, 3 * requests // 4, requests - 1})
        for cut in cuts:
            proxy.clear()
            proxy.partition_from(cut)
            done = _run(args, proxy.env(env))
            said = f"{name} cut at request {cut} of {requests}: exit {done.returncode}\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, said
            assert done.returncode in (0, 1), said
            if done.returncode == 1:
                errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
                assert len(errors) == 1, said


@pytest.mark.parametrize("name", ["audit --fast", "jobs status"])
def test_a_command_against_a_store_that_never_answers_ends_within_the_bound_the_settings_name(name, s3_scenario,
                                                                                             s3_homes):
    """Every request held at the proxy (a hung server): with STATEOPS_STORAGE_TIMEOUT_SECONDS=2 each call fails after
    3 attempts of 2 s (stateops/storage/timeouts.py), and the command ends in one line, exit 1, well within a
    minute (the clients' own defaults wait minutes)."""
    import time

    layout, _batches = s3_scenario("user_activity")
    env = {**os.environ, **s3_homes.env, "STATEOPS_HOME": layout.home, "STATEOPS_STORAGE_TIMEOUT_SECONDS": "2"}
    env.pop("STATEOPS_CONFIG", None)
    with FaultProxy(s3_homes.env["AWS_ENDPOINT_URL"], "cli") as proxy:
        proxy.delay(600)
        started = time.monotonic()
        done = _run(COMMANDS[name], proxy.env(env))
        took = time.monotonic() - started
        proxy.clear_delays()
    said = f"{name} against a store that never answers: exit {done.returncode} after {took:.0f} s\n{done.stderr[-3000:]}"
    assert done.returncode == 1 and "Traceback" not in done.stderr, said
    assert len([line for line in done.stderr.splitlines() if line.startswith("Error: ")]) == 1, said
    assert took < 60, said
    print(f"{name}: ended after {took:.1f} s against a store that never answers (timeout 2 s, 3 attempts)")
