"""Secrets by reference and their redaction, without a JVM: `${env:NAME}` resolved at any depth (a missing
variable one line naming the key and the variable), kept as written by `jobs list`/`describe`, resolved by the
commands that start a run, an audit or a runbook; and one redaction of known values, URL passwords and quoted
passwords at every place output leaves (CLI streams, ops tables, journals and manifests, Spark's console, Dagster
metadata). The canary over everything a run writes: tests/e2e/test_secrets_canary.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from click.testing import CliRunner

from stateops import actions, redaction
from stateops.cli.main import main
from stateops.errors import ConfigError
from stateops.jobs.definition.catalog import Catalog
from stateops.jobs.definition.spec import resolved
from stateops.jobs.examples.builtin import BUILTIN
from stateops.layout import Layout
from stateops.checkpoints import archive
from stateops.redaction import RedactingStream, redact, redact_tree
from stateops.references import resolve

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("no_known_secrets")]

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="${env:KAFKA_PASSWORD}";'
JAAS_KEY = "jobs.user_activity.kafka_options.kafka.sasl.jaas.config"
PASSWORD = "pw-3f9c1e77-unit"


def _kafka_config(tmp_path, description: str = "events from Kafka") -> str:
    path = tmp_path / "stateops.toml"
    path.write_text(f"""[jobs.user_activity]
