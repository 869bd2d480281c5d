"""Shared fixtures (every layer): a temporary STATEOPS_HOME per test, one real local Spark session per test
process, the Delta writer in force, the servers (one per test process), the scenarios built once per test
process; and how the run is scheduled over its two workers (docs/testing.md)."""
from __future__ import annotations

import os

import pytest

from stateops.layout import Layout
from tests.support.delta_writers import delta_writer_in_force


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Layout:
    home = tmp_path / "stateops"
    monkeypatch.setenv("STATEOPS_HOME", str(home))
    return Layout(str(home))


@pytest.fixture(scope="session")
def spark():
    """Real Spark, local mode, built by the project's session factory (RocksDB, UTC, machine-sized)."""
    from stateops.jobs.definition.spark_settings import SparkSettings
    from stateops.jobs.runtime.session import get_session

    session = get_session(SparkSettings.from_env())
    yield session
    session.stop()


# A run's STATEOPS_SPARK_CONF reaches the process's one session (get_session's getOrCreate sets a SQL conf on the
# session that exists): the retention tests' minBatchesToRetain of 1 or 2 stayed in force for the next modules of
# their worker, whose runs then purged the offsets a later assertion read (the store switch's memory-guard test,
# "batch 4 is not in the offset log (available: [6]..[7])", only when it ran after them on one worker).
LEAKING_CONFS = ("spark.sql.streaming.minBatchesToRetain",)


@pytest.fixture(autouse=True)
def _session_confs_restored():
    """Each test leaves the session's LEAKING_CONFS as it found them (no session is started for it)."""
    import sys

    session = sys.modules.get("pyspark.sql") and sys.modules["pyspark.sql"].SparkSession.getActiveSession()
    before = {key: session.conf.get(key, None) for key in LEAKING_CONFS} if session else {}
    yield
    if not before or sys.modules["pyspark.sql"].SparkSession.getActiveSession() is not session:
        return
    for key, value in before.items():
        if session.conf.get(key, None) != value:
            session.conf.unset(key) if value is None else session.conf.set(key, value)


@pytest.fixture(scope="module", params=("delta-rs", "spark"))
def delta_writer(request, spark):
    """The module's tests run once per Delta writer (the oracle and kill tests: both writers stay supported)."""
    with delta_writer_in_force(spark, request.param) as writer:
        yield writer


@pytest.fixture(params=("delta-rs", "spark"))
def each_delta_writer(request, spark):
    """The test runs once per Delta writer (a module whose other tests run on the default writer)."""
    with delta_writer_in_force(spark, request.param) as writer:
        yield writer


@pytest.fixture
def importable(monkeypatch):
    """`importable(folder)` puts a folder of user code on sys.path for the test, first forgetting any module of
    the same name imported from elsewhere; afterwards the modules imported from it are forgotten too, with the
    job loader's cache (stateops.jobs.definition.transformation): tests import examples/engagement.py from several folders."""
    import sys

    from stateops.jobs.definition import transformation

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


@pytest.fixture
def persistent_dagster_instance():
    """A real Dagster instance on a temporary DAGSTER_HOME (schedule contexts need an instance ref), disposed
    after the test."""
    from dagster import instance_for_test

    with instance_for_test() as instance:
        yield instance


# --- servers: one per test process (xdist worker), started when a test first asks for it ---

