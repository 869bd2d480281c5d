"""A catalog of hundreds of jobs loads in time linear in its jobs (issue 23): guarded by counting the path
normalizations of `check_folders`, not by timing (a shared 2-core machine makes timings useless as a guard).
Comparing every pair of jobs made 495,450 overlap checks for 300 jobs; the index (stateops.folders._Folders) answers
each path with a few lookups. Also: the index gives exactly the answers of the pairwise check, a job's asset
group follows its `group`, else its team owner, else streaming_jobs, and a tick (reusing_unchanged) validates
an unchanged config file once but reads an edited one at its next load."""
from __future__ import annotations

import itertools
import random

import pytest

import stateops.folders as folders_module
from bench.bench_scale import EXAMPLES, config_text
from stateops.jobs.definition.catalog import Catalog, job_folders
from stateops.jobs.definition.environment import get_job
from stateops.dagster.groups import DEFAULT_GROUP, asset_group
from stateops.errors import ConfigError
from stateops.folders import JobFolders, _Folders, _inside
from stateops.layout import Layout

pytestmark = pytest.mark.unit

SMALL, LARGE = 100, 300
PER_JOB = 12  # normalizations a job may cost: its own folders indexed, then its checkpoint looked up


def _normalizations(tmp_path, monkeypatch, jobs: int) -> int:
    config = tmp_path / f"jobs-{jobs}.toml"
    config.write_text(config_text(jobs))
    calls = {"n": 0}
    norm = folders_module._norm

    def counted(path: str) -> str:
        calls["n"] += 1
        return norm(path)

    monkeypatch.setattr(folders_module, "_norm", counted)
    catalog = Catalog.load(Layout(str(tmp_path / f"home-{jobs}")), str(config))
    monkeypatch.setattr(folders_module, "_norm", norm)
    assert len(catalog.jobs) == jobs
    return calls["n"]


def test_the_path_check_of_a_large_catalog_grows_linearly_with_its_jobs(tmp_path, monkeypatch, importable):
    importable(EXAMPLES)  # the generated jobs are examples/engagement.toml's job
    small, large = _normalizations(tmp_path, monkeypatch, SMALL), _normalizations(tmp_path, monkeypatch, LARGE)
    assert large <= PER_JOB * LARGE, f"{large} normalizations for {LARGE} jobs"
    assert large / small <= LARGE / SMALL * 1.05, f"{small} for {SMALL} jobs, {large} for {LARGE}: not linear"


def _pairwise(path: str, named: list[tuple[str, str]]) -> set[int]:
    return {i for i, (_what, other) in enumerate(named) if _inside(path, other) or _inside(other, path)}


def test_the_folder_index_answers_as_the_pairwise_check(tmp_path):
    rng = random.Random(23)
    parts = ["a", "b", "ab", "a.b", "b-", "c"]
    paths = ["/", "//", "s3://bucket", "s3://bucket/", "s3://bucket/a", "s3://bucket/a/b/", "file:///x"]
    paths += ["/" + "/".join(p) for n in (1, 2, 3) for p in itertools.product(parts, repeat=n)]
    paths += [p + "/" for p in paths[-20:]] + ["/a/./b", "/a/../a/b", "/a//b"]
    named = [(f"folder {i}", p) for i, p in enumerate(rng.sample(paths, 120))]
    index = _Folders(named)
    for path in paths:
        assert index.overlapping(path) == _pairwise(path, named), path


def _folders(spec, layout: Layout) -> JobFolders:
    return job_folders(spec, layout)


def test_the_first_clash_is_named_as_before(tmp_path):
    """Refusal order: the areas before the checkpoints, the first in the order given."""
    layout = Layout(str(tmp_path / "home"))
    spec = get_job("user_activity", layout=layout)
    from dataclasses import replace

    clash = replace(spec, name="second", sink_table="second", checkpoint=spec.checkpoint_path(layout) + "/inner")
    with pytest.raises(ConfigError) as err:
        folders_module.check_folders([_folders(spec, layout), _folders(clash, layout)], layout)
    assert err.value.field == "jobs.user_activity.checkpoint" and "overlaps the checkpoint of second" in err.value.problem
    inside_table = replace(clash, checkpoint=layout.table("user_activity") + "/cp")
    with pytest.raises(ConfigError) as err:
        folders_module.check_folders([_folders(spec, layout), _folders(inside_table, layout)], layout)
    assert err.value.field == "jobs.second.checkpoint" and "overlaps the table user_activity" in err.value.problem


def test_a_jobs_asset_group_is_its_group_else_its_team_else_the_default(tmp_path):
    from dataclasses import replace

    spec = get_job("user_activity", layout=Layout(str(tmp_path / "home")))
    assert asset_group(spec) == DEFAULT_GROUP == "streaming_jobs"  # the built-ins: unchanged
    assert asset_group(replace(spec, owners=("ana@example.com", "team:data-platform"))) == "data_platform"
    assert asset_group(replace(spec, owners=("team:growth",), group="payments")) == "payments"
    config = tmp_path / "groups.toml"
    config.write_text('[jobs.user_activity]\ngroup = "activity"\n[jobs.user_sessions]\ngroup = "bad group"\n')
    with pytest.raises(ConfigError) as err:
        Catalog.load(Layout(str(tmp_path / "home")), str(config))
    assert err.value.field == "jobs.user_sessions.group" and "letters, digits and underscores" in err.value.fix
    config.write_text('[jobs.user_activity]\ngroup = "activity"\n')
    assert asset_group(Catalog.load(Layout(str(tmp_path / "home")), str(config)).jobs["user_activity"]) == "activity"


def test_a_tick_reuses_an_unchanged_config_file_and_reads_an_edited_one(tmp_path):
    from stateops.jobs.definition.catalog import reusing_unchanged

    layout, config = Layout(str(tmp_path / "home")), tmp_path / "stateops.toml"
    config.write_text('[jobs.user_activity]\nwatermark_delay = "20 minutes"\n')
    with reusing_unchanged():
        first = Catalog.load(layout, str(config))
        assert Catalog.load(layout, str(config)) is first  # unchanged: not validated again
        config.write_text('[jobs.user_activity]\nwatermark_delay = "30 minutes"\n')
        edited = Catalog.load(layout, str(config))
        assert edited is not first and edited.jobs["user_activity"].watermark_delay == "30 minutes"
        config.write_text('[jobs.user_activity]\nwatermark_delay = "ten minutes"\n')
        with pytest.raises(ConfigError):  # a broken file is refused at every load, never served from before
            Catalog.load(layout, str(config))
        with pytest.raises(ConfigError):
            Catalog.load(layout, str(config))
    config.write_text('[jobs.user_activity]\nwatermark_delay = "30 minutes"\n')
    assert Catalog.load(layout, str(config)) is not Catalog.load(layout, str(config))  # elsewhere: afresh
