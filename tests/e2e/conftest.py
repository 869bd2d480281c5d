"""Fixtures of the end-to-end tests."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

import pytest

from stateops.layout import Layout


@pytest.fixture
def small_archive_root(layout):
    """A 1 MiB tmpfs inside the home (the roots guard admits it): every file takes at least a page there, so
    a checkpoint of a few hundred small files that the runbook's size check admits does not fit."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: the out-of-space case runs where the tests run as root (CI)")
    root = os.path.join(layout.home, "small_disk")
    os.makedirs(root)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", root], capture_output=True, text=True)
    if mounted.returncode != 0:
        os.rmdir(root)
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the out-of-space case needs one")
    try:
        yield root
    finally:
        subprocess.run(["umount", root], check=False)
        os.rmdir(root)


@dataclass(frozen=True)
class S3Home:
    """A bucket for homes on the S3 API, the prefix StateOps may write under, and the AWS_* environment."""
    bucket: str
    prefix: str
    env: dict

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{name}"


@pytest.fixture(scope="module")
def s3_homes(s3_env):
    """A bucket of the module's own on the test process's moto server, holding a neighbour's object outside
    StateOps' prefix, and the AWS_* environment pointing every client at it. Afterwards the neighbour's object
    must be the only key outside the prefix."""
    import uuid

    import boto3
    import s3fs

    from tests.support.servers.moto import keys

    home = S3Home(f"stateops-e2e-{uuid.uuid4().hex[:8]}", "team/streaming", s3_env)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_env.items():
            patch.setenv(name, value)
        patch.setenv("AWS_ALLOW_HTTP", "true")  # delta-rs read by the tests without storage options
        client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
        client.create_bucket(Bucket=home.bucket)
        client.put_object(Bucket=home.bucket, Key=NEIGHBOUR, Body=b"not StateOps'")
        s3fs.S3FileSystem.clear_instance_cache()
        yield home
        outside = [key for key in keys(s3_env, home.bucket) if not key.startswith(home.prefix + "/")]
        s3fs.S3FileSystem.clear_instance_cache()
    assert outside == [NEIGHBOUR], f"written outside {home.prefix}/: {outside}"


NEIGHBOUR = "elsewhere/keep.txt"


@pytest.fixture
def s3_layout(s3_homes, tmp_path, monkeypatch) -> Layout:
    """This test's home under the module's bucket and prefix, as STATEOPS_HOME (the control records with it)."""
    url = s3_homes.url(tmp_path.name)
    monkeypatch.setenv("STATEOPS_HOME", url)
    monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
    return Layout.of(url)


@pytest.fixture(scope="module")
def s3_spark(spark, s3_homes):
    """The test process's Spark session with the S3A settings the session factory derives from the AWS_*
    environment (a session built in that environment gets them at start), for the module."""
    from tests.support.servers.moto import s3a_session

    with s3a_session(spark, s3_homes.env):
        yield spark


@pytest.fixture(scope="module")
def s3_scenarios(s3_homes, s3_spark):
    """The module's homes on S3 built once (tests/support/scenarios.py S3Store)."""
    from tests.support.scenarios import S3Store

    return S3Store(s3_homes, s3_spark)


@pytest.fixture
def s3_scenario(s3_scenarios, monkeypatch):
    """`s3_scenario(job, store=None)`: a fresh copy of the module's home where `job` ran over S3_INPUT (on `store` when
    given), as STATEOPS_HOME (the control records with it); returns (its Layout, the batches the run committed)."""
    def restore(job: str, store: str | None = None):
        layout, batches = s3_scenarios.restore(job, store)
        monkeypatch.setenv("STATEOPS_HOME", layout.home)
        monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
        return layout, batches
    return restore


@pytest.fixture
def s3_home_url(s3_homes, tmp_path) -> str:
    """A home URL of this test's own under the module's bucket and prefix (not set as STATEOPS_HOME)."""
    return s3_homes.url(tmp_path.name)


