"""StateOps inside a user's own Dagster project (issue 28), with StateOps installed from a wheel in a new venv
(tests/support/wheel_env.py) and the real `dagster` and `dg` command lines:

- a project with its own `jobs` and `sensors` packages merges `build_defs(config_path=..., home=...)` with its own
  asset: the definitions validate, both assets are listed, and materializing `user_activity` from the project
  writes under the given home what the oracle computes from the input;
- a dg project declares `stateops.dagster.StateOpsComponent` in defs/stateops/defs.yaml (scaffolded by
  `dg scaffold defs`): `dg list defs` shows the job assets, the audit checks, the runbook, the schedules and the
  four sensors; a typo in the config file fails `dg check defs` with the field and the fix.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import generate
from stateops.layout import Layout
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import DEMO_INPUT_SMALL
from tests.support.wheel_env import clean_env

pytestmark = pytest.mark.e2e

USER_DEFS = '''
import dagster as dg

import jobs      # the project's own packages, named as Dagster's scaffolds name them
import sensors
from stateops.dagster import build_defs

assert jobs.MINE and sensors.MINE, "the project's own packages"


@dg.asset
def user_report():
    return 1


defs = dg.Definitions.merge(dg.Definitions(assets=[user_report]),
                            build_defs(config_path="stateops.toml", home="{home}"))
'''
CONFIG = '[jobs.user_activity]\nshuffle_partitions = 2\n'


def _run(python: Path, args: list[str], cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(DAGSTER_HOME=str(cwd / "dagster_home"), **env))


def _user_project(tmp_path: Path, home: Path) -> Path:
    project = tmp_path / "project"
    for package in ("jobs", "sensors"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text("MINE = True\n")
    (project / "dagster_home").mkdir()
    (project / "stateops.toml").write_text(CONFIG)
    (project / "user_defs.py").write_text(USER_DEFS.format(home=home))
    return project


def test_a_project_with_its_own_jobs_and_sensors_merges_build_defs(installed_stateops, tmp_path):
    home = tmp_path / "home"
    project = _user_project(tmp_path, home)
    where = _run(installed_stateops, ["-c", "import stateops, dagster; print(stateops.__file__)"], project)
    venv = str(installed_stateops.parent.parent)
    assert where.returncode == 0 and where.stdout.startswith(venv + "/lib/"), where.stdout + where.stderr  # the wheel's
    names = _run(installed_stateops, ["-c", "import json, importlib.metadata as m; print(json.dumps(sorted("
                 "(m.distribution('stateops').read_text('top_level.txt') or '').split())))"], project)
    assert json.loads(names.stdout) == ["stateops"], names.stdout + names.stderr

    valid = _run(installed_stateops, ["-m", "dagster", "definitions", "validate", "-f", "user_defs.py"], project)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    listed = _run(installed_stateops, ["-m", "dagster", "asset", "list", "-f", "user_defs.py"], project)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert {"user_report", "user_activity", "user_activity_state_audit"} <= set(listed.stdout.split())
    assert not home.exists(), "loading the definitions must not write anything"

    layout = Layout(str(home))
    generate(layout, DEMO_INPUT_SMALL)
    done = _run(installed_stateops, ["-m", "dagster", "asset", "materialize", "--select", "user_activity",
                                     "-f", "user_defs.py"], project, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    spec = get_job("user_activity", config_path=str(project / "stateops.toml"), layout=layout)
    assert_equals_oracle(layout, spec)
    assert not (project / ".stateops").exists(), "everything under the given home"


def test_a_name_clash_with_the_users_definitions_is_refused_naming_it(installed_stateops, tmp_path):
    project = _user_project(tmp_path, tmp_path / "home")
    (project / "clash.py").write_text(USER_DEFS.format(home=tmp_path / "home").replace(
        "def user_report():", "def user_activity():").replace("[user_report]", "[user_activity]"))
    done = _run(installed_stateops, ["-m", "dagster", "definitions", "validate", "-f", "clash.py"], project)
    assert done.returncode != 0
    assert "Duplicate asset key: AssetKey(['user_activity'])" in done.stdout + done.stderr


def _dg(python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`dg ARGS` in the project (its code on the path as an installed project's would be)."""
    return _run(python, ["-m", "dagster_dg_cli.cli", *args], cwd, COLUMNS="250", STATEOPS_HOME=str(cwd / "home"),
                PYTHONPATH=str(cwd / "src"))


def _dg_project(tmp_path: Path) -> Path:
    project = tmp_path / "dg_project"
    package = project / "src" / "analytics"
    (package / "defs").mkdir(parents=True)
    (project / "dagster_home").mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "analytics"\nversion = "0.1.0"\n\n[tool.dg]\n'
                                            'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "analytics"\n')
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(
        "from pathlib import Path\n\nimport dagster as dg\n\n\n@dg.definitions\ndef defs():\n"
        "    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)\n")
    return project


def test_a_dg_project_declares_the_component(installed_stateops, tmp_path):
    project = _dg_project(tmp_path)
    components = _dg(installed_stateops, ["list", "components"], project)
    assert "stateops.dagster.StateOpsComponent" in components.stdout, components.stdout + components.stderr
    scaffold = _dg(installed_stateops, ["scaffold", "defs", "stateops.dagster.StateOpsComponent", "stateops"], project)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    folder = project / "src" / "analytics" / "defs" / "stateops"
    assert "type: stateops.dagster.StateOpsComponent" in (folder / "defs.yaml").read_text()
    assert (folder / "stateops.toml").is_file()

    checked = _dg(installed_stateops, ["check", "defs"], project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = _dg(installed_stateops, ["list", "defs", "--json"], project)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    text = listed.stdout
    for name in ("user_activity", "user_activity_state_audit", "state_skew", "state_recovery",
                 "user_activity_every_15_minutes", "user_activity_deep_audit_hourly", "retention_daily",
                 "state_skew_sensor", "state_growth_sensor", "query_health_sensor", "stateops_run_failure_alert"):
        assert name in text, name
    assert not (project / "home").exists(), "listing the definitions writes nothing"

    with open(folder / "stateops.toml", "a") as handle:
        handle.write('\n[jobs.user_activity]\nwatermark_dely = "5 minutes"\n')
    broken = _dg(installed_stateops, ["check", "defs"], project)
    assert broken.returncode != 0
    assert ("jobs.user_activity.watermark_dely: is not a setting that can be overridden. Fix: use one of"
            in broken.stdout + broken.stderr), broken.stdout + broken.stderr
