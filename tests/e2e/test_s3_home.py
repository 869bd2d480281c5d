"""The whole home on an S3 API (moto's server on loopback, in its own process): Spark checkpoints with the
RocksDB state store and changelog checkpointing through S3A, Delta output and dead letters, the ops tables,
the control plane (conditional writes) and retention, configured by `STATEOPS_HOME=s3://BUCKET/PREFIX` and
the AWS SDK's variables only.

Oracles: tests/oracle.py over a local mirror of the landing files and of the checkpoint's logs (which files
each batch read), Spark's state reader for the deep audit, and the bucket's listing (boto3) for "nothing
outside the prefix". The kill -9 trials on this home: tests/e2e/test_s3_kill.py."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace

import pytest
from click.testing import CliRunner

from jobs.catalog import load_jobs
from jobs.generator import GeneratorConfig, generate
from jobs.recovery import recover
from jobs.runner import run_job
from jobs.session import HDFS_PROVIDER
from stateops.audit import deep_audit, fast_audit
from stateops.checkpoint import Checkpoint
from stateops.control import LeaseHeldError, acquire, current_lease, maintenance
from stateops.fs import filesystem
from stateops.layout import Layout
from stateops.recovery import RecoveryRequest, archive
from stateops_cli.main import main
from tests import oracle
from tests.audit_support import nonzero, oracle_rows
from tests.delta_rows import table_rows
from tests.e2e.test_fault_suite import COLUMNS, _expected
from tests.s3_server import keys, mirror, moto_s3, s3a_session

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

BUCKET, PREFIX = "stateops-e2e", "team/streaming"
OUTSIDE = "elsewhere/keep.txt"  # a neighbour's object: must be the only key outside the prefix
INPUT = GeneratorConfig(events=900, files=5, users=80, late_share=0.04, duplicate_share=0.06, malformed_share=0.03,
                        orders=140, minutes_per_file=20, seed=13)


@pytest.fixture(scope="module")
def s3(spark):
    """moto's S3 server, the AWS_* environment pointing every client at it, and the shared Spark session's S3A
    settings (a session built in that environment gets them from jobs.session at start)."""
    pytest.importorskip("moto.server", reason="moto[server] is not installed: the S3 suite needs its server")
    import boto3
    import s3fs

    with moto_s3() as env, pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setenv("AWS_ALLOW_HTTP", "true")  # delta-rs read by the tests without storage options
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
        client.create_bucket(Bucket=BUCKET)
        client.put_object(Bucket=BUCKET, Key=OUTSIDE, Body=b"not StateOps'")
        s3fs.S3FileSystem.clear_instance_cache()
        with s3a_session(spark, env):
            yield env
        outside = [key for key in keys(env, BUCKET) if not key.startswith(PREFIX + "/")]
        s3fs.S3FileSystem.clear_instance_cache()
    assert outside == [OUTSIDE], f"written outside {PREFIX}/: {outside}"


@pytest.fixture
def home(s3, tmp_path, monkeypatch) -> Layout:
    url = f"s3://{BUCKET}/{PREFIX}/{tmp_path.name}"
    monkeypatch.setenv("STATEOPS_HOME", url)
    monkeypatch.delenv("STATEOPS_CONTROL_HOME", raising=False)
    return Layout.of(url)


def _local(layout: Layout, job: str, dest: str) -> Layout:
    """A local mirror of the job's landing files and checkpoint (the oracle reads local files)."""
    local = Layout(dest)
    for source in {i.name for i in load_jobs()[job].inputs}:
        mirror(layout.landing(source), local.landing(source))
    mirror(layout.checkpoint(job), local.checkpoint(job))
    return local


def _check_equals_oracle(layout: Layout, job: str, dest: str) -> set:
    local = _local(layout, job, dest)
    got = table_rows(layout.table(job), COLUMNS[job])
    expected = _expected(local, job)
    assert len(got) == len(set(got)) and set(got) == expected and expected
    spec = load_jobs()[job]
    malformed = sum(oracle.malformed_count(local.landing(i.name), i.name) for i in spec.inputs)
    assert len(table_rows(layout.deadletter_table(job), ["raw"])) == malformed > 0
    return expected