@pytest.fixture
def s3_homes_client(s3_homes):
    """A boto3 client for the module's bucket (`client.bucket`), to read and write it around the code under test."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_homes.env["AWS_ENDPOINT_URL"])
    client.bucket = s3_homes.bucket
    return client


@pytest.fixture
def s3_bucket(s3_env, monkeypatch):
    """A boto3 client on a fresh bucket (`client.bucket`), this process's AWS_* environment pointing at the server."""
    import s3fs

    from tests.support.servers.moto import fresh_bucket

    yield fresh_bucket(s3_env, monkeypatch, "stateops")
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(params=["local", "s3"])
def storage_root(request, tmp_path) -> str:
    """A folder on each backend of the storage layer in turn (tests/e2e/test_storage_contract.py): a local path,
    or a prefix of a fresh bucket on the S3 API server."""
    if request.param == "local":
        return str(tmp_path / "store")
    s3 = request.getfixturevalue("s3_bucket")
    return f"s3://{s3.bucket}/contract"


@pytest.fixture
def s3_versioned_bucket(s3_env, monkeypatch):
    """A boto3 client on a fresh versioned bucket (`client.bucket`): its listing names every object ever written
    there, removed ones too."""
    import s3fs

    from tests.support.servers.moto import fresh_bucket

    yield fresh_bucket(s3_env, monkeypatch, "control", versioned=True)
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_calls(s3_homes):
    """The S3 API operations the process's s3fs client sends from now on, with their keys (botocore's own
    event hook on the live client: what went over the wire, not a stand-in)."""
    from stateops.storage import filesystem

    fs, _ = filesystem(f"s3://{s3_homes.bucket}/")
    sent: list[tuple[str, str]] = []

    def record(model, params, **_):
        sent.append((model.name, params.get("Key", "")))

    fs.s3.meta.events.register("before-parameter-build.s3", record)
    yield sent
    fs.s3.meta.events.unregister("before-parameter-build.s3", record)


@pytest.fixture(scope="module")
def audit_cli_home(spark, tmp_path_factory) -> dict:
    """user_activity run over generated input, an unbounded dedup checkpoint outside the home, an empty folder and
    a plain file: the targets of the `stateops audit` contract tests."""
    from stateops.jobs.demo.generator import GeneratorConfig, generate
    from tests.support.audit_queries import event_stream, events, run_bounded, run_job_query, write_batches

    root = tmp_path_factory.mktemp("audit_cli")
    layout = Layout(str(root / "home"))
    generate(layout, GeneratorConfig(events=600, files=2, users=40, seed=3))
    run_job_query(spark, layout, "user_activity")
    write_batches(root / "input", [events(b, 200) for b in range(2)])
    unbounded = run_bounded(event_stream(spark, root / "input").withWatermark("event_time", "10 minutes")
                            .dropDuplicates(["event_id"]), str(root / "elsewhere" / "unbounded"))
    (root / "empty").mkdir()
    (root / "a_file").write_text("not a checkpoint")
    return {"root": root, "layout": layout, "unbounded": unbounded}


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL server on loopback (tests/support/servers/postgres.py) for the module; skips,
    saying why, where its binaries are absent."""
    from tests.support.servers.postgres import postgres_server, skip_reason

    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module")
def demo_run(spark, tmp_path_factory):
    """(layout, DAGSTER_HOME, instance, run id, printed lines) of one demo run (stateops.dagster.demo.run_demo, as
    scripts/demo runs it) on a reduced input, into a fresh instance prepared as scripts/demo and scripts/ui
    prepare it."""
    from dagster import DagsterInstance

    from stateops.dagster.demo import run_demo
    from stateops.dagster.instance import prepare
    from tests.support.scenarios import DEMO_INPUT_SMALL

    root = tmp_path_factory.mktemp("demo")
    layout, home = Layout(str(root / "stateops")), str(root / "dagster")
    assert prepare(home) is None
    lines: list[str] = []
    with DagsterInstance.from_config(home) as instance:
        result = run_demo(layout, instance, DEMO_INPUT_SMALL, echo=lines.append)
        assert result.success, lines
        yield layout, home, instance, result.run_id, lines


@pytest.fixture(scope="module")
def daemon_world(tmp_path_factory):
    """The sensors' world (tests/support/servers/dagster_daemon.py World) for the module: the instance the test
    reads, StateOps' code location loaded as the daemon loads it, and the daemon (started by the tests)."""
    from dagster import DagsterInstance
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    from tests.support.servers.dagster_daemon import LOCATION, Daemon, World

    world = World(tmp_path_factory.mktemp("daemon"))
    with pytest.MonkeyPatch.context() as patch:
        for name in ("DAGSTER_HOME", "STATEOPS_HOME", "STATEOPS_CONFIG", "STATEOPS_SENSOR_INTERVAL_SECONDS"):
            patch.setenv(name, world.env[name])
        instance = DagsterInstance.get()
        with WorkspaceProcessContext(instance, WorkspaceFileTarget([world.workspace])) as workspace:
            [repo] = workspace.create_request_context().get_code_location(LOCATION).get_repositories().values()
            world.instance, world.repo, world.daemon = instance, repo, Daemon(world)
            try:
                yield world
            finally:
                world.daemon.stop()
                instance.dispose()


