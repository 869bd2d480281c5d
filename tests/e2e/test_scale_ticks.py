"""A sensor tick over many jobs reads each ops table once for all of them, and the Dagster run storage a
fixed number of times (issue 23): counted, not timed, on homes of SMALL and LARGE generated jobs, each with a
checkpoint, progress rows and audits (bench/bench_scale.py builds them; no Spark). Reading a table once per
job made a tick's cost grow with jobs x rows: 10 s a tick at 1,000 jobs. The config file is validated on the
first tick and again only when it changed."""
from __future__ import annotations

from collections import Counter

import pytest
from dagster import build_sensor_context, instance_for_test

import stateops.jobs.definition.catalog as catalog_module
import stateops.delta as delta_module
from bench.bench_scale import EXAMPLES, build_home, config_text
from stateops.dagster.resources import PathsResource
from stateops.sensors.health import build_health_sensor
from stateops.sensors.state import state_sensors
from stateops.sensors.ticks import Targets

pytestmark = pytest.mark.e2e

SMALL, LARGE = 10, 60
SENSORS = ("state_skew_sensor", "state_growth_sensor", "query_health_sensor")


def _sensors():
    targets = Targets(deep_audit=lambda job: f"{job}_deep_audit", job_run=lambda job: f"{job}_job")
    return {s.name: s for s in [*state_sensors(targets, [], 60), build_health_sensor(targets, [], 60)]}


def _reads(tmp_path, monkeypatch, jobs: int) -> dict[str, Counter]:
    """Per sensor: ops tables opened (by name), run-storage queries and catalog validations, in its second
    tick (the first one validates the config file)."""
    home, config = tmp_path / f"home-{jobs}", tmp_path / f"jobs-{jobs}.toml"
    config.write_text(config_text(jobs))
    counts = build_home(str(home), str(config), batches=5, audits=2)
    assert counts["jobs"] == jobs
    monkeypatch.setenv("STATEOPS_HOME", str(home))
    monkeypatch.setenv("STATEOPS_CONFIG", str(config))
    seen: Counter = Counter()

    class Counted(delta_module.DeltaTable):  # every ops table is opened by stateops.delta.open_table
        def __init__(self, uri, *args, **kwargs):
            seen[f"table {str(uri).rstrip('/').rsplit('/', 1)[-1]}"] += 1
            super().__init__(uri, *args, **kwargs)

    validate = catalog_module._load_jobs

    def counted_validation(*args, **kwargs):
        seen["catalog validations"] += 1
        return validate(*args, **kwargs)

    monkeypatch.setattr(delta_module, "DeltaTable", Counted)
    monkeypatch.setattr(catalog_module, "_load_jobs", counted_validation)
    out = {}
    with instance_for_test() as instance:
        get_run_records = instance.get_run_records

        def counted_runs(*args, **kwargs):
            seen["run queries"] += 1
            return get_run_records(*args, **kwargs)

        monkeypatch.setattr(instance, "get_run_records", counted_runs)
        for name, sensor in _sensors().items():
            for tick in range(2):
                seen.clear()
                with build_sensor_context(instance=instance, resources={"paths": PathsResource(home=str(home))},
                                          sensor_name=name) as context:
                    result = sensor(context)
                assert result.skip_reason is None or "no checkpoint" not in result.skip_reason.skip_message, \
                    result.skip_reason.skip_message[:300]
            out[name] = Counter(seen)
    return out


def test_a_ticks_reads_do_not_grow_with_the_number_of_jobs(tmp_path, monkeypatch, importable):
    importable(EXAMPLES)  # the generated jobs are examples/engagement.toml's job
    small, large = _reads(tmp_path, monkeypatch, SMALL), _reads(tmp_path, monkeypatch, LARGE)
    for name in SENSORS:
        assert large[name] == small[name], f"{name}: {dict(small[name])} at {SMALL} jobs, {dict(large[name])} at {LARGE}"
        assert large[name]["catalog validations"] == 0, f"{name}: the unchanged config file was validated again"
        assert all(n <= 2 for key, n in large[name].items() if key.startswith("table ")), f"{name}: {dict(large[name])}"
    assert large["state_growth_sensor"]["table progress"] == 1 and large["state_skew_sensor"]["table audits"] == 1
    assert large["query_health_sensor"]["run queries"] == 1, dict(large["query_health_sensor"])
