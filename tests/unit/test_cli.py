"""The CLI contract without a JVM: describe's fields, and one-line errors with exit code 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stateops.cli.main import main

pytestmark = pytest.mark.unit


def _run(*args, home):
    return CliRunner().invoke(main, ["--home", str(home), *args])


def test_describe_json_names_every_path(tmp_path):
    result = _run("jobs", "describe", "user_activity", "--json", home=tmp_path)
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["checkpoint"] == f"{tmp_path}/checkpoints/user_activity"
    assert info["output_table"] == f"{tmp_path}/tables/user_activity"
    assert info["deadletter"]["table"] == f"{tmp_path}/tables/user_activity_deadletter"
    assert info["inputs"][0]["landing"] == f"{tmp_path}/landing/events"
    assert info["ops"]["progress_table"] == f"{tmp_path}/ops/tables/progress"
    assert info["watermark"] == {"columns": ["event_time"], "delay": "10 minutes", "min": "5 minutes",
                                 "max": "2 hours"}
    assert info["shuffle_partitions"] >= 2
    assert info["delta_writer"]["value"] in ("delta-rs", "spark")


@pytest.mark.parametrize("env,writer,source", [
    ({}, "delta-rs", "auto: local master local[*]"),
    ({"STATEOPS_SPARK_MASTER": "spark://host:7077"}, "spark", "auto: cluster master spark://host:7077"),
    ({"STATEOPS_DELTA_WRITER": "spark"}, "spark", "STATEOPS_DELTA_WRITER=spark"),
    ({"STATEOPS_SPARK_MASTER": "spark://host:7077", "STATEOPS_DELTA_WRITER": "delta-rs"}, "delta-rs",
     "STATEOPS_DELTA_WRITER=delta-rs"),
])
def test_describe_shows_the_delta_writer_in_force_and_why(tmp_path, monkeypatch, env, writer, source):
    from tests.support.delta_writers import MISSING_JARS, spark_writer_available

    if writer == "spark" and not spark_writer_available():
        pytest.skip(MISSING_JARS)
    for key in ("STATEOPS_SPARK_MASTER", "STATEOPS_DELTA_WRITER"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = _run("jobs", "describe", "user_activity", "--json", home=tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["delta_writer"] == {"value": writer, "source": source}
    text = _run("jobs", "describe", "user_activity", home=tmp_path).output
    assert f'"value": "{writer}"' in text and source in text


@pytest.mark.parametrize("args,words", [
    (["jobs", "describe", "nope"], "unknown job 'nope'"),
    (["jobs", "run", "nope"], "unknown job 'nope'"),
    (["generate", "--late-share", "1.5"], "late_share: 1.5 is not a share"),
    (["generate", "--start", "soon"], "start: 'soon' is not an ISO timestamp"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, args, words):
    result = _run(*args, home=tmp_path)
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output


def test_bad_config_file_is_reported_before_anything_runs(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[jobs.user_activity]\nwatermark_delay = "ten minutes"\n')
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "--config", str(config), "jobs", "list"])
    assert result.exit_code == 2
    assert "jobs.user_activity.watermark_delay" in result.output and "Fix:" in result.output


def test_click_usage_errors_exit_2(tmp_path):
    assert _run("jobs", "run", "user_activity", "--mode", "forever", home=tmp_path).exit_code == 2
    assert _run("generate", "--events", "many", home=tmp_path).exit_code == 2


def test_generate_is_deterministic(tmp_path):
    for name in ("a", "b"):
        assert _run("generate", "--events", "300", "--files", "3", "--orders", "30", "--seed", "3",
                    home=tmp_path / name).exit_code == 0
    for source in ("events", "orders", "payments"):
        files_a = sorted((tmp_path / "a" / "landing" / source).iterdir())
        files_b = sorted((tmp_path / "b" / "landing" / source).iterdir())
        assert [f.read_text() for f in files_a] == [f.read_text() for f in files_b]
        assert len(files_a) == 3