@pytest.fixture(scope="session")
def s3_env():
    """moto's S3 server (tests/support/servers/moto.py): the AWS_* environment that points clients at it. Tests
    take a fresh bucket each (moto.fresh_bucket), so one server serves them all."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed: the S3 suites need its server")
    from tests.support.servers.moto import moto_s3

    with moto_s3() as env:
        yield env


@pytest.fixture(scope="session")
def kafka():
    """A Kafka broker started by scripts/kafka (tests/support/servers/kafka.py); yields its bootstrap address.
    Tests use topics of their own (kafka.topic_names), so one broker serves them all."""
    from tests.support.servers.kafka import kafka_broker, require_jars

    require_jars()
    with kafka_broker() as bootstrap:
        yield bootstrap


# --- scenarios: built once per test process, copied per test (tests/support/scenarios.py) ---

@pytest.fixture(scope="session")
def scenario_store(tmp_path_factory):
    from tests.support import scenarios

    return scenarios.Store(str(tmp_path_factory.mktemp("scenarios")))


@pytest.fixture
def scenario(request, scenario_store, monkeypatch):
    """`scenario(name)`: a copy of the named scenario's home (built with the test process's Spark session on
    first use) as this test's STATEOPS_HOME; returns its Layout."""
    def copy(name: str) -> Layout:
        layout = scenario_store.copy(name, lambda: request.getfixturevalue("spark"))
        monkeypatch.setenv("STATEOPS_HOME", layout.home)
        return layout
    return copy


# --- scheduling and reporting ---

# The modules that take longest (worker-seconds measured by `scripts/test`'s JUnit XML, docs/testing.md) start
# first, one per worker, so the longest two never share a worker and the short ones fill in behind them.
# `scripts/test` runs with `--dist loadfile --no-loadscope-reorder`: a module is one unit of work on one worker
# (its module-scoped fixtures are built once), handed out in this order. (`--dist loadgroup` does not group under
# pytest 9: pytest-xdist 3.8 appends the group to `item._nodeid`, which pytest 9 no longer reads.)
HEAVIEST_FIRST = (
    # the long tier's longest (the default run deselects them): in the full tier they start first and the short
    # modules fill in behind them (the soak alone takes about 36 minutes)
    "tests/spark/test_soak_memory.py",
    "tests/e2e/test_fence.py",
    "tests/e2e/test_s3_kill.py",
    "tests/e2e/test_home_move_chain.py",
    "tests/spark/test_explain_key_long.py",
    "tests/e2e/test_install_ends.py",
    "tests/e2e/test_kafka_faults.py",
    "tests/e2e/test_dagster_project.py",
    "tests/spark/test_kafka_jobs.py",
    "tests/e2e/test_s3_home.py",
    "tests/e2e/test_fault_suite.py",
    "tests/spark/test_retention.py",
    # the default run's longest (2026-12-02)
    "tests/spark/test_state_compatibility.py",
    "tests/spark/test_audit_deep.py",
    "tests/spark/test_adoption.py",
    "tests/spark/test_line_parser.py",
    "tests/spark/test_jobs_oracle.py",
    "tests/spark/test_store_switch.py",
    "tests/spark/test_recovery.py",
    "tests/spark/test_audit_numbers.py",
    "tests/e2e/test_storage_contract.py",
    "tests/spark/test_sensors.py",
    "tests/e2e/test_home_move.py",
    "tests/e2e/test_dagster_assets.py",
    "tests/e2e/test_kill_restart.py",
    "tests/spark/test_delta_engines.py",
    "tests/e2e/test_demo.py",
)


def pytest_configure(config):
    """C1-only JIT for the short-lived JVMs tests start, the full JIT for each test process's own session
    (tests/support/jvm_starts.py: about a third less CPU per started JVM)."""
    from tests.support.jvm_starts import use_c1_for_started_jvms

    use_c1_for_started_jvms()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    root = str(config.rootpath)
    rank = {path: i for i, path in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(os.path.relpath(str(item.path), root), len(rank)))


def pytest_runtest_logreport(report):
    """Runs in the main process (pytest-xdist sends each report's user_properties back to it)."""
    if report.when == "call" and report.user_properties:
        from tests.support import kill_trials

        kill_trials.collect(report.user_properties)


def pytest_terminal_summary(terminalreporter):
    import sys

    kill_trials = sys.modules.get("tests.support.kill_trials")  # imported by the first report with counts
    if kill_trials is not None:
        kill_trials.summary(terminalreporter)
