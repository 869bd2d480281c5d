"""The roots guard on real files and real symlinks: `..`, symlinks out of the roots, the home itself and
another job's checkpoint (or a folder holding it) are refused; the job's own paths resolve."""
from __future__ import annotations

import os

import pytest

from stateops.layout import Layout
from stateops.roots import OutsideRootsError, Roots

pytestmark = pytest.mark.unit


def _tree(tmp_path):
    """A home with two jobs' checkpoints and ops folders, a folder outside it, and a custom checkpoint."""
    layout = Layout(str(tmp_path / "home"))
    for job in ("alpha", "beta"):
        for path in (layout.checkpoint(job), layout.deadletter_checkpoint(job), layout.ops_dir(job)):
            os.makedirs(f"{path}/sub")
            open(f"{path}/sub/file", "w").close()
    os.makedirs(tmp_path / "outside")
    (tmp_path / "outside" / "precious").write_text("keep me")
    os.makedirs(tmp_path / "elsewhere" / "gamma" / "state")
    checkpoints = {"alpha": layout.checkpoint("alpha"), "beta": layout.checkpoint("beta"),
                   "gamma": str(tmp_path / "elsewhere" / "gamma")}
    return layout, Roots.from_layout(layout, checkpoints), tmp_path


def test_own_paths_resolve(tmp_path):
    layout, roots, tmp = _tree(tmp_path)
    assert roots.confine(f"{layout.checkpoint('alpha')}/sub/file", job="alpha") == \
        os.path.realpath(f"{layout.checkpoint('alpha')}/sub/file")
    assert roots.confine(layout.checkpoint("alpha"), job="alpha") == os.path.realpath(layout.checkpoint("alpha"))
    assert roots.confine(f"{layout.ops_dir('alpha')}/archive-1", job="alpha")  # not created yet: still inside
    assert roots.confine(f"{tmp}/elsewhere/gamma/state", job="gamma")  # a checkpoint configured outside home
    # A symlink that stays inside the job's own area is followed and allowed.
    os.symlink(f"{layout.checkpoint('alpha')}/sub", f"{layout.ops_dir('alpha')}/link")
    assert roots.confine(f"{layout.ops_dir('alpha')}/link/file", job="alpha") == \
        os.path.realpath(f"{layout.checkpoint('alpha')}/sub/file")


@pytest.mark.parametrize("make_path,words", [
    (lambda layout, tmp: f"{layout.checkpoint('alpha')}/../beta/sub", "contains '..'"),
    (lambda layout, tmp: f"{layout.checkpoint('alpha')}/sub/../../alpha", "contains '..'"),
    (lambda layout, tmp: "home/checkpoints/alpha", "relative"),
    (lambda layout, tmp: f"{tmp}/outside/precious", "outside the roots"),
    (lambda layout, tmp: layout.home, "the StateOps home itself"),
    (lambda layout, tmp: layout.checkpoint("beta"), "touches beta's"),
    (lambda layout, tmp: f"{layout.checkpoint('beta')}/sub/file", "touches beta's"),
    (lambda layout, tmp: f"{layout.ops_dir('beta')}/sub", "touches beta's"),
    (lambda layout, tmp: layout.deadletter_checkpoint("beta"), "touches beta's"),
    (lambda layout, tmp: f"{layout.home}/checkpoints", "touches beta's"),  # holds beta's checkpoint
    (lambda layout, tmp: f"{tmp}/elsewhere/gamma", "touches gamma's"),
])
def test_refused_paths(make_path, words, tmp_path):
    layout, roots, tmp = _tree(tmp_path)
    path = make_path(layout, tmp)
    with pytest.raises(OutsideRootsError, match=words) as err:
        roots.confine(path, job="alpha")
    assert str(err.value).startswith(f"refusing {path} for job alpha:") and "Fix:" in str(err.value)
    assert "\n" not in str(err.value)


