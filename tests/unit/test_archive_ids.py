"""An archive id is refused unless it has the grammar runbooks give their ids: a hostile id never becomes a
path (issue 20, item 2). Oracle: a manifest planted outside the home, which nothing may read or print."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from stateops.errors import ConfigError
from stateops.checkpoints import archive
from stateops.cli.main import main

pytestmark = pytest.mark.unit

HOSTILE = ["user_activity-20260101T000000Z-a1b2c3/../../../../outside/fake", "../outside/fake",
           "user_activity-20260101T000000Z-a1b2c3/..", "user_activity/x-20260101T000000Z-a1b2c3", "",
           "user_activity-20260101T000000Z-A1B2C3", "/etc/passwd"]


def test_runbook_ids_round_trip():
    runbook_id = archive.new_runbook_id("user_activity")
    assert archive.job_of(runbook_id) == "user_activity"
    assert archive.job_of("order_payments-20261124T211600Z-0f9a1b") == "order_payments"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_id_is_refused_in_one_line_and_nothing_outside_is_read(tmp_path, hostile):
    outside = tmp_path / "outside" / "fake"
    outside.mkdir(parents=True)
    (outside / "manifest.json").write_text(json.dumps({"secret": "OUTSIDE-MANIFEST", "files": []}))
    with pytest.raises(ConfigError, match="is not an archive id"):
        archive.job_of(hostile)
    home = tmp_path / "a" / "b" / "c" / "home"
    for args in (["archives", "show", hostile], ["archives", "show", hostile, "--verify", "--json"]):
        result = CliRunner().invoke(main, ["--home", str(home), *args])
        assert result.exit_code == 2, result.output
        assert result.output.startswith("Error: archive id: ") and len(result.output.strip().splitlines()) == 1
        assert "OUTSIDE-MANIFEST" not in result.output and "ok" not in result.output.split("Fix:")[0]
