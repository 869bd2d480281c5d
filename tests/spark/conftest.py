"""Fixtures of the Spark tests (real local Spark in the test process)."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import fields

import pytest
from click.testing import CliRunner

from stateops.layout import Layout
from stateops.cli.main import main
from tests.support import oracle, scenarios
from tests.support.servers.kafka import fresh_topics, produce, records
from stateops.jobs.definition.environment import read_settings


@pytest.fixture(scope="module")
def kafka_topics(kafka, tmp_path_factory) -> str:
    """The process's broker with fresh topics holding the generator's lines (scenarios.KAFKA_INPUT), produced
    file by file by `stateops generate --kafka`, each input to the topic of its name, and one record of invalid
    UTF-8 on `events`; yields the bootstrap address."""
    scratch = tmp_path_factory.mktemp("kafka-input") / "stateops"
    fresh_topics(kafka, scenarios.KAFKA_TOPICS)
    knobs = [f"--{f.name.replace('_', '-')}={getattr(scenarios.KAFKA_INPUT, f.name)}"
             for f in fields(scenarios.KAFKA_INPUT)]
    done = CliRunner().invoke(main, ["--home", str(scratch), "generate", *knobs, "--kafka", kafka])
    assert done.exit_code == 0, done.output
    for topic in scenarios.KAFKA_TOPICS:
        lines = [line for _, batch in oracle.landing_batches(Layout(str(scratch)).landing(topic)) for line in batch]
        assert f"{topic}: {len(lines)} records to topic {topic}" in done.output
        assert sorted(v.decode() for *_, v in records(kafka, topic)) == sorted(lines)
    produce(kafka, "events", [scenarios.KAFKA_BAD_BYTES])
    return kafka


@pytest.fixture(scope="module")
def kafka_homes(kafka_topics, spark, tmp_path_factory):
    """Homes built once for the module over its topics (copied per test): `user_activity` run over every record, on
    the default Delta writer whichever test asks first."""
    from stateops.jobs.definition.environment import load_jobs
    from stateops.jobs.runtime.runner import run_job
    from tests.support.delta_writers import delta_writer_in_force

    store = scenarios.Store(str(tmp_path_factory.mktemp("kafka-homes")))

    def user_activity(layout: Layout) -> None:
        config = scenarios.kafka_config(tmp_path_factory.mktemp("kafka-config"), kafka_topics, "user_activity",
                                        scenarios.KAFKA_CHAIN_STORE)
        with delta_writer_in_force(spark, "delta-rs"):
            run_job(spark, load_jobs(config, layout)["user_activity"], layout, settings=read_settings())

    return lambda: store.home("user_activity", user_activity)


@pytest.fixture
def kafka_user_activity(kafka_homes) -> Layout:
    """A copy of a home where `user_activity` read the module's topics (bounded, every record then)."""
    return kafka_homes()


@pytest.fixture(scope="module")
def audit_numbers(spark, tmp_path_factory) -> dict:
    """The audit-numbers states (tests/support/audit_queries.py build_audit_numbers), built once for the module."""
    from tests.support.audit_queries import build_audit_numbers

    return build_audit_numbers(spark, tmp_path_factory.mktemp("audit_numbers"))


@pytest.fixture(scope="module")
def numbers_join_report(spark, audit_numbers):
    """The deep audit of the join, with its 2-hour bound."""
    from stateops.audit import deep_audit
    from tests.support.audit_queries import AUDIT_NUMBERS_BOUND

    return deep_audit(spark, audit_numbers["join_cp"], join_bound=AUDIT_NUMBERS_BOUND)


@pytest.fixture(scope="module")
def numbers_bare_report(spark, audit_numbers):
    """The join's checkpoint as a bare path (no join bound), its latest batch chosen by id, 2 days later."""
    import datetime as dt

    from stateops.audit import deep_audit
    from stateops.checkpoints.checkpoint import Checkpoint

    batch = Checkpoint.open(audit_numbers["join_cp"]).latest_committed_batch()
    return deep_audit(spark, audit_numbers["join_cp"], batch_id=batch,
                      now=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=2))