@pytest.mark.parametrize("job", ["user_activity", "order_payments"])
def test_a_job_on_s3_equals_its_oracle_and_a_second_run_is_refused(spark, home, job, tmp_path):
    generate(home, INPUT)
    spec = load_jobs()[job]
    result = run_job(spark, spec, home)
    assert result.batches == INPUT.files
    checkpoint = spec.checkpoint_path(home)
    assert checkpoint.startswith(f"s3://{BUCKET}/{PREFIX}/")
    stored = [key for key in keys(dict(os.environ), BUCKET) if key.startswith(checkpoint.split("/", 3)[3] + "/")]
    assert any(key.endswith(".changelog") for key in stored), "RocksDB changelog checkpointing wrote to S3"
    _check_equals_oracle(home, job, str(tmp_path / "mirror"))

    with acquire(home, job, run_id="holder", mode="bounded"):
        with pytest.raises(LeaseHeldError):
            run_job(spark, spec, home)

    report = deep_audit(spark, checkpoint)
    assert report.operators
    for op in report.operators:
        options = {"operatorId": op.operator_id, **({"storeName": op.store_name} if op.store_name != "default"
                                                    else {})}
        expected = oracle_rows(spark, checkpoint, **options)
        assert nonzero(op.rows_per_partition) == expected and op.rows_total == sum(expected.values())

    # Without a JVM, as the sensors' ticks read them: the fast audit (state files on S3, progress rows from the
    # S3 ops table) agrees with the deep one on stores and bytes; `jobs status` reads the checkpoint and lease.
    fast = fast_audit(checkpoint, layout=home, job=job)
    assert [(o.operator_id, o.store_name, o.bytes_per_partition) for o in fast.operators] == [
        (o.operator_id, o.store_name, o.bytes_per_partition) for o in report.operators]
    status = CliRunner().invoke(main, ["jobs", "status", job, "--json"])
    assert status.exit_code == 0, status.output
    summary = json.loads(status.output)["checkpoint"]
    assert (summary["path"], summary["latest_committed_batch"]) == (checkpoint, report.batch_id)
    assert summary["watermark"] == report.watermark.isoformat()
    if job == "order_payments":  # explain-key on a key the table holds: the state reader and the logs on S3
        order = table_rows(home.table(job), ["order_id"])[0][0]
        explained = CliRunner().invoke(main, ["explain-key", job, "--key", order, "--json"])
        assert explained.exit_code == 0, explained.output
        assert json.loads(explained.output)["reason"] == "emitted"


def test_retention_applies_on_s3_and_the_job_restarts(spark, home, tmp_path, monkeypatch):
    """Retention keeps 2 batches restorable (minBatchesToRetain as the jobs' settings declare it; the session
    that ran keeps Spark's 100, so the oracle still finds every batch's files in the logs) and the state
    store snapshots every 2 deltas: the plan removes checkpoint history on S3, the objects are gone, and the
    job restarts on what is left and stays oracle-exact."""
    job = "user_activity"
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({"spark.sql.streaming.minBatchesToRetain": "2"}))
    settings = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        generate(home, replace(INPUT, files=8))
        run_job(spark, load_jobs()[job], home)
        mirrored = _local(home, job, str(tmp_path / "mirror"))  # the logs of every batch, before retention
        cli = CliRunner()
        planned = cli.invoke(main, ["retention", "plan", "--json"])
        assert planned.exit_code == 0, planned.output
        plan = json.loads(planned.output)
        history = [i for i in plan["items"] if i["rule"] == "checkpoint_history" and i["job"] == job]
        assert history and plan["files"] > 0, plan
        applied = cli.invoke(main, ["retention", "apply", "--yes", "--json"])
        assert applied.exit_code == 0, applied.output
        report = json.loads(applied.output)
        assert report["ok"] and report["files_removed"] >= sum(len(i["paths"]) for i in history), report
        stored = set(keys(dict(os.environ), BUCKET))
        for item in history:
            target = item["target"].split("/", 3)[3]
            assert not {f"{target}/{path}" for path, _ in item["paths"]} & stored, "removed from the bucket"
        generate(home, GeneratorConfig(events=300, files=2, users=40, start="2026-01-01T04:00:00+00:00",
                                       minutes_per_file=20, seed=14))
        assert run_job(spark, load_jobs()[job], home).batches == 2
        _check_equals_oracle(home, job, mirrored.home)  # the new batches' logs added to the earlier mirror
    finally:
        for key in settings:
            spark.conf.unset(key)


