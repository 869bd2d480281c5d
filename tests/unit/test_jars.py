"""The pinned JVM jars as the wheel ships them (stateops.jvm.jars): where sessions look, what a folder must hold to be
used, what `stateops jars fetch` refuses before calling Maven. The fetch itself, with Maven: tests/e2e/test_jars_fetch.py."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from stateops.jvm import jars
from stateops.jvm.jars import JarsFolder, MavenMissing, coordinates_hash, default_folder, expected, fetch, verify
from tests.support.fetched_jars import fetched_jars

pytestmark = pytest.mark.unit


def test_the_pinned_set_is_delta_the_kafka_connector_and_s3a_each_with_a_sha256():
    pinned = expected()
    names = " ".join(pinned)
    for wanted in ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
                   "kafka-clients-", "hadoop-aws-3.5.0.jar", "s3-2.35.4.jar"):
        assert wanted in names, wanted
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in pinned.values())
    with open(jars.POM) as handle:
        pom = handle.read()
    assert "<artifactId>delta-spark_4.2_2.13</artifactId><version>4.4.0</version>" in pom


def test_sessions_look_in_stateops_jars_else_a_per_user_cache_keyed_by_the_coordinates(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    folder = JarsFolder.of(env)
    assert folder.source == "default"
    assert folder.path == str(tmp_path / "cache" / "stateops" / "jars" / coordinates_hash()[:16])
    assert default_folder({"HOME": str(tmp_path)}).startswith(str(tmp_path / ".cache" / "stateops" / "jars"))
    chosen = JarsFolder.of({**env, "STATEOPS_JARS": str(tmp_path / "mine")})
    assert (chosen.path, chosen.source) == (str(tmp_path / "mine"), "STATEOPS_JARS")


def test_only_a_folder_fetched_for_these_coordinates_is_used_and_describe_says_which(tmp_path):
    folder = JarsFolder(str(tmp_path / "j"), "STATEOPS_JARS")
    assert folder.jars() == [] and folder.describe()["status"] == "not fetched"
    assert folder.describe()["fix"] == f"stateops jars fetch --dest {folder.path}"
    fetched_jars(folder.path, coordinates="older")
    assert folder.jars() == []
    assert folder.describe()["status"].startswith("fetched for other coordinates")
    names = fetched_jars(folder.path)
    assert folder.jars() == [os.path.join(folder.path, name) for name in names]
    shown = folder.describe()
    assert shown["status"] == "fetched" and shown["source"] == "STATEOPS_JARS" and "fix" not in shown
    assert JarsFolder(folder.path, "default").describe()["source"].startswith("default")


def test_verify_names_every_missing_extra_or_changed_jar(tmp_path):
    names = fetched_jars(str(tmp_path))  # empty files: every checksum differs
    problems = verify(str(tmp_path))
    assert len(problems) == len(names) and all("another sha256" in p for p in problems)
    os.remove(tmp_path / names[0])
    (tmp_path / "evil.jar").write_bytes(b"x")
    problems = verify(str(tmp_path))
    assert f"{names[0]} missing" in problems and "evil.jar not pinned" in problems


def test_a_fetch_refuses_a_folder_of_other_files_and_a_machine_without_maven(tmp_path, monkeypatch):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(Exception) as err:
        fetch(str(other))
    assert "holds files that are not StateOps' jars" in str(err.value) and err.value.exit_code == 2
    assert (other / "notes.txt").read_text() == "keep me"
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    with pytest.raises(MavenMissing) as err:
        fetch(str(tmp_path / "new"))
    line = str(err.value)
    assert "\n" not in line and "install Maven 3.8+" in line and "apt-get install -y maven" in line
    assert not (tmp_path / "new").exists()


def test_the_cli_fetch_without_maven_is_one_line_and_exit_2(tmp_path, monkeypatch):
    from stateops.cli.main import main

    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    result = CliRunner().invoke(main, ["jars", "fetch", "--dest", str(tmp_path / "jars")])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Maven (mvn) is needed" in result.output


def test_the_stamp_of_a_fetch_records_what_describe_shows(tmp_path):
    fetched_jars(str(tmp_path))
    stamp = json.loads((tmp_path / jars.STAMP).read_text())
    assert stamp["coordinates"] == coordinates_hash() and stamp["jars"] == len(expected())