@pytest.fixture(scope="module")
def deep_audit_states(spark, tmp_path_factory) -> dict:
    """The deep-audit checkpoints (tests/support/audit_queries.py build_deep_audit_states), built once."""
    from tests.support.audit_queries import build_deep_audit_states

    return build_deep_audit_states(spark, tmp_path_factory.mktemp("audit_deep"))


@pytest.fixture(scope="module")
def matrix(spark, tmp_path_factory) -> dict[str, str]:
    """The support matrix's plain-PySpark checkpoints (tests/support/store_matrix.py), built once: cell -> path."""
    from tests.support.store_matrix import build_matrix

    return build_matrix(spark, tmp_path_factory.mktemp("matrix"))


@pytest.fixture(scope="module")
def deep_audit_reports(spark, deep_audit_states) -> dict:
    """As `stateops audit NAME` does: a job's checkpoint is audited with the job's join bound."""
    from stateops.jobs.definition.environment import get_job
    from stateops.audit import deep_audit
    from tests.support.audit_queries import DEEP_AUDIT_JOBS

    return {name: deep_audit(spark, cp, job=name, join_bound=get_job(name).join_bound) if name in DEEP_AUDIT_JOBS
            else deep_audit(spark, cp) for name, cp in deep_audit_states["cps"].items()}


@pytest.fixture(scope="module")
def explain_join(spark, tmp_path_factory) -> tuple:
    """tests/support/explain_homes.py build_explain_join, once for the module."""
    from tests.support.explain_homes import build_explain_join

    return build_explain_join(spark, tmp_path_factory.mktemp("explain"))


@pytest.fixture(scope="module")
def late_user_homes(spark, tmp_path_factory) -> tuple:
    """tests/support/explain_homes.py build_late_user_homes, once for the module."""
    from tests.support.explain_homes import build_late_user_homes

    return build_late_user_homes(spark, tmp_path_factory.mktemp("explain_state"))


@pytest.fixture(scope="module")
def long_join_home(spark, tmp_path_factory) -> dict:
    """tests/support/explain_homes.py build_long_join, once for the module (long tier)."""
    from tests.support.explain_homes import build_long_join

    return build_long_join(spark, tmp_path_factory.mktemp("explain_long"))



@pytest.fixture(scope="module")
def retention_history(spark, tmp_path_factory):
    """The checkpoint history of tests/support/retention_history.py, moved aside: a copy put back at the path it
    was built at restarts like the original (the file source's log names input files by absolute path, and a
    restart reads the last batch's files again)."""
    return _history(spark, tmp_path_factory)


@pytest.fixture(scope="module")
def retention_first_generation(spark, tmp_path_factory):
    """The history's first generation only (build_history's generations=1): what the tests of the rules'
    refusals, plans and locks need, in two of its eight queries fewer; the two generations' change of store kind
    is the long tier's (the random policies, the object store)."""
    return _history(spark, tmp_path_factory, generations=1)


def _history(spark, tmp_path_factory, generations: int | None = None):
    from tests.support.retention_history import GENERATIONS, build_history

    root = tmp_path_factory.mktemp("retention")
    build_history(spark, root / "home", generations or len(GENERATIONS))
    os.rename(root / "home", root / "history")
    return root / "history"


@pytest.fixture
def retention_home(retention_first_generation, tmp_path, monkeypatch):
    """A copy of the history's first generation as STATEOPS_HOME (sessions keep one batch: minBatchesToRetain 1)."""
    copy = tmp_path / "home"
    shutil.copytree(retention_first_generation, copy, symlinks=True)
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({"spark.sql.streaming.minBatchesToRetain": "1"}))
    monkeypatch.setenv("STATEOPS_HOME", str(copy))
    return copy


@pytest.fixture
def retention_s3_home(retention_history, s3_env, monkeypatch, tmp_path):
    """A copy of the retention history in a fresh bucket of the process's moto server (fsspec/s3fs and delta-rs
    both configured by the AWS_* environment), the control records on local disk; yields (s3fs, its URL)."""
    from tests.support.servers.moto import fresh_bucket

    client = fresh_bucket(s3_env, monkeypatch, "retention")
    monkeypatch.setenv("STATEOPS_CONTROL_HOME", str(tmp_path / "control"))
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.put(str(retention_history) + "/", f"{client.bucket}/home", recursive=True)
    try:
        yield fs, f"s3://{client.bucket}/home"
    finally:
        s3fs.S3FileSystem.clear_instance_cache()



