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
PROBE = """
import json, sys
from click.testing import CliRunner
from stateops.cli.main import main
result = CliRunner().invoke(main, sys.argv[1:])
crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
print(json.dumps({"exit": result.exit_code, "crashed": repr(result.exception) if crashed else None,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "delta"))}))
"""


def _fresh(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("STATEOPS_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("module", MODULES)
def test_a_command_module_imports_no_spark(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in {SPARK!r}))"
    assert _fresh(code) == "[]"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_reading_command_runs_without_spark(command, tmp_path):
    found = json.loads(_fresh(PROBE, "--home", str(tmp_path / "home"), *command))
    assert found["crashed"] is None and found["exit"] in (0, 1, 2), found
    assert found["loaded"] == [], f"{' '.join(command)} imported {found['loaded']}"
