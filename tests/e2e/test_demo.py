"""`stateops demo` runs end to end: input generated, four jobs run, tables and progress written.

On the demo's reduced input (tests/support/scenarios.py DEMO_INPUT_SMALL, as the long tier's demo on Dagster):
the command's path is the same, with half the micro-batches of DEMO_INPUT."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from stateops.cli.main import main
from stateops import progress
from stateops.layout import Layout
from tests.support.scenarios import DEMO_INPUT_SMALL

pytestmark = pytest.mark.e2e


def test_demo_produces_every_table(spark, tmp_path, monkeypatch):
    monkeypatch.setattr("stateops.cli.main.DEMO_INPUT", DEMO_INPUT_SMALL)
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "demo"])
    assert result.exit_code == 0, result.output
    layout = Layout(str(tmp_path))
    for job in ("user_activity", "user_sessions", "order_payments", "user_actions"):
        assert DeltaTable(layout.table(job)).count() > 0, job
        assert f"{job}: {DEMO_INPUT_SMALL.files} batches" in result.output
    assert DeltaTable(layout.deadletter_table("user_activity")).count() > 0
    jobs_with_progress = set(progress.read(layout).column("job").to_pylist())
    assert jobs_with_progress == {"user_activity", "user_sessions", "order_payments", "user_actions"}
