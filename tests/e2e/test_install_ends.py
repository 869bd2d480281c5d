"""StateOps installed as a user installs it, at both ends of its version ranges (issue 42). The wheel of this tree goes
into fresh virtual environments whose every package uv resolved from the package index (tests/support/install_ends.py):
one to the highest versions pyproject.toml allows, with the `dg` extra only (so the Kafka and S3 extras are missing,
and refused), one to the lowest (every direct dependency at its lower bound) with every extra. In each, from a folder
with no repository: `build_defs()` loads, `dg list defs` lists the jobs, `stateops jars fetch --dest DIR` gets the
jars, a bounded `user_activity` run on each Delta writer equals the batch recomputation of its input and its Delta log
names the writer, a deep audit counts the rows the run reported, and a runbook's dry run changes nothing.

Long tier: each environment installs pyspark (about half a gigabyte) and runs four Spark sessions.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from stateops.jobs.definition.environment import get_job
from stateops.jvm.jars import expected, verify
from stateops.layout import Layout
from tests.support.install_ends import Installed, resolve
from tests.support.outcomes import assert_equals_oracle
from tests.support.wheel_env import clean_env, dg_project, run_dg

pytestmark = [pytest.mark.e2e, pytest.mark.long,
              pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven (mvn) is not installed: apt-get install "
                                 "-y maven")]

INPUT = ["--events", "600", "--files", "3", "--users", "60", "--minutes-per-file", "30", "--malformed-share", "0.02"]


def _stateops(end: Installed, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([end.stateops, *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                          env=clean_env(**env))


def test_the_ends_resolve_to_the_bounds_and_past_the_versions_the_lock_holds(installed_at_an_end):
    end = installed_at_an_end
    versions = end.versions
    if end.end == "lowest":
        at_bounds = {name: Version(versions[name]) == Version(bound) for name, bound in end.lower_bounds.items()}
        assert all(at_bounds.values()), (at_bounds, versions)  # every direct dependency at its lower bound
        assert (versions["dagster"], versions["pyspark"], versions["pandas"]) == ("1.12.22", "4.2.0", "2.2.3")
    else:
        assert Version(versions["pyspark"]) >= Version("4.2.1"), versions  # a Spark patch release past the lock's
        assert Version(versions["dagster"]) >= Version("1.13.27") and Version(versions["pandas"]) >= Version("2.3.3")
        for name in ("dagster-webserver", "dagster-postgres", "confluent-kafka", "boto3", "s3fs", "matplotlib"):
            assert name not in versions, name  # the plain install (with `dg`) brings none of them


@pytest.mark.parametrize("pins", [("dagster==1.13.26", "dagster-webserver==1.13.26", "pyspark==4.2.1"),
                                  ("dagster==1.12.22", "dagster-webserver==1.12.22", "pandas==2.2.3")])
def test_the_wheel_resolves_beside_a_projects_own_pins(stateops_wheel, pins, tmp_path):
    versions = resolve([f"stateops @ {stateops_wheel.as_uri()}", *pins], "highest", tmp_path)
    assert {pin.split("==")[0]: versions[pin.split("==")[0]] for pin in pins} == dict(p.split("==") for p in pins)
    _, minor, patch = versions["dagster"].split(".")
    assert versions["dagster-pyspark"] == f"0.{int(minor) + 16}.{patch}"  # the release made with that Dagster


def test_build_defs_loads_and_dg_lists_the_definitions(installed_at_an_end, tmp_path):
    end = installed_at_an_end
    folder = tmp_path / "user"
    folder.mkdir()
    loaded = subprocess.run([str(end.python), "-c", "import dagster, pyspark, json; from stateops.dagster import "
                             "build_defs; d = build_defs(home='home'); print(json.dumps([dagster.__version__, "
                             "pyspark.__version__, sorted(k.to_user_string() for k in d.resolve_all_asset_keys())]))"],
                            cwd=folder, capture_output=True, text=True, timeout=300, env=clean_env())
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    dagster_version, spark_version, assets = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert (dagster_version, spark_version) == (end.versions["dagster"], end.versions["pyspark"])
    assert {"user_activity", "order_payments", "user_activity_state_audit"} <= set(assets)
    assert not (folder / "home").exists(), "loading the definitions writes nothing"

    project = dg_project(tmp_path)
    scaffold = run_dg(end.python, ["scaffold", "defs", "stateops.dagster.StateOpsComponent", "stateops"], project)
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    listed = run_dg(end.python, ["list", "defs", "--json"], project)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    for name in ("user_activity", "state_recovery", "state_skew_sensor"):
        assert name in listed.stdout, name


def _commit_infos(table: str) -> list[dict]:
    entries = [json.loads(line) for log in sorted(Path(table, "_delta_log").glob("*.json"))
               for line in log.read_text().splitlines()]
    return [entry["commitInfo"] for entry in entries if "commitInfo" in entry]


def _tree(folder: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def test_jars_fetched_runs_on_both_writers_equal_the_oracle_then_an_audit_and_a_runbook_dry_run(installed_at_an_end,
                                                                                                 tmp_path):
    end = installed_at_an_end
    folder, jars = tmp_path / "user", tmp_path / "jars"
    folder.mkdir()
    fetched = _stateops(end, folder, "jars", "fetch", "--dest", str(jars))
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert verify(str(jars)) == [] and len(list(jars.glob("*.jar"))) == len(expected())

    for writer in ("delta-rs", "spark"):
        home = tmp_path / writer
        env = {"STATEOPS_HOME": str(home), "STATEOPS_JARS": str(jars), "STATEOPS_DELTA_WRITER": writer}
        generated = _stateops(end, folder, "generate", *INPUT, **env)
        assert generated.returncode == 0, generated.stderr
        run = _stateops(end, folder, "jobs", "run", "user_activity", "--json", **env)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        result = json.loads(run.stdout.strip().splitlines()[-1])
        layout = Layout(str(home))
        assert_equals_oracle(layout, get_job("user_activity", layout=layout))
        infos = _commit_infos(layout.table("user_activity"))
        if writer == "spark":  # Delta's own Spark writer, at the installed Spark's version
            assert all(i.get("engineInfo", "").startswith(f"Apache-Spark/{end.versions['pyspark']} Delta-Lake/")
                       for i in infos), infos
        else:
            assert all(i.get("clientVersion", "").startswith("delta-rs.") for i in infos), infos

    audit = _stateops(end, folder, "audit", "user_activity", "--json", **env)
    assert audit.returncode in (0, 1), audit.stdout[-3000:] + audit.stderr[-3000:]  # 1: error findings, reported
    counted = {op["operator_name"]: op["rows_total"] for op in json.loads(audit.stdout)["operators"]}
    assert counted == {op["operator_name"]: op["num_rows_total"] for op in result["state_operators"]}

    checkpoint = layout.checkpoint("user_activity")
    before = _tree(checkpoint)
    plan = _stateops(end, folder, "recover", "run", "user_activity", "--mode", "adjust", "--watermark", "20 minutes",
                     **env)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert "dry run" in plan.stdout.lower() and _tree(checkpoint) == before


def test_without_their_extras_kafka_and_s3_are_refused_in_one_line(installed_at_an_end, tmp_path):
    end = installed_at_an_end
    if end.end != "highest":
        pytest.skip("the lowest end installs every extra")
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nsource = "kafka"\nkafka_bootstrap_servers = "127.0.0.1:1"\n')
    kafka = _stateops(end, tmp_path, "--config", str(config), "jobs", "run", "user_activity",
                      STATEOPS_HOME=str(tmp_path / "home"))
    assert (kafka.returncode, kafka.stderr) == (2, "Error: job user_activity reads Kafka: StateOps' kafka extra is not "
                                                   "installed. Fix: pip install 'stateops[kafka]'\n")
    s3 = _stateops(end, tmp_path, "jobs", "status", "user_activity", STATEOPS_HOME="s3://bucket/home")
    assert s3.returncode == 2 and s3.stderr.count("\n") == 1, s3.stderr
    assert "StateOps' s3 extra is not installed. Fix: pip install 'stateops[s3]'" in s3.stderr
