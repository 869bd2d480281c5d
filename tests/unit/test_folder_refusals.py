"""A job's checkpoint or archive folder that would let the roots guard admit everything, or reach into what
another part of StateOps owns, is refused at load naming the field (issue 20, items 3 and 5); a configured
archive folder outside the home is a root of its own job, which the runbook's steps may use and no other
job's may touch."""
from __future__ import annotations

import pytest

from stateops.jobs.definition.catalog import Catalog
from stateops.errors import ConfigError
from stateops.layout import Layout
from stateops.roots import OutsideRootsError

pytestmark = pytest.mark.unit


def _load(tmp_path, text: str) -> Catalog:
    config = tmp_path / "stateops.toml"
    config.write_text(f"[jobs.user_activity]\n{text}\n")
    return Catalog.load(Layout(str(tmp_path / "data" / "home")), str(config))


@pytest.mark.parametrize("key, value, words", [
    ("checkpoint", "/", "overlaps"),
    ("checkpoint", "//", "overlaps"),
    ("checkpoint", "{tmp}/data", "overlaps the ops tables"),  # around the home: it holds every area
    ("checkpoint", "s3://bucket", "is a filesystem root or a bucket"),
    ("checkpoint", "s3://bucket/", "is a filesystem root or a bucket"),
    ("archive_dir", "/", "is a filesystem root or a bucket"),
    ("archive_dir", "{tmp}/data", "contains the StateOps home"),
    ("archive_dir", "{tmp}/data/home/checkpoints/user_sessions/archives", "overlaps the checkpoint of user_sessions"),
    ("archive_dir", "{tmp}/data/home/checkpoints/user_activity", "overlaps the checkpoint of user_activity"),
    ("archive_dir", "{tmp}/data/home/ops/user_sessions/archives", "overlaps the ops folder of user_sessions"),
    ("archive_dir", "{tmp}/data/home/landing/events/archives", "overlaps the landing zone of events"),
    ("archive_dir", "{tmp}/data/home/tables/user_activity", "overlaps the table user_activity"),
    ("archive_dir", "{tmp}/data/home/ops/tables", "overlaps the ops tables"),
])
def test_a_folder_that_is_no_jobs_own_is_refused_naming_the_field(tmp_path, key, value, words):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f'{key} = "{value.format(tmp=tmp_path)}"')
    assert err.value.field == f"jobs.user_activity.{key}" and words in err.value.problem, str(err.value)


def test_an_archive_folder_outside_the_home_is_its_jobs_root(tmp_path):
    archives = tmp_path / "elsewhere" / "archives" / "user_activity"
    catalog = _load(tmp_path, f'archive_dir = "{archives}"')
    roots = catalog.roots()
    assert roots.confine(f"{archives}/user_activity-20260101T000000Z-a1b2c3", job="user_activity")
    with pytest.raises(OutsideRootsError, match="touches user_activity's"):
        roots.confine(f"{archives}/user_activity-20260101T000000Z-a1b2c3", job="user_sessions")
    with pytest.raises(OutsideRootsError, match="outside the roots"):
        roots.confine(f"{tmp_path}/elsewhere/other", job="user_activity")


def test_the_default_and_an_archive_folder_inside_the_jobs_own_ops_folder_load(tmp_path):
    assert _load(tmp_path, "shuffle_partitions = 4").jobs["user_activity"].archive_dir is None
    inside = tmp_path / "data" / "home" / "ops" / "user_activity" / "kept-archives"
    assert _load(tmp_path, f'archive_dir = "{inside}"').jobs["user_activity"].archive_dir == str(inside)