source = "kafka"
kafka_bootstrap_servers = "${{env:KAFKA_BROKERS}}"
description = "{description}"
kafka_options = {{ "kafka.security.protocol" = "SASL_SSL", "kafka.sasl.jaas.config" = '{JAAS}' }}
""")
    return str(path)


def test_a_reference_is_resolved_whole_inside_a_longer_string_and_at_any_depth_other_values_untouched():
    env = {"KAFKA_PASSWORD": PASSWORD, "HOST": "broker-1", "PORT": "9093"}
    tree = {"jaas": JAAS, "servers": ["${env:HOST}:${env:PORT}", 7], "nested": {"flag": True, "none": None,
                                                                             "text": "${env:HOST}"}, "n": 1.5}
    assert resolve(tree, "jobs.x", env) == {
        "jaas": JAAS.replace("${env:KAFKA_PASSWORD}", PASSWORD), "servers": ["broker-1:9093", 7],
        "nested": {"flag": True, "none": None, "text": "broker-1"}, "n": 1.5}
    assert resolve(("a", "${env:HOST}"), "k", env) == ("a", "broker-1")
    assert resolve("no reference, ${file:/x:y} left to Kafka", "k", {}) == "no reference, ${file:/x:y} left to Kafka"


def test_a_missing_variable_is_refused_naming_the_key_and_the_variable():
    with pytest.raises(ConfigError) as err:
        resolve({"kafka_options": {"kafka.sasl.jaas.config": JAAS}}, "jobs.user_activity", {})
    assert err.value.field == JAAS_KEY
    assert "${env:KAFKA_PASSWORD}" in err.value.problem and "KAFKA_PASSWORD is not set" in err.value.problem
    assert "set KAFKA_PASSWORD" in err.value.fix
    with pytest.raises(ConfigError, match="is not a reference to an environment variable"):
        resolve({"servers": ["${env:1BAD}"]}, "jobs.x", {})


def test_a_resolved_value_is_redacted_from_then_on_naming_its_variable():
    text = resolve(JAAS, JAAS_KEY, {"KAFKA_PASSWORD": PASSWORD})
    assert PASSWORD in text
    masked = JAAS.replace("${env:KAFKA_PASSWORD}", "[redacted: ${env:KAFKA_PASSWORD}]")
    assert redact(f"failed with {text}") == f"failed with {masked}"
    assert PASSWORD not in redact(json.dumps({"options": text})), "the JSON-escaped form too"
    resolve("${env:SHORT}", "k", {"SHORT": "test"})
    assert redact('{"latest_committed_batch": 3}') == '{"latest_committed_batch": 3}', \
        "values shorter than MIN_LENGTH are not masked (they would mask parts of words)"


@pytest.mark.parametrize("text, expected", [
    ("postgresql://dagster:s3cr3t@db:5432/dagster", "postgresql://dagster:***@db:5432/dagster"),
    ("see https://user:tok@hooks.example.com/x now", "see https://user:***@hooks.example.com/x now"),
    ("https://hooks.example.com/x?a=1&access_token=abc&sig=zz",
     "https://hooks.example.com/x?a=1&access_token=***&sig=***"),
    ('PlainLoginModule required username="u" password="p@ss";',
     'PlainLoginModule required username="u" password="***";'),
    ("{\"jaas\": \"x password=\\\"p\\\";\"}", "{\"jaas\": \"x password=\\\"***\\\";\"}"),
    ("s3://bucket/prefix and http://127.0.0.1:9000", "s3://bucket/prefix and http://127.0.0.1:9000"),
])
def test_url_passwords_and_quoted_passwords_are_masked(text, expected):
    assert redact(text) == expected
    assert redact(redact(text)) == redact(text)


def test_the_secret_variables_are_masked_without_registering_them(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-9d2f-secret")
    monkeypatch.setenv("STATEOPS_ALERT_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/xyz")
    assert redact("key aws-9d2f-secret posted to https://hooks.slack.com/services/T0/B0/xyz") == (
        "key [redacted: ${env:AWS_SECRET_ACCESS_KEY}] posted to [redacted: ${env:STATEOPS_ALERT_WEBHOOK_URL}]")


def test_a_mapping_masks_the_values_of_secret_keys_as_spark_does_and_redacts_every_other_text():
    tree = {"spark.hadoop.fs.s3a.secret.key": "x", "kafka.sasl.jaas.config": "y", "sessionToken": "z",
            "url": "postgresql://u:p@h/d", "count": 3, "items": [{"password": "q"}, "plain"]}
    assert redact_tree(tree) == {"spark.hadoop.fs.s3a.secret.key": "***", "kafka.sasl.jaas.config": "***",
                                 "sessionToken": "***", "url": "postgresql://u:***@h/d", "count": 3,
                                 "items": [{"password": "***"}, "plain"]}


def test_the_session_gives_spark_its_default_redaction_terms_and_kafkas_sasl_settings():
    from stateops.jobs.definition.spark_settings import SparkSettings
    from stateops.jobs.runtime.session import spark_conf

    regex = spark_conf(SparkSettings.from_env())["spark.redaction.regex"]
    assert regex.startswith("(?i)secret|password|token|access[.]?key|"), "Spark's default terms kept"
    assert redaction.SECRET_KEYS.search("kafka.sasl.jaas.config") and redaction.SECRET_KEYS.search("credentials")


def test_a_spec_is_resolved_and_checked_again_and_left_alone_without_references():
    spec = next(s for s in BUILTIN if s.name == "user_activity")
    assert resolved(spec) is spec
    kafka = replace(spec, source="kafka", kafka_bootstrap_servers="${env:KAFKA_BROKERS}",
                    kafka_options={"kafka.sasl.jaas.config": JAAS})
    done = resolved(kafka, {"KAFKA_PASSWORD": PASSWORD, "KAFKA_BROKERS": "b:9092"})
    assert done.kafka_bootstrap_servers == "b:9092" and PASSWORD in done.kafka_options["kafka.sasl.jaas.config"]
    assert done.inputs == spec.inputs and done.explain == spec.explain
    with pytest.raises(ConfigError) as err:
        resolved(kafka, {"KAFKA_BROKERS": "b:9092"})
    assert err.value.field == JAAS_KEY and "KAFKA_PASSWORD" in err.value.problem


def test_the_catalog_keeps_references_until_resolved(tmp_path):
    catalog = Catalog.load(Layout(str(tmp_path / "home")), _kafka_config(tmp_path))
    assert catalog.job("user_activity").kafka_options["kafka.sasl.jaas.config"] == JAAS
    done = catalog.resolved({"KAFKA_PASSWORD": PASSWORD, "KAFKA_BROKERS": "b:9092"})
    assert PASSWORD in done.job("user_activity").kafka_options["kafka.sasl.jaas.config"]
    assert done.job("user_sessions") is catalog.job("user_sessions")


def test_a_reference_in_any_string_value_is_checked_with_its_value_when_resolved(tmp_path, monkeypatch):
    """watermark_delay by reference: loads without the variable (describe, a code location), is checked with its
    value where the variable is set (at load, and when resolved), naming the field either way."""
    config = tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nwatermark_delay = "${env:DELAY}"\n')
    layout = Layout(str(tmp_path / "home"))
    monkeypatch.delenv("DELAY", raising=False)
    spec = Catalog.load(layout, str(config)).job("user_activity")
    assert spec.watermark_delay == "${env:DELAY}"
    with pytest.raises(ConfigError) as err:
        resolved(spec)
    assert err.value.field == "jobs.user_activity.watermark_delay" and "DELAY is not set" in err.value.problem
    assert resolved(spec, {"DELAY": "20 minutes"}).watermark_seconds == 20 * 60
    with pytest.raises(ConfigError) as err:
        resolved(spec, {"DELAY": "3 hours"})
    assert err.value.field == "jobs.user_activity.watermark_delay" and "allowed bounds" in str(err.value)
    monkeypatch.setenv("DELAY", "soon")
    with pytest.raises(ConfigError) as err:
        Catalog.load(layout, str(config))
    assert "watermark_delay" in err.value.field


def _cli(tmp_path, *args, env=None):
    return CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "--config", _kafka_config(
        tmp_path, description="token ${env:DESCRIBED}"), *args], env=env)


def test_list_and_describe_show_the_reference_never_the_value_and_need_no_variable(tmp_path):
    assert _cli(tmp_path, "jobs", "list").exit_code == 0
    result = _cli(tmp_path, "jobs", "describe", "user_activity", "--json",
                  env={"DESCRIBED": "described-5e1a", "KAFKA_PASSWORD": PASSWORD})
    assert result.exit_code == 0, result.output
    described = json.loads(result.output)
    assert described["description"] == "token ${env:DESCRIBED}"
    assert described["kafka"] == {"bootstrap_servers": "${env:KAFKA_BROKERS}", "topics": ["events"],
                                  "options": {"kafka.security.protocol": "SASL_SSL",
                                              "kafka.sasl.jaas.config": JAAS}}
    assert "described-5e1a" not in result.output and PASSWORD not in result.output


def test_describe_masks_a_secret_written_as_it_is():
    """A password written in the file (no reference) is masked where describe shows the Kafka options."""
    options = {"kafka.ssl.key.password": "written-4f1e", "kafka.sasl.jaas.config": JAAS.replace(
        "${env:KAFKA_PASSWORD}", "literal-9c2d"), "kafka.security.protocol": "SASL_SSL"}
    assert redact_tree(options) == {"kafka.ssl.key.password": "***", "kafka.sasl.jaas.config": "***",
                                    "kafka.security.protocol": "SASL_SSL"}
    assert redact_tree({"kafka.sasl.jaas.config": JAAS}) == {"kafka.sasl.jaas.config": JAAS}


@pytest.mark.parametrize("command", [["jobs", "run", "user_activity"], ["audit", "user_activity"],
                                     ["recover", "plan", "user_activity", "--mode", "rebuild"],
                                     ["explain-key", "user_activity", "--key", "u1"], ["jobs", "status"],
                                     ["retention", "plan"], ["archives", "list", "user_activity"]])
def test_a_command_acting_on_the_jobs_refuses_a_missing_variable_before_anything_starts(tmp_path, command):
    """Runs, audits, runbooks, and status, retention and archives too: they act on the paths the runs use."""
    result = _cli(tmp_path, *command, env={"KAFKA_BROKERS": "127.0.0.1:1", "DESCRIBED": "x"})
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"Error: {JAAS_KEY}: refers to ${{env:KAFKA_PASSWORD}}, and the environment "
                                     "variable KAFKA_PASSWORD is not set. Fix: set KAFKA_PASSWORD in the "
                                     "environment of the run, audit or runbook (or write the value in the config file)")
    assert not (tmp_path / "home" / "checkpoints").exists()


def test_the_cli_redacts_what_it_prints(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-77c1-canary")
    config = tmp_path / "plain.toml"
    config.write_text('[jobs.user_activity]\ndescription = "key aws-77c1-canary, db postgresql://u:pw@h/d"\n')
    listed = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "--config", str(config), "jobs", "list"])
    assert listed.exit_code == 0, listed.output
    assert "key [redacted: ${env:AWS_SECRET_ACCESS_KEY}], db postgresql://u:***@h/d" in listed.output
    assert "aws-77c1-canary" not in listed.output


def test_a_redacting_stream_writes_text_only_and_redacted(capsys):
    stream = RedactingStream(sys.stdout)
    resolve("${env:P}", "k", {"P": PASSWORD})
    stream.write(f"the password is {PASSWORD}\n")
    with pytest.raises(TypeError):
        stream.write(b"bytes")
    assert capsys.readouterr().out == "the password is [redacted: ${env:P}]\n"


def test_ops_tables_journals_and_manifests_are_redacted(tmp_path):
    layout = Layout(str(tmp_path / "home"))
    resolve("${env:KAFKA_PASSWORD}", JAAS_KEY, {"KAFKA_PASSWORD": PASSWORD})
    actions.record(layout, "user_activity", "stop", "done", actor="me", details={"error": f"bad {PASSWORD}"})
    assert actions.read(layout)[0]["details"] == {"error": "bad [redacted: ${env:KAFKA_PASSWORD}]"}
    path = str(tmp_path / "manifest.json")
    archive.write_json(path, {"note": f"x {PASSWORD}", "url": "postgresql://u:p@h/d"})
    assert archive.read_json(path) == {"note": "x [redacted: ${env:KAFKA_PASSWORD}]", "url": "postgresql://u:***@h/d"}


def test_dagster_metadata_is_redacted():
    from dagster import MetadataValue

    from stateops.dagster.failure import redacted

    resolve("${env:KAFKA_PASSWORD}", JAAS_KEY, {"KAFKA_PASSWORD": PASSWORD})
    out = redacted({"md": MetadataValue.md(f"| {PASSWORD} |"), "json": MetadataValue.json({"password": "p"}),
                    "text": f"x {PASSWORD}", "rows": MetadataValue.int(3), "none": None})
    assert out == {"md": MetadataValue.md("| [redacted: ${env:KAFKA_PASSWORD}] |"),
                   "json": MetadataValue.json({"password": "***"}), "text": "x [redacted: ${env:KAFKA_PASSWORD}]",
                   "rows": MetadataValue.int(3), "none": None}


def test_the_dagster_spark_resource_shows_and_stores_no_secret_setting(monkeypatch):
    """Its default config is in every job's snapshot in the instance; the factory adds the S3A keys at session start."""
    from stateops.dagster.resources import SparkResource

    for name, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "id",
                        "AWS_SECRET_ACCESS_KEY": "aws-4411-canary"}.items():
        monkeypatch.setenv(name, value)
    conf = SparkResource().spark_config
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"
    assert "aws-4411-canary" not in json.dumps(conf) and "spark.hadoop.fs.s3a.secret.key" not in conf


def test_sparks_console_reaches_its_log_only_redacted(tmp_path, monkeypatch):
    """A process started inside _console_to (as the JVM is) writes its stderr through the redacting relay."""
    from pyspark import SparkContext

    from stateops.jobs.runtime.session import _console_to

    monkeypatch.setattr(SparkContext, "_gateway", None)  # as in a process whose JVM starts in the block

    resolve("${env:KAFKA_PASSWORD}", JAAS_KEY, {"KAFKA_PASSWORD": PASSWORD})
    log = tmp_path / "logs" / "run.log"
    with _console_to(str(log)):
        subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write('ERROR consumer {PASSWORD}\\n')"],
                       check=True)
    deadline = time.monotonic() + 10
    while "ERROR" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.read_text() == "ERROR consumer [redacted: ${env:KAFKA_PASSWORD}]\n"
