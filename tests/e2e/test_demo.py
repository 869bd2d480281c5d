"""`stateops demo` runs end to end: input generated, four jobs run, tables and progress written."""
from __future__ import annotations

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from stateops_cli.main import main
from stateops import progress
from stateops.layout import Layout

pytestmark = pytest.mark.e2e


def test_demo_produces_every_table(spark, tmp_path):
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "demo"])
    assert result.exit_code == 0, result.output
    layout = Layout(str(tmp_path))
    for job in ("user_activity", "user_sessions", "order_payments", "user_actions"):
        assert DeltaTable(layout.table(job)).count() > 0, job
        assert f"{job}: 6 batches" in result.output
    assert DeltaTable(layout.deadletter_table("user_activity")).count() > 0
    jobs_with_progress = set(progress.read(layout).column("job").to_pylist())
    assert jobs_with_progress == {"user_activity", "user_sessions", "order_payments", "user_actions"}