def test_symlinks_out_of_the_roots_or_into_another_job_are_refused(tmp_path):
    layout, roots, tmp = _tree(tmp_path)
    own = layout.checkpoint("alpha")
    os.symlink(f"{tmp}/outside", f"{own}/escape")             # a directory link out of the home
    os.symlink(f"{tmp}/outside/precious", f"{own}/precious")  # a file link out of the home
    os.symlink(layout.checkpoint("beta"), f"{own}/neighbour")  # a link into another job's checkpoint
    os.symlink(f"{tmp}/outside", f"{layout.home}/tables")      # a whole layout folder linked away
    with pytest.raises(OutsideRootsError, match=f"resolves to {tmp}/outside/precious"):
        roots.confine(f"{own}/escape/precious", job="alpha")
    with pytest.raises(OutsideRootsError, match="outside the roots"):
        roots.confine(f"{own}/precious", job="alpha")
    with pytest.raises(OutsideRootsError, match="touches beta's"):
        roots.confine(f"{own}/neighbour/sub/file", job="alpha")
    with pytest.raises(OutsideRootsError, match="outside the roots"):
        roots.confine(f"{layout.home}/tables/alpha", job="alpha")
    assert (tmp / "outside" / "precious").read_text() == "keep me"


def test_unknown_job_and_object_store_paths(tmp_path):
    layout = Layout("s3://bucket/stateops")
    roots = Roots.from_layout(layout, {"alpha": layout.checkpoint("alpha"), "beta": layout.checkpoint("beta")})
    assert roots.confine("s3://bucket/stateops/checkpoints/alpha/state/0", job="alpha") == \
        "s3://bucket/stateops/checkpoints/alpha/state/0"
    for path, words in (("s3://bucket/stateops/checkpoints/beta/offsets", "touches beta's"),
                        ("s3://bucket/other/alpha", "outside the roots"),
                        ("s3://bucket/stateops/checkpoints/alpha/../beta", "contains '..'")):
        with pytest.raises(OutsideRootsError, match=words):
            roots.confine(path, job="alpha")
    with pytest.raises(OutsideRootsError, match="unknown job"):
        roots.confine("s3://bucket/stateops/checkpoints/alpha", job="delta")


def test_the_catalogs_roots_know_every_job(tmp_path):
    from stateops.jobs.definition.catalog import Catalog

    layout = Layout(str(tmp_path / "home"))
    config = tmp_path / "stateops.toml"
    config.write_text(f'[jobs.order_payments]\ncheckpoint = "{tmp_path}/fast-disk/order_payments"\n')
    roots = Catalog.load(layout, str(config)).roots()
    assert roots.confine(f"{tmp_path}/fast-disk/order_payments/state", job="order_payments")
    with pytest.raises(OutsideRootsError, match="touches order_payments'"):
        roots.confine(f"{tmp_path}/fast-disk/order_payments/state", job="user_activity")
    with pytest.raises(OutsideRootsError, match="touches user_sessions'"):
        roots.confine(layout.checkpoint("user_sessions"), job="user_activity")


def test_sink_tables_dead_letters_and_landing_zones_are_guarded(tmp_path):
    """Issue 20 item 4: the job areas leave out no output: a step of no job (an orphan's deletion) may not touch
    a job's sink or dead-letter table, another job's step neither; no step touches the landing zones."""
    from stateops.jobs.definition.catalog import Catalog

    layout = Layout(str(tmp_path / "home"))
    roots = Catalog.load(layout, None).roots()
    for job in (None, "user_sessions"):
        with pytest.raises(OutsideRootsError, match="touches user_activity's"):
            roots.confine(layout.table("user_activity"), job=job)
        with pytest.raises(OutsideRootsError, match="touches order_payments'"):
            roots.confine(f"{layout.deadletter_table('order_payments')}/part-0.parquet", job=job)
    assert roots.confine(layout.deadletter_table("user_activity"), job="user_activity")  # its own retention
    for job in (None, "user_activity"):
        for path in (layout.landing("events"), f"{layout.landing('orders')}/part-0.json", f"{layout.home}/landing"):
            with pytest.raises(OutsideRootsError, match="landing zones"):
                roots.confine(path, job=job)
    assert roots.confine(layout.ops_table("progress"), job=None)  # ops table maintenance is a step of no job
