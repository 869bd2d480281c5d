"""`stateops audit`: the contract scripts rely on (JSON names, exit codes 0/1/2, one-line errors).

The fast audit's JSON contract runs as a real subprocess of the installed `stateops` command (no JVM), like a
script would; the other cases go through the same click group in-process (no process boundary under test), the
deep audits sharing the test session's Spark.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stateops.audit import load_history

from stateops.cli.main import main
from tests.support.audit_queries import nonzero, oracle_rows

pytestmark = pytest.mark.e2e

STATEOPS = str(Path(sys.executable).parent / "stateops")
CONTRACT = ["checkpoint", "batch_id", "watermark", "operators", "findings"]
OPERATOR = ["operator_id", "operator_name", "store_name", "num_partitions", "min_batch_id", "max_batch_id",
            "rows_total", "rows_per_partition", "bytes_total", "bytes_per_partition", "skew_ratio", "top_keys"]
FINDING = ["code", "severity", "operator_id", "store_name", "message", "recommendation"]


def stateops(home: dict, *args: str, config: str | None = None, fresh: bool = False) -> subprocess.CompletedProcess:
    """`stateops ARGS` on the module's home (STATEOPS_CONFIG: `config` or none): in a fresh process of the
    installed command, or through the click group in this one."""
    env = {**os.environ, "STATEOPS_HOME": home["layout"].home}
    env.pop("STATEOPS_CONFIG", None)
    if config:
        env["STATEOPS_CONFIG"] = config
    if fresh:
        return subprocess.run([STATEOPS, *args], capture_output=True, text=True, env=env, timeout=600)
    done = CliRunner(env={**env, "STATEOPS_CONFIG": config}).invoke(main, list(args))
    return subprocess.CompletedProcess(["stateops", *args], done.exit_code, done.stdout, done.stderr)


def assert_contract(doc: dict) -> None:
    assert list(doc) == CONTRACT
    for op in doc["operators"]:
        assert list(op) == OPERATOR
    for finding in doc["findings"]:
        assert list(finding) == FINDING


@pytest.mark.parametrize("target, extra, says", [
    ("{root}/missing", (), "does not exist"),
    ("{root}/empty", (), "not a Structured Streaming checkpoint"),
    ("{root}/a_file", (), "is a file"),
    ("no_such_job", (), "not a job (known: order_payments, user_actions, user_activity, user_sessions)"),
    ("user_sessions", (), "job user_sessions has no checkpoint yet"),
    ("user_activity", ("--fast", "--batch-id", "1"), "--batch-id needs the deep audit"),
])
def test_usage_errors_exit_2_with_one_line(audit_cli_home, target, extra, says):
    home = audit_cli_home
    result = stateops(home, "audit", target.format(root=home["root"]), *extra)
    assert result.returncode == 2, result
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("Error: ") and says in result.stderr


def test_fast_json_contract_and_exit_codes(audit_cli_home):
    home = audit_cli_home
    ok = stateops(home, "audit", "user_activity", "--fast", "--json", fresh=True)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert_contract(doc)
    assert doc["checkpoint"] == home["layout"].checkpoint("user_activity")
    assert [o["operator_name"] for o in doc["operators"]] == ["stateStoreSave", "dedupeWithinWatermark"]
    assert all(o["bytes_total"] == sum(o["bytes_per_partition"].values()) > 0 for o in doc["operators"])
    assert not [f for f in doc["findings"] if f["severity"] == "error"]

    bad = stateops(home, "audit", home["unbounded"], "--fast", "--json", fresh=True)
    assert bad.returncode == 1, bad.stderr
    doc = json.loads(bad.stdout)
    assert_contract(doc)
    assert ("UNBOUNDED_DEDUP", "error", 0, "default") in {
        (f["code"], f["severity"], f["operator_id"], f["store_name"]) for f in doc["findings"]}


def test_thresholds_per_job_from_config(audit_cli_home, tmp_path):
    home = audit_cli_home
    config = tmp_path / "stateops.toml"
    # The generated events are from 2026-01-01: the watermark lags by months, a warning by default.
    config.write_text("[audit]\nwatermark_lag_seconds = 7200\n[audit.jobs.user_activity]\n"
                      "watermark_lag_error_seconds = 86400\n")
    result = stateops(home, "audit", "user_activity", "--fast", "--json", config=str(config))
    assert result.returncode == 1, result.stderr
    [lag] = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "WATERMARK_LAG"]
    assert lag["severity"] == "error" and "(threshold 2 h 0 min)" in lag["message"]
    config.write_text("[audit.jobs.user_activity]\nskew_ration = 3\n")
    result = stateops(home, "audit", "user_activity", "--fast", config=str(config))
    assert result.returncode == 2 and "audit.jobs.user_activity.skew_ration: is not an audit threshold" in result.stderr


def test_text_output_names_findings_and_fixes(audit_cli_home):
    home = audit_cli_home
    result = stateops(home, "audit", home["unbounded"], "--fast")
    assert result.returncode == 1
    assert "Fast audit of" in result.stdout and "dedupe" in result.stdout
    assert "ERROR UNBOUNDED_DEDUP [op 0/default]" in result.stdout and "fix: Use dropDuplicatesWithinWatermark" in result.stdout


def test_deep_json_matches_the_state_reader_and_is_recorded(spark, audit_cli_home, monkeypatch):
    home = audit_cli_home
    monkeypatch.setenv("STATEOPS_HOME", home["layout"].home)  # restored after: the group sets it globally
    monkeypatch.delenv("STATEOPS_CONFIG", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["--home", home["layout"].home, "audit", "user_activity", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert_contract(doc)
    checkpoint = home["layout"].checkpoint("user_activity")
    for op in doc["operators"]:
        expected = oracle_rows(spark, checkpoint, operatorId=op["operator_id"])
        assert nonzero({int(p): n for p, n in op["rows_per_partition"].items()}) == expected
        assert op["rows_total"] == sum(expected.values())
        assert op["top_keys"] == []  # fixed-width values (count/sum, expiresAtMicros): nothing to rank
    assert not [f for f in doc["findings"] if f["code"] == "STATE_SKEW"]

    bad = runner.invoke(main, ["--home", home["layout"].home, "audit", home["unbounded"], "--json", "--batch-id", "0"])
    assert bad.exit_code == 1 and json.loads(bad.output)["batch_id"] == 0
    missing = runner.invoke(main, ["--home", home["layout"].home, "audit", home["unbounded"], "--batch-id", "99"])
    assert missing.exit_code == 2 and "batch 99 is not committed" in missing.output

    kinds = [(r["kind"], r["operator_name"]) for r in load_history(home["layout"], checkpoint)]
    assert ("deep", "stateStoreSave") in kinds and ("deep", "dedupeWithinWatermark") in kinds


def test_deep_audit_in_a_fresh_process(audit_cli_home):
    """The real command path: a new JVM whose session never ran a query (state coordinator not started)."""
    home = audit_cli_home
    result = stateops(home, "audit", home["unbounded"], "--json", "--no-record")
    assert result.returncode == 1, result.stderr[-2000:]
    doc = json.loads(result.stdout)
    assert_contract(doc)
    [op] = doc["operators"]
    assert op["operator_name"] == "dedupe" and op["rows_total"] == 400
    assert "UNBOUNDED_DEDUP" in {f["code"] for f in doc["findings"]}
