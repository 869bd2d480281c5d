"""The commands that only read (the jobs, their status, a fast audit, archives, the inventory, a retention plan)
start no Spark: they import neither pyspark nor delta-spark, so they answer in a fraction of a second and work
on a machine without Java. Checked in a fresh interpreter per command, as a user starts one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK = ("pyspark", "delta")  # delta: delta-spark's Python package (delta-rs is `deltalake`)
MODULES = ["stateops.cli.main", "stateops.cli.jobs", "stateops.cli.audit", "stateops.cli.recover",
           "stateops.cli.retention", "stateops.cli.explain"]
COMMANDS = [["jobs", "list"], ["jobs", "describe", "user_activity"], ["jobs", "status"],
            ["audit", "user_activity", "--fast"], ["archives", "list", "user_activity"], ["inventory"],
            ["retention", "plan"], ["recover", "plan", "user_activity", "--mode", "rebuild"]]
# One fresh interpreter for all the modules and one for all the commands (an interpreter starts in about 3.5 s
# here; 14 of them took 50 s of the default run): after each, the Spark modules loaded so far, so the first module
# or command that loads one is the one named.
MODULES_PROBE = """
import importlib, json, sys
found = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    found[name] = sorted(m for m in sys.modules if m.split(".")[0] in %r)
print(json.dumps(found))
""" % (SPARK,)
COMMANDS_PROBE = """
import json, sys
from click.testing import CliRunner
from stateops.cli.main import main
home, commands = sys.argv[1], json.loads(sys.argv[2])
found = {}
for command in commands:
    result = CliRunner().invoke(main, ["--home", home, *command])
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    found[" ".join(command)] = {"exit": result.exit_code, "crashed": repr(result.exception) if crashed else None,
                                "loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r)}
print(json.dumps(found))
""" % (SPARK,)


def _fresh(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("STATEOPS_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_command_modules_import_no_spark():
    assert _fresh(MODULES_PROBE, *MODULES) == {module: [] for module in MODULES}


def test_the_reading_commands_run_without_spark(tmp_path):
    found = _fresh(COMMANDS_PROBE, str(tmp_path / "home"), json.dumps(COMMANDS))
    assert list(found) == [" ".join(c) for c in COMMANDS], found
    for command, outcome in found.items():
        assert outcome["crashed"] is None and outcome["exit"] in (0, 1, 2), (command, outcome)
        assert outcome["loaded"] == [], f"{command} imported {outcome['loaded']}"