def _sums(url: str) -> dict[str, str]:
    """sha256 of every object under `url`, read with boto3-backed s3fs afresh (S3A's directory markers, keys
    ending in `/`, are no files)."""
    fs, base = filesystem(url)
    fs.invalidate_cache()
    return {os.path.relpath(p, base): hashlib.sha256(fs.cat(p)).hexdigest() for p in fs.find(base)
            if not p.endswith("/")}


def _break_provider(checkpoint: str):
    """A runbook hook: after the adjust step, the newest offset log names the HDFS state store provider, so
    the restart fails to load the RocksDB state (CANNOT_LOAD_STATE_STORE) and the runbook rolls back."""
    def hook(event) -> None:
        if event.step == "adjust" and event.phase == "done":
            fs, base = filesystem(checkpoint)
            fs.invalidate_cache()
            batch = Checkpoint(checkpoint).offset_batches()[-1]
            lines = fs.cat(f"{base}/offsets/{batch}").decode().splitlines()
            meta = json.loads(lines[1])
            meta["conf"]["spark.sql.streaming.stateStore.providerClass"] = HDFS_PROVIDER
            lines[1] = json.dumps(meta)
            fs.pipe(f"{base}/offsets/{batch}", "\n".join(lines).encode())
            fs.rm(f"{base}/offsets/.{batch}.crc")
    return hook


def _more_input(layout: Layout, hour: int, seed: int) -> None:
    generate(layout, GeneratorConfig(events=200, files=2, users=30, start=f"2026-01-01T{hour:02d}:00:00+00:00",
                                     minutes_per_file=15, seed=seed))


def test_runbooks_on_s3_complete_and_verify_and_a_failed_restart_rolls_back(spark, home, monkeypatch):
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    job = "user_activity"
    spec = load_jobs()[job]
    checkpoint = spec.checkpoint_path(home)
    generate(home, replace(INPUT, files=4))
    run_job(spark, spec, home)

    for hour, (mode, change) in enumerate((("adjust", {"watermark_delay": "20 minutes"}),
                                           ("repartition", {"shuffle_partitions": 6})), start=3):
        _more_input(home, hour, seed=hour)
        report = recover(home, RecoveryRequest(job, mode, reason="on S3", confirm=job, dry_run=False, **change),
                         spark=spark)
        assert report.outcome == "succeeded", (mode, report.error)
        assert report.archive_path.startswith(home.home + "/")
        assert not archive.verify(spec.archive_path(home), report.runbook_id), "the archive matches its manifest"
        assert ("verify", "done") in [(e["step"], e["phase"]) for e in report.steps]
    latest = Checkpoint(checkpoint)
    assert latest.shuffle_partitions(latest.latest_committed_batch()) == 6

    _more_input(home, 6, seed=6)
    before = _sums(checkpoint)
    report = recover(home, RecoveryRequest(job, "adjust", watermark_delay="10 minutes", reason="injected failure",
                                           confirm=job, dry_run=False), spark=spark,
                     on_event=_break_provider(checkpoint))
    assert report.outcome == "rolled_back" and "CANNOT_LOAD_STATE_STORE" in report.error, report.error
    kept = archive.manifest(spec.archive_path(home), report.runbook_id)
    assert {f["path"]: f["sha256"] for f in kept["files"]} == before, "archived byte for byte"
    now = _sums(checkpoint)
    assert {path: now.get(path) for path in before} == before, "every file of the checkpoint as it was before"
    assert maintenance.current(home, job) is None and current_lease(home, job) is None
