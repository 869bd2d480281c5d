"""The plain install and its extras (pyproject.toml, stateops.extras): ranges for every direct dependency, the optional
parts out of the plain install, and a feature without its extra refused in one line naming it."""
from __future__ import annotations

import os
import re
import tomllib

import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement

from stateops import extras
from stateops.extras import EXTRAS, MissingExtra, require
from tests.support import ROOT

pytestmark = pytest.mark.unit


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def test_every_direct_dependency_is_a_range_and_the_optional_parts_are_not_in_the_plain_install():
    project = _project()
    plain = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}
    for name, req in plain.items():
        assert req.specifier and not any(s.operator == "==" for s in req.specifier), name
    for name in ("dagster-webserver", "dagster-postgres", "confluent-kafka", "boto3", "s3fs", "matplotlib",
                 "dagster-dg-cli", "delta-spark"):
        assert name not in plain, name
    assert {"pyspark", "dagster", "dagster-pyspark", "deltalake", "pandas", "click"} <= set(plain)
    versions = {name: req.specifier for name, req in plain.items()}
    for name, version in (("pyspark", "4.2.0"), ("pyspark", "4.2.1"), ("dagster", "1.13.26"), ("dagster", "1.12.22"),
                          ("dagster", "1.13.29"), ("pandas", "2.2.3"), ("pandas", "2.3.3"),
                          ("dagster-pyspark", "0.28.22"), ("dagster-pyspark", "0.29.26")):
        assert version in versions[name], (name, version)
    assert "4.3.0" not in versions["pyspark"] and "3.0.0" not in versions["pandas"]


def test_each_extra_brings_the_module_stateops_checks_for():
    optional = _project()["optional-dependencies"]
    modules = {"confluent-kafka": "confluent_kafka", "s3fs": "s3fs", "dagster-postgres": "dagster_postgres",
               "dagster-webserver": "dagster_webserver", "dagster-dg-cli": "dagster_dg_cli", "matplotlib": "matplotlib"}
    for extra, (module, _what) in EXTRAS.items():
        brought = {modules.get(Requirement(r).name) for r in optional[extra]}
        assert module in brought, extra
    assert set(re.findall(r"\w+", optional["all"][0].split("[")[1])) == set(EXTRAS)


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingExtra) as err:
        require("kafka", "job clicks reads Kafka")
    assert str(err.value) == ("job clicks reads Kafka: StateOps' kafka extra is not installed. Fix: pip install "
                              "'stateops[kafka]'")
    assert err.value.exit_code == 2


KAFKA_JOB = '[jobs.user_activity]\nsource = "kafka"\nkafka_bootstrap_servers = "127.0.0.1:1"\n'


def test_a_kafka_job_without_the_kafka_extra_is_refused_before_a_jvm_starts(tmp_path, monkeypatch):
    from stateops.cli.main import main

    config = tmp_path / "stateops.toml"
    config.write_text(KAFKA_JOB)
    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name: None if name == "confluent_kafka" else real(name))
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "--config", str(config),
                                       "jobs", "run", "user_activity"])
    assert result.exit_code == 2, result.output
    assert result.output == ("Error: job user_activity reads Kafka: StateOps' kafka extra is not installed. Fix: "
                             "pip install 'stateops[kafka]'\n")
    assert not (tmp_path / "home" / "checkpoints").exists()


def test_a_home_on_s3_without_the_s3_extra_is_refused_naming_it(monkeypatch):
    from stateops.storage import paths

    def without_s3fs(url, **kwargs):  # what fsspec raises when s3fs is not installed
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(paths, "url_to_fs", without_s3fs)
    with pytest.raises(MissingExtra) as err:
        paths.filesystem("s3://bucket/home/checkpoints")
    assert str(err.value) == ("s3://bucket/home/checkpoints is on S3: StateOps' s3 extra is not installed. Fix: pip "
                              "install 'stateops[s3]'")
    with pytest.raises(ImportError):  # another storage's missing implementation stays fsspec's own error
        paths.filesystem("gcs://bucket/home")


def test_the_entry_points_import_without_any_optional_module():
    """The plain install has no extra: the CLI, the code location's builder, the runner and the storage layer import
    with every extra's module (and boto3's and botocore's, which only the s3 extra brings) refused at import."""
    import subprocess
    import sys
    import textwrap

    optional = sorted({module for module, _ in EXTRAS.values()} | {"boto3", "botocore", "aiobotocore", "s3fs"})
    code = textwrap.dedent(f"""
        import importlib.abc, sys
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {optional!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (an extra's)")
        sys.meta_path.insert(0, Refuse())
        import stateops.cli.main, stateops.dagster, stateops.jobs.runtime.runner, stateops.storage
        """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