@pytest.fixture
def daemon_env(daemon_world, monkeypatch):
    """This test's process sees the world's homes and config."""
    for name in ("DAGSTER_HOME", "STATEOPS_HOME", "STATEOPS_CONFIG"):
        monkeypatch.setenv(name, daemon_world.env[name])


@pytest.fixture(scope="module")
def installed_stateops(tmp_path_factory):
    """The python of a new venv with StateOps installed from a wheel of this tree (tests/support/wheel_env.py)."""
    from tests.support.wheel_env import build_wheel, new_venv

    root = tmp_path_factory.mktemp("installed")
    return new_venv(root / "venv", build_wheel(root / "dist"))


@pytest.fixture(scope="module")
def stateops_wheel(tmp_path_factory):
    """The wheel of this tree (tests/support/wheel_env.py)."""
    from tests.support.wheel_env import build_wheel

    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module", params=["highest", "lowest"])
def installed_at_an_end(request, stateops_wheel, tmp_path_factory):
    """StateOps in a fresh venv resolved to the highest or the lowest versions its ranges allow
    (tests/support/install_ends.py)."""
    from tests.support.install_ends import install_at

    return install_at(request.param, stateops_wheel, tmp_path_factory.mktemp(f"venv-{request.param}"))


@pytest.fixture
def fetched_jars_copy(tmp_path):
    """A copy of the jars folder scripts/setup fetched (the default one), as a user's STATEOPS_JARS folder."""
    import shutil

    from stateops.jvm.jars import JarsFolder

    source = JarsFolder.of()
    if not source.jars():
        pytest.skip("the pinned jars were not fetched: run bash scripts/setup")
    dest = tmp_path / "jars"
    shutil.copytree(source.path, dest)
    return dest


@pytest.fixture
def fence_bucket(request, monkeypatch):
    """A factory of fresh versioned buckets on the worker's S3 API server, for the fence trials: (boto3 client with
    `.bucket`, the AWS_* environment); the server starts only for a trial that asks for a bucket."""
    from tests.support.servers.moto import fresh_bucket

    def make():
        env = request.getfixturevalue("s3_env")
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")  # delta-rs read by the checks without storage options
        return fresh_bucket(env, monkeypatch, "fence", versioned=True), env

    return make


@pytest.fixture(scope="module")
def journey(scenario_store, spark, tmp_path_factory):
    """One move of a local home where user_activity ran (tests/support/home_moves.py), its stages that act run once
    for the module's tests (tests/e2e/test_home_move.py: one stage a test)."""
    from tests.support.home_moves import make_journey

    old = scenario_store.copy("user_activity_small", lambda: spark)
    return make_journey(old, Layout(str(tmp_path_factory.mktemp("moved") / "home")))
