"""Shared fixtures: a temporary STATEOPS_HOME per test and one real local Spark session per test process."""
from __future__ import annotations

import contextlib
import os

import pytest

from stateops.layout import Layout


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Layout:
    home = tmp_path / "stateops"
    monkeypatch.setenv("STATEOPS_HOME", str(home))
    return Layout(str(home))


@pytest.fixture(scope="session")
def spark():
    """Real Spark, local mode, built by the project's session factory (RocksDB, UTC, machine-sized)."""
    from jobs.session import get_session

    session = get_session()
    yield session
    session.stop()


@contextlib.contextmanager
def delta_writer_in_force(spark, writer: str):
    """Jobs run by this session and the `stateops` processes a test starts write Delta with `writer`
    (jobs.session: `delta-rs`, or Delta's own Spark writer); skips `spark` without its jars."""
    from jobs.session import DELTA_WRITER_CONF, project_jars

    if writer == "spark" and not any("delta-spark" in os.path.basename(j) for j in project_jars()):
        pytest.skip("Delta's Spark jars are missing (.jars/spark): install Maven 3.8+ and run bash scripts/setup")
    before_conf, before_env = spark.conf.get(DELTA_WRITER_CONF, "delta-rs"), os.environ.get("STATEOPS_DELTA_WRITER")
    spark.conf.set(DELTA_WRITER_CONF, writer)
    os.environ["STATEOPS_DELTA_WRITER"] = writer
    try:
        yield writer
    finally:
        spark.conf.set(DELTA_WRITER_CONF, before_conf)
        if before_env is None:
            os.environ.pop("STATEOPS_DELTA_WRITER", None)
        else:
            os.environ["STATEOPS_DELTA_WRITER"] = before_env


@pytest.fixture(scope="module", params=("delta-rs", "spark"))
def delta_writer(request, spark):
    """The module's tests run once per Delta writer (the oracle and kill tests: both writers stay supported)."""
    with delta_writer_in_force(spark, request.param) as writer:
        yield writer


@pytest.fixture
def importable(monkeypatch):
    """`importable(folder)` puts a folder of user code on sys.path for the test, first forgetting any module of
    the same name imported from elsewhere; afterwards the modules imported from it are forgotten too, with the
    job loader's cache (jobs.transformation): tests import examples/engagement.py from several folders."""
    import sys

    from jobs import transformation

    folders: list[str] = []

    def forget(names) -> None:
        for name in names:
            sys.modules.pop(name, None)
        transformation._load.cache_clear()

    def add(folder) -> None:
        folders.append(os.path.realpath(str(folder)))
        forget(os.path.splitext(n)[0] for n in os.listdir(folder) if n.endswith(".py"))
        monkeypatch.syspath_prepend(str(folder))

    yield add
    forget([name for name, module in list(sys.modules.items())
            if any(os.path.realpath(getattr(module, "__file__", None) or "").startswith(folder + os.sep)
                   for folder in folders)])


@pytest.fixture(autouse=True)
def no_leaked_dagster_instance():
    """Fails the test that leaves a Dagster instance entered: Dagster's definition loads resolve the process's
    definitions-state storage through the newest entered instance, so a leaked one (e.g. a schedule context
    built without `with`, whose `.instance` enters one) breaks a later test's load once it is collected."""
    from dagster._core.storage.defs_state.base import DefsStateStorage

    before = DefsStateStorage.get()
    yield
    assert DefsStateStorage.get() is before, "a Dagster instance was left entered: use build_*_context in `with`"


@pytest.fixture
def dagster_instance():
    """A real ephemeral Dagster instance, disposed after the test: a live instance registers itself as the
    process's definitions-state storage, and a leaked one breaks later definition loads."""
    from dagster import DagsterInstance

    with DagsterInstance.ephemeral() as instance:
        yield instance


# End-to-end suites that each start several JVMs, a webserver or a daemon: minutes apiece on 2 cores,
# together beyond the CI budget. `bash scripts/test` leaves them out (pyproject's `-m "not long"`);
# `bash scripts/test -m long` runs them. The cluster (`-m cluster`), Postgres, fault (`-m faults`) and retention
# suites (S3 and the random-policy property test included), the sensors through a real daemon, a user job from
# outside the package and the demo in a browser are in the default run.
LONG_SUITES = (
    "tests/e2e/test_recovery_faults.py",
    "tests/e2e/test_recovery_graphql.py",
    "tests/e2e/test_recovery_modes.py",
    "tests/e2e/test_s3_kill.py",
    "tests/e2e/test_s3_runbook_modes.py",
    "tests/spark/test_explain_key_long.py",
)


def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath)
    for item in items:
        if os.path.relpath(str(item.path), root).startswith(LONG_SUITES):
            item.add_marker(pytest.mark.long)


FAULT_COUNTS = "fault suite counts"  # a test's record_property(FAULT_COUNTS, line): printed at the end
_fault_lines: list[str] = []


def pytest_runtest_logreport(report):
    """Runs in the main process (pytest-xdist sends each report's user_properties back to it)."""
    if report.when == "call":
        _fault_lines.extend(str(v) for k, v in report.user_properties if k == FAULT_COUNTS)


def pytest_terminal_summary(terminalreporter):
    if _fault_lines:
        terminalreporter.section(FAULT_COUNTS)
        for line in _fault_lines:
            terminalreporter.write_line(line)
