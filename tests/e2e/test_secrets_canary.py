"""No credential in anything StateOps writes: unique canary secrets go in, and not one byte of them comes out.

The home is on moto's S3 server with a canary AWS_SECRET_ACCESS_KEY (the server signs nothing off: any secret
is accepted); `user_activity` reads a real Kafka broker with a canary password in `kafka.sasl.jaas.config`,
given by `${env:...}` (a PLAINTEXT broker: the client loads the JAAS entry only for SASL, so the run proves the
option reached Kafka unharmed). Then, each a `stateops` process of its own: a run, a failed run (a bad
`maxOffsetsPerTrigger`, itself a reference whose canary value Spark quotes in its error), describe and status,
a deep audit, a runbook (adjust, with its archive, journal and restart), a retention plan, and the job's asset
materialized by Dagster twice (the run, and the failing one) on an instance stored in the test's folder. Every
version of every object in the bucket, every file under the test's folder (configs, scratch, the Dagster
instance's run and event storage) and every byte the commands printed (stdout and stderr, where Spark's console goes on an S3 home) is searched for the canaries: zero hits,
while the failed run's error still says which secret it hid. Checked: with stateops.redaction.redact made the
identity, the option's canary is found in the failed run's log on S3 and in its error output (Spark and Kafka
keep the AWS key and the jaas password out of their own output). About 3.5 minutes on 2 cores (nine
processes with a JVM): the long tier."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import fields

import pytest

from tests.support import ROOT
from tests.support.scenarios import KAFKA_INPUT, KAFKA_TOPICS
from tests.support.servers.kafka import fresh_topics
from tests.support.servers.moto import fresh_bucket

pytestmark = [pytest.mark.e2e, pytest.mark.long]

JOB = "user_activity"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="stateops" '
        'password="${env:STATEOPS_CANARY_KAFKA}";')


def _config(path, bootstrap: str, bad_option: bool = False) -> str:
    bad = ', maxOffsetsPerTrigger = "${env:STATEOPS_CANARY_OPTION}"' if bad_option else ""
    path.write_text(f"""[jobs.{JOB}]
source = "kafka"
kafka_bootstrap_servers = "{bootstrap}"
kafka_options = {{ "kafka.sasl.jaas.config" = '{JAAS}'{bad} }}
""")
    return str(path)


def _objects(client) -> dict[str, bytes]:
    """Every version of every object of the (versioned) bucket, read with boto3, not the code under test."""
    found = {}
    for page in client.get_paginator("list_object_versions").paginate(Bucket=client.bucket):
        for version in page.get("Versions", []):
            body = client.get_object(Bucket=client.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
            found[f"{version['Key']}@{version['VersionId']}"] = body.read()
    return found


def _files(folder) -> dict[str, bytes]:
    return {os.path.join(base, name): open(os.path.join(base, name), "rb").read()
            for base, _dirs, names in os.walk(folder) for name in names}


def test_no_canary_secret_in_anything_stateops_writes_or_prints(s3_env, kafka, tmp_path, monkeypatch):
    client = fresh_bucket(s3_env, monkeypatch, "stateops-canary", versioned=True)
    canaries = {"AWS_SECRET_ACCESS_KEY": f"canaryaws{uuid.uuid4().hex}",
                "STATEOPS_CANARY_KAFKA": f"canarykafka{uuid.uuid4().hex}",
                "STATEOPS_CANARY_OPTION": f"canaryoption{uuid.uuid4().hex}"}
    env = {**os.environ, **s3_env, **canaries, "STATEOPS_HOME": f"s3://{client.bucket}/stateops",
           "STATEOPS_RECOVERY_VERIFY_TIMEOUT_SECONDS": "120"}
    env.pop("STATEOPS_CONTROL_HOME", None)
    config, failing = _config(tmp_path / "stateops.toml", kafka), _config(tmp_path / "bad.toml", kafka, True)
    printed: list[str] = []

    def stateops(*args: str, config_path: str = config) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "stateops.cli", "--config", config_path, *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
        printed.append(f"$ stateops {' '.join(args)}\n{done.stdout}\n{done.stderr}")
        return done

    def dagster_materialize(config_path: str) -> subprocess.CompletedProcess:
        """The job's asset materialized by `dagster asset materialize`, on an instance stored in tmp_path."""
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "dagster"), "asset", "materialize",
                               "-m", "stateops.dagster.definitions", "--select", JOB],
                              env={**env, "STATEOPS_CONFIG": config_path, "DAGSTER_HOME": str(dagster_home)},
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
        printed.append(f"$ dagster asset materialize --select {JOB}\n{done.stdout}\n{done.stderr}")
        return done

    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    fresh_topics(kafka, KAFKA_TOPICS)
    knobs = [f"--{f.name.replace('_', '-')}={getattr(KAFKA_INPUT, f.name)}" for f in fields(KAFKA_INPUT)]
    generated = subprocess.run([sys.executable, "-m", "stateops.cli", "--home", str(tmp_path / "scratch"), "generate",
                                *knobs, "--kafka", kafka], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert generated.returncode == 0, generated.stderr[-3000:]

    run = stateops("jobs", "run", JOB, "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    assert '"batches": 0' not in run.stdout, "the Kafka records were read with the jaas option in place"
    failed = stateops("jobs", "run", JOB, config_path=failing)
    assert failed.returncode in (1, 2), failed.stderr[-3000:]
    for args in (("jobs", "describe", JOB, "--json"), ("jobs", "status", JOB, "--json"), ("audit", JOB, "--json")):
        done = stateops(*args)
        assert done.returncode in (0, 1), (args, done.stderr[-3000:])
    runbook = stateops("recover", "run", JOB, "--mode", "adjust", "--watermark", "20 minutes", "--confirm", JOB,
                       "--reason", "canary", "--json")
    assert runbook.returncode == 0, runbook.stderr[-3000:] + runbook.stdout[-3000:]
    assert stateops("archives", "list", JOB, "--json").returncode == 0
    retention = stateops("retention", "plan", "--json")
    assert retention.returncode == 0, retention.stderr[-3000:]
    materialized = dagster_materialize(config)  # Dagster: its instance under tmp_path
    assert materialized.returncode == 0, materialized.stderr[-3000:]
    dagster_failed = dagster_materialize(failing)
    assert dagster_failed.returncode != 0, dagster_failed.stderr[-3000:]

    written = {**_objects(client), **_files(tmp_path)}
    assert any(key.startswith("stateops/ops/") for key in written), "the ops tables, journal and manifest are there"
    assert any(key.startswith(str(dagster_home)) for key in written), "the Dagster instance's storage is searched"
    outputs = {f"output {i}": text.encode() for i, text in enumerate(printed)}
    hits = [(name, where) for name, secret in canaries.items() for where, data in {**written, **outputs}.items()
            if secret.encode() in data]
    assert hits == [], f"canary secrets found: {hits}"
    assert "[redacted: ${env:STATEOPS_CANARY_OPTION}]" in failed.stderr, failed.stderr[-3000:]
    assert "[redacted: ${env:STATEOPS_CANARY_OPTION}]" in dagster_failed.stdout + dagster_failed.stderr
