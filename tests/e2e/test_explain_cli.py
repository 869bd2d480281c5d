"""`stateops explain-key JOB --key VALUE [--batch-id N] [--json]`: the CLI contract.

Usage errors (unknown job, no checkpoint yet, batch id not committed, not a number) exit 2 with one line and
no traceback, before any JVM starts. On a real order_payments checkpoint the command exits 0 and prints the
stable JSON keys.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from stateops.cli.main import main
from tests.support.fake_checkpoint import FakeCheckpoint
from stateops.jobs.definition.environment import read_settings

pytestmark = pytest.mark.e2e

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STABLE_KEYS = {"job", "key", "batch_id", "watermark", "in_state", "reason", "explanation"}


def _invoke(args: list[str], home: str):
    """`stateops explain-key ...` through the real command group."""
    return CliRunner().invoke(main, ["explain-key", *args], env={"STATEOPS_HOME": home})


@pytest.mark.parametrize("args, message", [
    (["no_such_job", "--key", "x"], "unknown job 'no_such_job'"),
    (["order_payments", "--key", "x"], "job order_payments has no checkpoint yet"),
])
def test_usage_errors_exit_2_with_one_line(layout, args, message):
    result = _invoke(args, layout.home)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_batch_id_not_committed_exits_2(layout):
    FakeCheckpoint(layout.checkpoint("order_payments")).batches(range(3))  # committed: 0..2
    result = _invoke(["order_payments", "--key", "o000001", "--batch-id", "7"], layout.home)
    assert result.exit_code == 2, result.output
    assert "batch 7 is not a committed batch" in result.output and "committed: 0..2" in result.output
    assert "Traceback" not in result.output
    result = _invoke(["order_payments", "--key", "o000001", "--batch-id", "seven"], layout.home)
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_no_committed_batch_exits_2(layout):
    FakeCheckpoint(layout.checkpoint("order_payments"))  # metadata, empty offsets/ and commits/
    result = _invoke(["order_payments", "--key", "o000001"], layout.home)
    assert result.exit_code == 2 and "no committed batch yet" in result.output, result.output


def test_entry_point_usage_error_has_no_traceback(layout):
    """Through the installed entry point's main group, in a fresh process."""
    code = ("import sys\nfrom stateops.cli.main import main\n"
            "sys.exit(main.main(args=sys.argv[1:], prog_name='stateops'))")
    proc = subprocess.run([sys.executable, "-c", code, "explain-key", "no_such_job", "--key", "x"],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "STATEOPS_HOME": layout.home})
    assert proc.returncode == 2, proc.stderr
    assert "unknown job 'no_such_job'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.spark
def test_explain_key_json_on_a_real_checkpoint(spark, layout):
    from stateops.jobs.definition.environment import get_job
    from stateops.jobs.demo.generator import GeneratorConfig, generate
    from stateops.jobs.runtime.runner import run_job

    generated = generate(layout, GeneratorConfig(events=0, orders=30, files=3, seed=5))
    run_job(spark, get_job("order_payments"), layout, settings=read_settings())
    paid = sorted(k for k, case in generated.payment_cases.items() if case == "paid")[0]

    result = _invoke(["order_payments", "--key", paid, "--json"], layout.home)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert STABLE_KEYS <= set(data)
    assert data["job"] == "order_payments" and data["key"] == paid and data["reason"] == "emitted"
    assert isinstance(data["batch_id"], int) and data["watermark"].endswith("Z")
    for row in data["in_state"]:
        assert {"operator_id", "store_name", "partition_id", "value"} <= set(row)

    result = _invoke(["order_payments", "--key", "o999999", "--batch-id", "0"], layout.home)
    assert result.exit_code == 0, result.output
    assert "reason: never_arrived" in result.output and "at batch 0" in result.output
