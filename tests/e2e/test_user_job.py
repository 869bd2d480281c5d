"""A user's own job, registered from outside StateOps, run through the CLI and through Dagster, audited.

The job is examples/engagement.py (dedup, then transformWithStateInPandas with TTL), copied into a temporary
folder that is not part of the repository: the driver finds it on PYTHONPATH (the CLI) or sys.path (this
process); the runner puts its folder on the PYTHONPATH of Spark's Python processes (the in-process session
was started before the folder existed, as a notebook's or `dagster dev`'s may be). It is registered by
examples/engagement.toml as STATEOPS_CONFIG, unchanged. Oracles: tests/support/engagement_oracle.py (the Delta
table recomputed from the landing files in plain Python) and Spark's state reader (the audit's numbers).
"""
import os
import shutil
import subprocess
import sys

import pytest
from dagster import materialize

from stateops.jobs.definition.environment import get_job
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.delta import read_table

from stateops.dagster.streaming_jobs.assets import build_job_asset
from stateops.dagster.audits.assets import build_deep_audit_asset
from stateops.dagster.resources import PathsResource, SparkResource
from tests.support import engagement_oracle

# Long tier (the default run: users' jobs loaded, validated and refused in tests/unit/test_user_jobs.py, and run
# from importable modules in tests/spark/test_state_compatibility.py).
pytestmark = [pytest.mark.e2e, pytest.mark.long]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
JOB = "user_engagement"
INPUT = dict(users=25, duplicate_share=0.1, late_share=0.05, malformed_share=0.02, minutes_per_file=20)


def _user_module(tmp_path, monkeypatch, importable, spark):
    """engagement.py in a folder of its own, importable here and by Spark's workers; the example config."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    shutil.copy(os.path.join(EXAMPLES, "engagement.py"), folder / "engagement.py")
    importable(folder)
    monkeypatch.setenv("STATEOPS_CONFIG", os.path.join(EXAMPLES, "engagement.toml"))
    return folder


def _state_rows(spark, checkpoint: str, operator_id: int, variable: str) -> int:
    return (spark.read.format("statestore").option("path", checkpoint).option("operatorId", operator_id)
            .option("stateVarName", variable).load().count())


def test_user_job_from_outside_the_package_runs_in_the_cli_and_dagster_and_is_audited(spark, layout,
                                                                                      dagster_instance, tmp_path,
                                                                                      monkeypatch, importable):
    user_module = _user_module(tmp_path, monkeypatch, importable, spark)
    spec = get_job(JOB)
    assert spec.transformation == "engagement:user_engagement"
    assert os.path.dirname(sys.modules["engagement"].__file__) == str(user_module)

    # --- the CLI, in its own process: PYTHONPATH makes the module importable by the driver and workers ---
    generate(layout, GeneratorConfig(events=300, files=2, seed=5, **INPUT))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(user_module)])}
    cli = subprocess.run([os.path.join(os.path.dirname(sys.executable), "stateops"), "jobs", "run", JOB],
                         env=env, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert f"{JOB}: 2 batches" in cli.stdout, cli.stdout
    landing = layout.landing("events")
    assert engagement_oracle.table(layout) == engagement_oracle.engagement(landing)

    # --- Dagster, in this process, on the same checkpoint: two more files, then the deep audit -------------
    generate(layout, GeneratorConfig(events=300, files=2, seed=6, start="2026-01-01T00:40:00+00:00", **INPUT))
    result = materialize([build_job_asset(spec), build_deep_audit_asset(spec)], instance=dagster_instance,
                         resources={"spark": SparkResource(), "paths": PathsResource(home=layout.home)})
    assert result.success
    (run,) = result.asset_materializations_for_node(JOB)
    assert run.metadata["batches"].value == 2
    assert run.metadata["dagster/row_count"].value == len(engagement_oracle.engagement(landing))
    assert engagement_oracle.table(layout) == engagement_oracle.engagement(landing)

    (audit,) = result.asset_materializations_for_node(f"{JOB}_state_audit")
    meta = {k: v.value for k, v in audit.metadata.items()}
    assert meta["audit_kind"] == "deep" and meta["batch_id"] == 3
    recorded = read_table(layout.ops_table("audits"), filters=[("audit_id", "=", meta["audit_id"])]).to_pylist()
    names = {r["operator_name"] for r in recorded}
    assert names == {"dedupeWithinWatermark", "transformWithStateInPandasExec"}, names
    checkpoint = spec.checkpoint_path(layout)
    (tws,) = {r["operator_id"] for r in recorded if r["operator_name"] == "transformWithStateInPandasExec"}
    expected = engagement_oracle.state_rows(landing)  # rows per state variable: summary, actions
    audited = {r["store_name"]: r["rows_total"] for r in recorded if r["operator_id"] == tws}
    assert {v: audited.get(v) for v in expected} == expected, audited
    assert {v: _state_rows(spark, checkpoint, tws, v) for v in expected} == expected
    assert meta["state_rows_total"] == sum(r["rows_total"] for r in recorded) > 0
