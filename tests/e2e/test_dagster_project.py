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
import shutil
import subprocess
from pathlib import Path

import pytest

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import generate
from stateops.jvm.jars import expected, verify
from stateops.layout import Layout
from tests.support.outcomes import assert_equals_oracle
from tests.support.scenarios import DEMO_INPUT_SMALL
from tests.support.wheel_env import clean_env, dg_project, run_dg, run_in

# Long tier, beside tests/e2e/test_install_ends.py (the wheel in fresh venvs at both ends of the ranges); the default
# run: the package's contents and metadata (tests/unit/test_packaging.py), `stateops jars fetch` (test_jars_fetch).
pytestmark = [pytest.mark.e2e, pytest.mark.long]

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
    where = run_in(installed_stateops, ["-c", "import stateops, dagster; print(stateops.__file__)"], project)
    venv = str(installed_stateops.parent.parent)
    assert where.returncode == 0 and where.stdout.startswith(venv + "/lib/"), where.stdout + where.stderr  # the wheel's
    names = run_in(installed_stateops, ["-c", "import json, importlib.metadata as m; print(json.dumps(sorted("
                 "(m.distribution('stateops').read_text('top_level.txt') or '').split())))"], project)
    assert json.loads(names.stdout) == ["stateops"], names.stdout + names.stderr

    valid = run_in(installed_stateops, ["-m", "dagster", "definitions", "validate", "-f", "user_defs.py"], project)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    listed = run_in(installed_stateops, ["-m", "dagster", "asset", "list", "-f", "user_defs.py"], project)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert {"user_report", "user_activity", "user_activity_state_audit"} <= set(listed.stdout.split())
    assert not home.exists(), "loading the definitions must not write anything"

    layout = Layout(str(home))
    generate(layout, DEMO_INPUT_SMALL)
    done = run_in(installed_stateops, ["-m", "dagster", "asset", "materialize", "--select", "user_activity",
                                     "-f", "user_defs.py"], project, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    spec = get_job("user_activity", config_path=str(project / "stateops.toml"), layout=layout)
    assert_equals_oracle(layout, spec)
    assert not (project / ".stateops").exists(), "everything under the given home"


def test_a_name_clash_with_the_users_definitions_is_refused_naming_it(installed_stateops, tmp_path):
    project = _user_project(tmp_path, tmp_path / "home")
    (project / "clash.py").write_text(USER_DEFS.format(home=tmp_path / "home").replace(
        "def user_report():", "def user_activity():").replace("[user_report]", "[user_activity]"))
    done = run_in(installed_stateops, ["-m", "dagster", "definitions", "validate", "-f", "clash.py"], project)
    assert done.returncode != 0
    assert "Duplicate asset key: AssetKey(['user_activity'])" in done.stdout + done.stderr


def test_a_dg_project_declares_the_component(installed_stateops, tmp_path):
    project = dg_project(tmp_path)
    components = run_dg(installed_stateops, ["list", "components"], project)
    assert "stateops.dagster.StateOpsComponent" in components.stdout, components.stdout + components.stderr
    scaffold = run_dg(installed_stateops, ["scaffold", "defs", "stateops.dagster.StateOpsComponent", "stateops"], project)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    folder = project / "src" / "analytics" / "defs" / "stateops"
    assert "type: stateops.dagster.StateOpsComponent" in (folder / "defs.yaml").read_text()
    assert (folder / "stateops.toml").is_file()

    checked = run_dg(installed_stateops, ["check", "defs"], project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = run_dg(installed_stateops, ["list", "defs", "--json"], project)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    text = listed.stdout
    for name in ("user_activity", "user_activity_state_audit", "state_skew", "state_recovery",
                 "user_activity_every_15_minutes", "user_activity_deep_audit_hourly", "retention_daily",
                 "state_skew_sensor", "state_growth_sensor", "query_health_sensor", "stateops_run_failure_alert"):
        assert name in text, name
    assert not (project / "home").exists(), "listing the definitions writes nothing"

    with open(folder / "stateops.toml", "a") as handle:
        handle.write('\n[jobs.user_activity]\nwatermark_dely = "5 minutes"\n')
    broken = run_dg(installed_stateops, ["check", "defs"], project)
    assert broken.returncode != 0
    assert ("jobs.user_activity.watermark_dely: is not a setting that can be overridden. Fix: use one of"
            in broken.stdout + broken.stderr), broken.stdout + broken.stderr


@pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven (mvn) is not installed: apt-get install -y maven")
def test_the_wheel_alone_fetches_its_jars_and_sessions_find_them(installed_stateops, tmp_path):
    """What the wheel ships (coordinates and checksums) is all `stateops jars fetch` needs: in a folder with no
    repository, the jars land in --dest, verified, and a session told STATEOPS_JARS uses them (jobs describe)."""
    folder, dest = tmp_path / "user", tmp_path / "jars"
    folder.mkdir()
    stateops = str(installed_stateops.parent / "stateops")  # the wheel's console script
    run = lambda *args, **env: subprocess.run([stateops, *args], cwd=folder, capture_output=True, text=True,  # noqa: E731
                                              timeout=300, env=clean_env(STATEOPS_HOME=str(tmp_path / "home"), **env))
    done = run("jars", "fetch", "--dest", str(dest))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == (f"{len(expected())} jars fetched and verified in {dest} "
                                                    f"(sessions use them with STATEOPS_JARS={dest})")
    assert verify(str(dest)) == []
    described = run("jobs", "describe", "user_activity", "--json", STATEOPS_JARS=str(dest),
                    STATEOPS_DELTA_WRITER="spark")
    assert described.returncode == 0, described.stdout + described.stderr
    info = json.loads(described.stdout)
    assert (info["jars"]["folder"], info["jars"]["source"], info["jars"]["status"]) == (str(dest), "STATEOPS_JARS",
                                                                                        "fetched")
    assert info["delta_writer"] == {"value": "spark", "source": "STATEOPS_DELTA_WRITER=spark"}
