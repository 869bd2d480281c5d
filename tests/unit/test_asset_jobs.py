"""Asset jobs resolved against their own assets (stateops.dagster.asset_jobs): the same jobs as Dagster's own
resolution against the whole code location, with a resolution cost that does not grow with the jobs
registered (at 1,000 jobs Dagster's own walked 4,000 assets definitions per job: a minute per snapshot)."""
from __future__ import annotations

import functools

import pytest
from dagster._core.definitions.assets.job import asset_job as dagster_asset_job
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from stateops.dagster.asset_jobs import ScopedAssetJob
from stateops.dagster.audits.checks import build_compatibility_check, build_state_checks
from stateops.dagster.audits.schedules import build_audit_jobs
from stateops.dagster.definitions import defs
from stateops.dagster.streaming_jobs.schedules import build_job_run
from tests.support.code_location import SPECS

pytestmark = pytest.mark.unit

SCOPED = [*(build_job_run(spec) for spec in SPECS.values()),
          *(job for spec in SPECS.values() for job in build_audit_jobs(spec, build_state_checks(spec),
                                                                   build_compatibility_check(spec)))]


def _layout(job) -> tuple:
    layer = job.asset_layer
    graph = layer.asset_graph
    return (sorted(layer.executable_asset_keys), sorted(layer.selected_asset_keys), sorted(graph.asset_check_keys),
            sorted(graph.get_all_asset_keys()))


@functools.cache
def _repo():
    return defs.get_repository_def()


def test_every_job_of_the_code_location_is_scoped():
    assert len(SCOPED) == 3 * len(SPECS)
    assert all(isinstance(job, ScopedAssetJob) for job in SCOPED)


@pytest.mark.parametrize("job", SCOPED, ids=lambda job: job.name)
def test_a_scoped_job_is_the_job_dagster_resolves_against_the_whole_code_location(job):
    repo = _repo()
    given = {"asset_graph": repo.asset_graph, "resource_defs": repo.get_top_level_resources(),
             "default_executor_def": defs.executor}  # as the repository resolves them
    whole = UnresolvedAssetJobDefinition.resolve(job, **given)
    scoped = job.resolve(**given)
    assert _layout(scoped) == _layout(whole)
    assert scoped.get_job_snapshot().snapshot_id == whole.get_job_snapshot().snapshot_id
    assert repo.get_job(job.name).get_job_snapshot().snapshot_id == whole.get_job_snapshot().snapshot_id


def test_resolving_a_job_walks_its_own_assets_not_the_code_locations(monkeypatch):
    repo = _repo()
    walked = []
    subset = dagster_asset_job._subset_assets_defs

    def counted(assets, *args, **kwargs):
        assets = list(assets)
        walked.append(len(assets))
        return subset(assets, *args, **kwargs)

    monkeypatch.setattr(dagster_asset_job, "_subset_assets_defs", counted)
    for job in SCOPED:
        job.resolve(asset_graph=repo.asset_graph, resource_defs=repo.get_top_level_resources())
    whole = len(repo.asset_graph.assets_defs)
    # the most a job touches: the deep audit job's audit asset, the job's asset, its state checks and its
    # state_compatible check, and their input; a constant, whatever the code location holds
    assert whole > 10 and walked and max(walked) <= 5, f"walked {max(walked)} of {whole} assets definitions"
