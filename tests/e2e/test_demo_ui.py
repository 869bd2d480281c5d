"""The demo through Dagster, and the UI that shows it, checked in a real browser.

`bash scripts/demo` is stateops.dagster.demo.run_demo on DEMO_INPUT (about 9,000 lines); here the same code
path runs on a reduced input (a few hundred lines: the whole demo is too slow for CI) into a fresh
instance prepared as scripts/demo and scripts/ui prepare it. Oracles: the Dagster instance's own API
(runs, latest materializations, the run's event log), the Delta tables and the audits ops table.
Then dagster-webserver serves that instance and headless Chromium renders the asset pages.
"""
import os

import pytest
from dagster import AssetKey, DagsterEventType, DagsterRunStatus
from deltalake import DeltaTable

from stateops.delta import read_table

from tests.support.code_location import SPECS
from stateops.dagster.audits.assets import deep_audit_key, fast_audit_key
from stateops.dagster.demo import demo_selection
from tests.support.scenarios import DEMO_INPUT_SMALL
from tests.support.servers import browser

pytestmark = [pytest.mark.e2e, pytest.mark.long]

CHECKS = {"state_skew", "state_growth", "state_eviction", "state_readable", "state_compatible"}


def _last_commit(checkpoint: str) -> int:
    return max(int(name) for name in os.listdir(os.path.join(checkpoint, "commits")) if name.isdigit())


def _latest(instance, key: AssetKey) -> tuple[str, dict]:
    event = instance.get_latest_materialization_event(key)
    assert event is not None, f"{key.to_user_string()}: never materialized"
    return event.run_id, {k: v.value for k, v in event.asset_materialization.metadata.items()}


def test_demo_materializes_every_job_and_audit_on_the_instance(demo_run):
    layout, _, instance, run_id, lines = demo_run
    assert instance.get_run_by_id(run_id).status == DagsterRunStatus.SUCCESS
    assert set(demo_selection(SPECS)) == {k for s in SPECS.values()
                                     for k in (AssetKey(s.sink_table), deep_audit_key(s), fast_audit_key(s))}
    logs = instance.all_logs(run_id)
    for spec in SPECS.values():
        materialized_in, meta = _latest(instance, AssetKey(spec.sink_table))
        assert materialized_in == run_id, spec.name
        table = DeltaTable(layout.table(spec.sink_table))
        assert meta["dagster/row_count"] == table.count(), spec.name
        assert [c.name for c in meta["dagster/column_schema"].columns] == [f.name for f in table.schema().fields]
        assert meta["dagster/uri"] == layout.table(spec.sink_table)
        assert meta["batches"] == DEMO_INPUT_SMALL.files and meta["input_rows"] > 0, spec.name
        observed = [e.dagster_event.event_specific_data.asset_observation.metadata["batch"].value for e in logs
                    if e.dagster_event and e.dagster_event.event_type == DagsterEventType.ASSET_OBSERVATION
                    and e.dagster_event.asset_key == AssetKey(spec.sink_table)]
        # One per micro-batch, the no-data batch that closes state after the last file included.
        assert observed == list(range(_last_commit(spec.checkpoint_path(layout)) + 1)), spec.name
        for key, kind in ((deep_audit_key(spec), "deep"), (fast_audit_key(spec), "fast")):
            materialized_in, audit = _latest(instance, key)
            assert materialized_in == run_id and audit["audit_kind"] == kind, key
            rows = read_table(layout.ops_table("audits"), filters=[("audit_id", "=", audit["audit_id"])]).to_pylist()
            assert rows and audit["batch_id"] == _last_commit(spec.checkpoint_path(layout)), key
            if kind == "deep":
                assert audit["state_rows_total"] == sum(r["rows_total"] for r in rows) > 0, key
        checks = {e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data
                  for e in logs if e.dagster_event
                  and e.dagster_event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION
                  and e.dagster_event.event_specific_data.asset_key == AssetKey(spec.sink_table)}
        assert set(checks) == CHECKS, spec.name
        assert checks["state_compatible"].passed, checks["state_compatible"].description  # the demo's own query
    assert lines[-1] == f"Dagster run {run_id}: success"


@pytest.mark.skipif(browser.chromium() is None,
                    reason="chromium is not installed (scripts/test installs it: apt-get install -y chromium)")
def test_ui_renders_metadata_and_check_results_in_chromium(demo_run):
    layout, home, instance, _, _ = demo_run
    with browser.webserver(layout.home, home) as url:
        browser.check_pages(url, instance, [("user_activity", "user_activity")])


@pytest.mark.skipif(browser.chromium() is None,
                    reason="chromium is not installed (scripts/test installs it: apt-get install -y chromium)")
def test_the_asset_page_shows_the_stream_between_runs_in_chromium(demo_run, monkeypatch):
    """No run is open after the demo: a tick of query_health_sensor reports each job's health (as the daemon
    stores a sensor's asset events: runless events on the instance), and the asset's events and plots show it."""
    from tests.support.sensor_harness import Harness

    layout, home, instance, _, _ = demo_run
    monkeypatch.setenv("STATEOPS_HOME", layout.home)
    result = Harness(instance).tick("query_health_sensor")
    health = [e for e in result.asset_events if e.asset_key == AssetKey("user_activity") and "health/state" in e.metadata]
    assert len(health) == 1 and health[0].metadata["health/state"].value == "idle", result.asset_events
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    batch = health[0].metadata["health/batch"].value
    assert batch == _last_commit(SPECS["user_activity"].checkpoint_path(layout))
    with browser.webserver(layout.home, home) as url:
        events = browser.page_text(f"{url}/assets/user_activity?view=events")
        missing = [w for w in ("health/state", "idle", "health/batch_age_seconds", "health/findings") if w not in events]
        assert not missing, f"events of user_activity lack {missing}: {events[:2000]}"
        # what the events' Plots view draws (a toggle Chromium's dumped page cannot click): the webserver's numeric
        # entries of the asset's observations
        numeric = browser.observation_numbers(url, "user_activity")
        assert {"health/batch", "health/batch_age_seconds", "health/findings_error"} <= set(numeric), numeric
        assert numeric["health/batch"] == batch