@pytest.fixture
def sensor_home(tmp_path, monkeypatch):
    """A fresh STATEOPS_HOME and config file (sensor_harness.SENSOR_CONFIG); `configure(extra)` rewrites the
    config (sensors read it per tick). Returns (layout, configure)."""
    from tests.support.sensor_harness import SENSOR_CONFIG

    layout = Layout(str(tmp_path / "home"))
    config = tmp_path / "stateops.toml"
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))

    def configure(extra: str = "") -> None:
        config.write_text(SENSOR_CONFIG + extra)

    configure()
    return layout, configure



@pytest.fixture
def delta_spark(spark):
    """The test process's session with Delta's Spark writer in force (skips, saying why, without its jars)."""
    from tests.support.delta_writers import delta_writer_in_force

    with delta_writer_in_force(spark, "spark"):
        yield spark



@pytest.fixture(scope="module")
def oracle_home(tmp_path_factory, delta_writer) -> Layout:
    """A home per Delta writer (tests/conftest.py delta_writer: every test using it runs on both) with
    scenarios.ORACLE_INPUT, whose second file of every input holds a poison row."""
    from stateops.jobs.demo.generator import generate

    layout = Layout(str(tmp_path_factory.mktemp(f"oracle-{delta_writer}") / "stateops"))
    generate(layout, scenarios.ORACLE_INPUT)
    for source in ("events", "orders", "payments"):
        assert oracle.future_lines(layout.landing(source), source)[0] in oracle.landing_batches(
            layout.landing(source))[1][1], f"{source}: the second file holds a poison row"
    return layout


@pytest.fixture(scope="module")
def input_schemas(tmp_path_factory) -> dict:
    """(job, input) of every job's input schema: events (the user_* jobs), orders and payments (order_payments),
    and a user's job over nested and numeric columns (tests/support/readings_job.py), loaded from its config."""
    from stateops.jobs.definition.environment import load_jobs
    from tests.support import readings_job

    jobs = load_jobs(readings_job.config(tmp_path_factory.mktemp("readings")))  # the built-in jobs and this one
    readings, payments, activity = jobs["device_readings"], jobs["order_payments"], jobs["user_activity"]
    return {"events": (activity, activity.inputs[0]),
            "orders": (payments, payments.inputs[0]), "payments": (payments, payments.inputs[1]),
            "readings": (readings, readings.inputs[0])}


@pytest.fixture(scope="module")
def spark35(tmp_path_factory) -> dict[str, str]:
    """A copy of each fixture checkpoint (the tests never touch the fixtures themselves)."""
    from tests.support.spark35 import FIXTURES, WRITTEN

    root = tmp_path_factory.mktemp("spark35")
    copies = {}
    for name in WRITTEN:
        shutil.copytree(FIXTURES / name / "checkpoint", root / name)
        copies[name] = str(root / name)
    return copies


@pytest.fixture(scope="module")
def slowed(spark, tmp_path_factory) -> Layout:
    """One run of tests/support/slow_parts_job.py's job, each of its batches slow in one part (its sink: a `sleep`
    fault before batch 3's commit): tests/spark/test_batch_parts.py."""
    from stateops.faults import ENV as FAULTS
    from stateops.jobs.definition.environment import read_settings
    from stateops.jobs.demo.generator import GeneratorConfig, generate
    from stateops.jobs.runtime.runner import run_job
    from tests.support.slow_parts_job import EVENTS_PER_FILE, FILES, SINK_PAUSE, SPEC, USERS

    layout = Layout(str(tmp_path_factory.mktemp("slowed") / "stateops"))
    generate(layout, GeneratorConfig(events=FILES * EVENTS_PER_FILE, files=FILES, users=USERS, seed=5))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FAULTS, f"sink.before_commit:table=slow_parts,batch=3,then=sleep,seconds={SINK_PAUSE}")
        result = run_job(spark, SPEC, layout, settings=read_settings())
    assert result.batches == FILES
    return layout
