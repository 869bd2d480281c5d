"""Spark's Python workers on a local master run through StateOps' launcher (stateops.jobs.runtime.python_workers),
which takes the installed pyspark's own pyspark.zip off the PYTHONPATH Spark gives them, so they import the compiled
pyspark of site-packages instead of compiling the zip's sources at every start. No JVM: the launcher is run as Spark
runs it, with the PYTHONPATH Spark builds (the zip first)."""
import os
import subprocess
import sys

import pytest

from stateops.jobs.runtime.python_workers import install, worker_python

pytestmark = pytest.mark.unit

PROBE = "import os, pyspark; print(os.environ.get('PYTHONPATH', '')); print(pyspark.__file__)"


def _launcher(cache: str, monkeypatch) -> str:
    """The launcher for a local master, written under `cache` (XDG_CACHE_HOME)."""
    monkeypatch.setenv("XDG_CACHE_HOME", cache)
    path = worker_python("local[2]")
    install(path)
    return path


def _own_zip() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "python", "lib", "pyspark.zip")


def _run(launcher: str, pythonpath: str) -> tuple[str, str]:
    done = subprocess.run([launcher, "-c", PROBE], env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True,
                          text=True, check=True)
    path, module = done.stdout.splitlines()
    return path, module


@pytest.mark.parametrize("before, after", [
    ("{zip}:{py4j}:/extra", "{py4j}:/extra"),   # as Spark builds it: the zip first
    ("/extra:{zip}", "/extra"),
    ("{zip}", ""),
    ("/another/spark/python/lib/pyspark.zip:/extra", "/another/spark/python/lib/pyspark.zip:/extra"),  # not ours
])
def test_the_launcher_takes_only_its_own_pyspark_zip_off_the_path(tmp_path, monkeypatch, before, after):
    launcher = _launcher(str(tmp_path), monkeypatch)
    zip_path = _own_zip()
    names = {"zip": zip_path, "py4j": os.path.join(os.path.dirname(zip_path), "py4j-0.10.9.9-src.zip")}
    path, module = _run(launcher, before.format(**names))
    assert path == after.format(**names)
    assert module == os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(zip_path))), "__init__.py")
    assert ".zip" not in module  # site-packages' compiled pyspark, the one this interpreter imports


def test_a_cluster_master_keeps_the_interpreter(tmp_path, monkeypatch):
    launcher = _launcher(str(tmp_path), monkeypatch)
    assert worker_python("spark://head:7077") == sys.executable
    assert open(launcher).read().rstrip().endswith(f"exec '{sys.executable}' \"$@\"")
    assert os.access(launcher, os.X_OK)


def test_a_launcher_that_cannot_be_written_leaves_the_interpreter(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a cache folder that cannot be made
    path = worker_python("local[*]")
    assert path != sys.executable and install(path) is False and not os.path.exists(path)
