"""Retention's lock per root with a local control home (flock): a second hold of a root is refused in one line
naming the holder, other roots are held alongside, and a released root is free again. The S3 locks:
tests/e2e/test_retention_lock_s3.py."""
from __future__ import annotations

import json

import pytest

from stateops.layout import Layout
from stateops.retention import lock

pytestmark = pytest.mark.unit


def test_a_held_root_is_refused_naming_its_holder_and_other_roots_are_free(tmp_path):
    layout = Layout(str(tmp_path / "home"))
    first, other = str(tmp_path / "home"), str(tmp_path / "elsewhere")
    with lock.hold(layout, (first,), run_id="run-first", actor="alice"):
        with open(lock.lock_path(layout, first)) as handle:
            assert json.load(handle)["run_id"] == "run-first"
        with pytest.raises(lock.RetentionLockedError) as caught:
            with lock.hold(layout, (other, first), run_id="run-second", actor="bob"):
                pass
        message = str(caught.value)
        assert message.startswith(f"another retention run holds {first}: run run-first (pid ")
        assert "by alice" in message and "\n" not in message
        assert message.endswith("a run that died or stopped releases its lock by itself once 60 s without renewal")
        with lock.hold(layout, (other,), run_id="run-third", actor="carol"):  # the refused run released `other`
            pass
    with lock.hold(layout, (first, other), run_id="run-fourth", actor="dave"):
        pass
    with open(lock.lock_path(layout, first)) as handle:
        assert handle.read() == ""  # the holder is cleared on release
