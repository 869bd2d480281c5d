"""`stateops jars fetch` with the real Maven: a folder whose jars were changed is fetched again and verified; Maven
handing out other bytes than pinned puts nothing in place. (The fetch from an installed wheel, in a folder with no
repository: tests/e2e/test_dagster_project.py; the refusals before Maven runs: tests/unit/test_jars.py.)"""
from __future__ import annotations

import shutil

import pytest

from stateops.jvm import jars
from stateops.jvm.jars import FetchFailed, expected, fetch, verify

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("mvn") is None, reason="Maven (mvn) is not installed: apt-get install "
                                 "-y maven, then bash scripts/setup")]


def test_a_changed_jar_is_fetched_again_and_verified(fetched_jars_copy):
    victim = sorted(expected())[0]
    (fetched_jars_copy / victim).write_bytes(b"not the pinned jar")
    assert verify(str(fetched_jars_copy)) == [f"{victim} has another sha256 than pinned"]
    done = fetch(str(fetched_jars_copy))
    assert done["fetched"] and done["folder"] == str(fetched_jars_copy)
    assert verify(str(fetched_jars_copy)) == []
    again = fetch(str(fetched_jars_copy))  # nothing to do: the folder is the pinned set
    assert not again["fetched"] and jars.summary(again).startswith(f"{len(expected())} jars already there, verified")


def test_jars_other_than_pinned_put_nothing_in_place(fetched_jars_copy, tmp_path, monkeypatch):
    pinned = (tmp_path / "jars.sha256")
    lines = open(jars.CHECKSUMS).read().splitlines()
    name = lines[0].split()[1]
    pinned.write_text("\n".join([f"{'0' * 64}  {name}", *lines[1:]]) + "\n")
    monkeypatch.setattr(jars, "CHECKSUMS", str(pinned))
    before = sorted(p.name for p in fetched_jars_copy.iterdir())
    with pytest.raises(FetchFailed) as err:
        fetch(str(fetched_jars_copy))
    assert f"{name} has another sha256 than pinned" in str(err.value) and "nothing was put in" in str(err.value)
    assert err.value.exit_code == 1
    assert sorted(p.name for p in fetched_jars_copy.iterdir()) == before
    assert not list(tmp_path.glob(".stateops-jars-*"))  # the work folder is gone
