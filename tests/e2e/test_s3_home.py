"""The whole home on an S3 API (moto's server on loopback, in its own process): Spark checkpoints with the
RocksDB state store and changelog checkpointing through S3A, Delta output and dead letters, the ops tables,
the control plane (conditional writes) and retention, configured by `STATEOPS_HOME=s3://BUCKET/PREFIX` and
the AWS SDK's variables only.

Oracles: tests/support/oracle.py over a local mirror of the landing files and of the checkpoint's logs (which files
each batch read), Spark's state reader for the deep audit, and the bucket's listing (boto3) for "nothing
outside the prefix". The kill -9 trials on this home: tests/e2e/test_s3_kill.py (long tier)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stateops.jobs.definition.environment import Environment, load_jobs, read_settings
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.recovery import recover
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.state_store import HDFS_PROVIDER, MEMORY
from stateops.audit import deep_audit, fast_audit
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import LeaseHeldError, acquire, current_lease, maintenance
from stateops.storage import filesystem
from stateops.recovery import RecoveryRequest
from stateops.checkpoints import archive
from stateops.cli.main import main
from stateops.control import ControlSettings
from tests.support.audit_queries import nonzero, oracle_rows
from tests.support.delta_rows import table_rows
from tests.support.outcomes import assert_equals_oracle, local_mirror
from tests.support.scenarios import S3_INPUT, more_input, rocksdb_config
from tests.support.servers.moto import keys
from tests.support.trees import object_hashes

pytestmark = [pytest.mark.e2e, pytest.mark.spark, pytest.mark.usefixtures("s3_spark")]


@pytest.mark.long  # the default run on the S3 API: the runbook's archive copied by the server, its journal read
# back and resumed (test_runbook_s3), the locks and create-once records (test_storage_contract, test_control_s3,
# test_retention_lock_s3); every job's oracle on files (test_jobs_oracle)
@pytest.mark.parametrize("job", ["user_activity", "order_payments"])
def test_a_job_on_s3_equals_its_oracle_and_a_second_run_is_refused(spark, s3_homes, s3_scenario, job, tmp_path):
    home, batches = s3_scenario(job)  # `job` run over S3_INPUT on the module's bucket
    spec = load_jobs()[job]
    assert batches == S3_INPUT.files
    checkpoint = spec.checkpoint_path(home)
    assert checkpoint.startswith(f"s3://{s3_homes.bucket}/{s3_homes.prefix}/")
    stored = [key for key in keys(s3_homes.env, s3_homes.bucket) if key.startswith(checkpoint.split("/", 3)[3] + "/")]
    # the job's store's own files: RocksDB's changelogs, the in-memory store's deltas
    written = ".delta" if spec.state_store == MEMORY else ".changelog"
    assert any(key.endswith(written) for key in stored), f"the state store's {written} files on S3"
    assert_equals_oracle(home, spec, local_mirror(home, spec, str(tmp_path / "mirror")))

    with acquire(home, job, run_id="holder", mode="bounded", settings=ControlSettings.from_env()):
        with pytest.raises(LeaseHeldError):
            run_job(spark, spec, home, settings=read_settings())

    # Without a JVM, as the sensors' ticks read them: `jobs status` reads the checkpoint and lease (its newest
    # commit in the bucket's listing), the state check before a run reads the schema files on S3 (the query fits, every stored operator
    # seen), and the fast audit finds the same operators' state files there. Against the deep audit and Spark's
    # state reader on S3: the long tier's test below.
    status = CliRunner().invoke(main, ["jobs", "status", job, "--json"])
    assert status.exit_code == 0, status.output
    summary = json.loads(status.output)["checkpoint"]
    commits = [int(key.rsplit("/", 1)[1]) for key in stored if "/commits/" in key and key[-1].isdigit()]
    assert (summary["path"], summary["latest_committed_batch"]) == (checkpoint, max(commits))
    checked = CliRunner().invoke(main, ["jobs", "check", job, "--json"])
    assert checked.exit_code == 0, checked.output
    fit = json.loads(checked.output)
    assert fit["status"] == "compatible", fit["line"]
    fast = fast_audit(checkpoint, layout=home, job=job)
    operators = {o.operator_id for o in fast.operators}
    assert operators == {s["operator_id"] for s in fit["stored"]}
    # an operator's files are reported once: by its store, or by the first of several (a join's sides in format 4)
    assert all(sum(sum(o.bytes_per_partition.values()) for o in fast.operators if o.operator_id == operator) > 0
               for operator in operators), fast.operators


@pytest.mark.long  # the default run: the deep audit against the state reader and explain-key on local disk
@pytest.mark.parametrize("job", ["user_activity", "order_payments"])
def test_the_deep_audit_the_fast_audit_and_explain_key_read_a_job_on_s3(spark, s3_scenario, job):
    home, _ = s3_scenario(job)
    checkpoint = load_jobs()[job].checkpoint_path(home)
    report = deep_audit(spark, checkpoint)
    assert report.operators
    for op in report.operators:
        options = {"operatorId": op.operator_id, **({"storeName": op.store_name} if op.store_name != "default"
                                                    else {})}
        expected = oracle_rows(spark, checkpoint, **options)
        assert nonzero(op.rows_per_partition) == expected and op.rows_total == sum(expected.values())
    # The fast audit (state files on S3, progress rows from the S3 ops table) agrees with the deep one on stores
    # and bytes; `jobs status` on the watermark.
    fast = fast_audit(checkpoint, layout=home, job=job)
    assert [(o.operator_id, o.store_name, o.bytes_per_partition) for o in fast.operators] == [
        (o.operator_id, o.store_name, o.bytes_per_partition) for o in report.operators]
    status = CliRunner().invoke(main, ["jobs", "status", job, "--json"])
    assert status.exit_code == 0, status.output
    summary = json.loads(status.output)["checkpoint"]
    assert (summary["latest_committed_batch"], summary["watermark"]) == (report.batch_id,
                                                                         report.watermark.isoformat())
    # explain-key on a key the table holds (the state reader, the logs and the table on S3): emitted (a user's
    # latest window may still be in state, waiting for the watermark)
    key = table_rows(home.table(job), [{"order_payments": "order_id", "user_activity": "user_id"}[job]])[0][0]
    explained = CliRunner().invoke(main, ["explain-key", job, "--key", key, "--json"])
    assert explained.exit_code == 0, explained.output
    found = json.loads(explained.output)
    assert found["key"] == key and found["reason"] in ({"emitted"} if job == "order_payments" else
                                                       {"emitted", "in_state", "waiting_for_watermark"}), found


@pytest.mark.long  # the default run: retention planned and applied on local disk, every rule (test_retention)
def test_retention_applies_on_s3_and_the_job_restarts(spark, s3_homes, s3_scenario, tmp_path, monkeypatch):
    """Retention keeps 2 batches restorable (minBatchesToRetain as the jobs' settings declare it; the session
    that ran keeps Spark's 100, so the oracle still finds every batch's files in the logs) and the state
    store snapshots every 2 deltas (S3_INPUT's run, and the restart): the plan removes checkpoint history on S3,
    the objects are gone, and the job restarts on what is left and stays oracle-exact."""
    job = "user_activity"
    home, _ = s3_scenario(job)  # five batches
    monkeypatch.setenv("STATEOPS_SPARK_CONF", json.dumps({"spark.sql.streaming.minBatchesToRetain": "2"}))
    settings = {"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2"}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        spec = load_jobs()[job]
        mirrored = local_mirror(home, spec, str(tmp_path / "mirror"))  # the logs of every batch, before retention
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
        stored = set(keys(s3_homes.env, s3_homes.bucket))
        for item in history:
            target = item["target"].split("/", 3)[3]
            assert not {f"{target}/{path}" for path, _ in item["paths"]} & stored, "removed from the bucket"
        generate(home, GeneratorConfig(events=300, files=2, users=40, start="2026-01-01T04:00:00+00:00",
                                       minutes_per_file=20, seed=14))
        assert run_job(spark, load_jobs()[job], home, settings=read_settings()).batches == 2
        local_mirror(home, spec, mirrored.home)  # the new batches' logs added to the earlier mirror
        assert_equals_oracle(home, spec, mirrored)
    finally:
        for key in settings:
            spark.conf.unset(key)


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


def _ran_on_s3(s3_scenario, monkeypatch, tmp_path):
    """The module's home where `user_activity` ran over S3_INPUT on RocksDB (the tests repartition, or fail a restart
    by putting its RocksDB state on the in-memory store), one verified batch per runbook; (home, spec)."""
    monkeypatch.setenv("STATEOPS_RECOVERY_VERIFY_BATCHES", "1")
    monkeypatch.setenv("STATEOPS_CONFIG", rocksdb_config(tmp_path, "user_activity"))
    home, _ = s3_scenario("user_activity", "rocksdb")
    return home, load_jobs()["user_activity"]


@pytest.mark.long  # the default run's acting runbooks: adjust and repartition on Kafka, adjust from Dagster
def test_adjust_and_repartition_on_s3_complete_and_verify(spark, s3_scenario, monkeypatch, tmp_path):
    job = "user_activity"
    home, spec = _ran_on_s3(s3_scenario, monkeypatch, tmp_path)
    checkpoint = spec.checkpoint_path(home)
    for hour, (mode, change) in enumerate((("adjust", {"watermark_delay": "20 minutes"}),
                                           ("repartition", {"shuffle_partitions": 6})), start=3):
        more_input(home, hour, seed=hour)
        environment = Environment.from_env(layout=home)
        report = recover(environment, RecoveryRequest(job, mode, reason="on S3", confirm=job, dry_run=False, **change),
                         spark=spark)
        assert report.outcome == "succeeded", (mode, report.error)
        assert report.archive_path.startswith(home.home + "/")
        assert not archive.verify(spec.archive_path(home), report.runbook_id), "the archive matches its manifest"
        assert ("verify", "done") in [(e["step"], e["phase"]) for e in report.steps]
    latest = Checkpoint(checkpoint)
    assert latest.shuffle_partitions(latest.latest_committed_batch()) == 6


@pytest.mark.long  # the default run: the rollback on local disk (test_recovery), the S3 copies, renames and journal
# of a runbook (test_runbook_s3), retention acting on this home and the job restarting (above)
def test_a_failed_restart_on_s3_rolls_back_leaving_every_object_as_it_was(spark, s3_scenario, monkeypatch, tmp_path):
    job = "user_activity"
    home, spec = _ran_on_s3(s3_scenario, monkeypatch, tmp_path)
    checkpoint = spec.checkpoint_path(home)
    more_input(home, 6, seed=6)
    before = object_hashes(checkpoint)
    environment = Environment.from_env(layout=home)
    request = RecoveryRequest(job, "adjust", watermark_delay="20 minutes", reason="injected failure", confirm=job,
                              dry_run=False)
    report = recover(environment, request, spark=spark, on_event=_break_provider(checkpoint))
    assert report.outcome == "rolled_back" and "CANNOT_LOAD_STATE_STORE" in report.error, report.error
    kept = archive.manifest(spec.archive_path(home), report.runbook_id)
    assert {f["path"]: f["sha256"] for f in kept["files"]} == before, "archived byte for byte"
    now = object_hashes(checkpoint)
    assert {path: now.get(path) for path in before} == before, "every file of the checkpoint as it was before"
    assert maintenance.current(home, job) is None and current_lease(home, job) is None
