"""The code location loads (as `dagster dev` would) and its definitions have the intended shape."""
import os
import subprocess
import sys
import uuid

import pytest
from dagster import (AssetKey, DagsterRun, DagsterRunStatus, DefaultScheduleStatus, RunRequest,
                     SkipReason, build_schedule_context, instance_for_test)

from stateops.dagster.streaming_jobs.assets import GROUP
from tests.support.code_location import SPECS
from stateops.dagster.definitions import defs
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_dagster_definitions_validate(tmp_path):
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    (tmp_path / "dagster_home").mkdir()
    env = {**os.environ, "STATEOPS_HOME": str(tmp_path / "stateops"),
           "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    done = subprocess.run([dagster, "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "stateops").exists(), "loading the definitions must not write anything"


def test_one_asset_and_one_stopped_schedule_per_job():
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    job_keys = {key.to_user_string() for key in graph.get_all_asset_keys() if graph.get(key).group_name == GROUP}
    assert job_keys == {s.sink_table for s in SPECS.values()}
    for spec in SPECS.values():
        node = graph.get(AssetKey(spec.sink_table))
        assert node.group_name == GROUP and node.description == spec.description
        schedule = repo.get_schedule_def(f"{spec.name}_every_15_minutes")
        assert schedule.cron_schedule == "*/15 * * * *"
        assert schedule.default_status == DefaultScheduleStatus.STOPPED
        job = repo.get_job(schedule.job_name)
        assert [k.to_user_string() for k in job.asset_layer.selected_asset_keys] == [spec.sink_table]


def test_schedule_skips_while_the_jobs_previous_run_is_active(layout):
    schedule = defs.get_repository_def().get_schedule_def("user_activity_every_15_minutes")
    with instance_for_test() as instance:
        with build_schedule_context(instance=instance, resources=default_resources()) as context:
            assert isinstance(schedule(context), RunRequest)
        instance.add_run(DagsterRun(job_name=schedule.job_name, run_id=str(uuid.uuid4()),
                                    status=DagsterRunStatus.STARTED))
        with build_schedule_context(instance=instance, resources=default_resources()) as context:
            assert isinstance(schedule(context), SkipReason)
