"""Materialize every job asset through Dagster with the real resources; check the metadata independently.

Oracles: the landing files (line counts, malformed lines re-parsed in plain Python), the Delta tables
(deltalake), the checkpoints (query id) and the progress ops table.
"""
import json
import threading
import time
from datetime import datetime

import pytest
from dagster import DagsterEventType, DagsterRunStatus, instance_for_test, materialize
from deltalake import DeltaTable

from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops import progress
from stateops.control import request_stop
from stateops.delta import open_table
from stateops.control import ControlSettings

from tests.support.code_location import SPECS, job_assets
from stateops.dagster.resources import default_resources

pytestmark = pytest.mark.e2e

# 30 minutes per file: the watermark passes the first sessions and user timeouts, so every table has rows.
CONFIG = GeneratorConfig(events=600, files=4, users=200, orders=80, malformed_share=0.05, minutes_per_file=30,
                         seed=23)


def _malformed(line: str, columns: dict[str, str]) -> bool:
    """The dead-letter rule, re-stated: a JSON object with every schema field present and typed."""
    try:
        row = json.loads(line)
    except ValueError:
        return True
    if not isinstance(row, dict) or any(row.get(c) is None for c in columns):
        return True
    for column, kind in columns.items():
        try:
            if kind == "timestamp":
                datetime.fromisoformat(row[column].replace("Z", "+00:00"))
            elif kind == "double":
                float(row[column])
        except (TypeError, ValueError, AttributeError):
            return True
    return False


def _landing_counts(spec, generated) -> tuple[int, int, int]:
    """(lines, malformed lines, files per input) over the job's inputs, read from the landing files."""
    lines = malformed = 0
    files = set()
    for inp in spec.inputs:
        paths = generated.files[inp.name]
        files.add(len(paths))
        for path in paths:
            with open(path) as handle:
                for line in handle.read().splitlines():
                    lines += 1
                    malformed += _malformed(line, inp.columns())
    assert len(files) == 1, "every input of a job has one file per event-time slice"
    return lines, malformed, files.pop()


def _metadata(result, asset_name: str) -> dict:
    (event,) = result.asset_materializations_for_node(asset_name)
    return {key: value.value for key, value in event.metadata.items()}


def test_materialize_every_job_asset_reports_true_metadata(layout, spark, dagster_instance):
    generated = generate(layout, CONFIG)
    resources = default_resources()
    assert resources["paths"].layout == layout  # defaults follow STATEOPS_HOME

    result = materialize(job_assets, resources=resources, instance=dagster_instance)
    assert result.success

    for spec in SPECS.values():
        meta = _metadata(result, spec.sink_table)
        lines, malformed, files = _landing_counts(spec, generated)
        table_path = layout.table(spec.sink_table)
        table = DeltaTable(table_path)

        assert meta["batches"] == files, spec.name
        assert meta["input_rows"] == lines, spec.name
        assert meta["deadletter_rows"] == meta["deadletter_total"] == malformed, spec.name
        assert meta["progress_write_failures"] == 0, spec.name
        dead = open_table(layout.deadletter_table(spec.name))
        assert (dead.count() if dead is not None else 0) == malformed, spec.name
        assert meta["delta_version"] == table.version(), spec.name
        assert meta["batches_skipped"] == 0, spec.name  # nothing re-ran: no batch was already in Delta
        assert meta["table_path"] == table_path
        rows = table.count()
        if spec.output_mode == "append":
            assert meta["output_rows"] == rows > 0, spec.name
        else:  # MERGE: rows written per batch, a key updated in several batches counts each time
            assert meta["output_rows"] >= rows > 0, spec.name
        state = {k: v for k, v in meta.items() if k.startswith("state_rows/")}
        assert state and all(isinstance(v, int) and v >= 0 for v in state.values()), (spec.name, state)
        assert meta["watermark"].startswith("2026-01-01T"), (spec.name, meta["watermark"])
        assert 0 < meta["median_batch_ms"] <= meta["max_batch_ms"], spec.name
        with open(f"{spec.checkpoint_path(layout)}/metadata") as handle:
            assert meta["query_id"] == json.loads(handle.readline())["id"], spec.name
        recorded = progress.read(layout, spec.name).column("stateops_run_id").to_pylist()
        assert recorded and set(recorded) == {result.run_id} == {meta["stateops_run_id"]}, spec.name

    # A continuous run with nothing new to read stops after max_seconds and changes nothing.
    spec = SPECS["user_activity"]
    version = DeltaTable(layout.table(spec.sink_table)).version()
    config = {"ops": {spec.sink_table: {"config": {"mode": "continuous", "max_seconds": 3}}}}
    again = materialize([a for a in job_assets if a.key.path == [spec.sink_table]], resources=resources,
                        run_config=config, instance=dagster_instance)
    assert again.success
    meta = _metadata(again, spec.sink_table)
    assert meta["batches"] == 0 and meta["output_rows"] == 0
    assert meta["delta_version"] == version


def test_max_seconds_in_bounded_mode_is_refused_before_spark_starts(layout, dagster_instance):
    asset = job_assets[0]
    config = {"ops": {asset.op.name: {"config": {"max_seconds": 5}}}}
    result = materialize([asset], resources=default_resources(), run_config=config,
                         instance=dagster_instance, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.to_string()
    assert "max_seconds" in message and "continuous" in message


def _observations(instance, run_id: str, key: list[str]) -> list[dict]:
    return [{k: v.value for k, v in e.dagster_event.event_specific_data.asset_observation.metadata.items()}
            for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_OBSERVATION)
            if e.dagster_event.asset_key.path == key]


@pytest.mark.long  # the default run: a bounded materialization's observations per micro-batch (above), a continuous CLI run's lease (test_control_runner)
def test_a_continuous_run_reports_each_batch_in_its_event_log_while_it_runs(layout, spark):
    """Read from the instance by another thread while the run goes on: one observation per micro-batch,
    before the run's materialization, with the batch's numbers (oracle: the landing files' line counts)."""
    generated = generate(layout, GeneratorConfig(events=300, files=3, users=40, minutes_per_file=30, seed=29))
    lines = [len(open(path).read().splitlines()) for path in generated.files["events"]]
    spec = SPECS["user_activity"]
    asset = [a for a in job_assets if a.key.path == [spec.sink_table]]
    config = {"ops": {spec.sink_table: {"config": {"mode": "continuous", "max_seconds": 900}}}}
    with instance_for_test() as instance:  # on disk: this thread reads what the run's thread writes
        outcome = {}
        runner = threading.Thread(target=lambda: outcome.update(result=materialize(
            asset, resources=default_resources(), run_config=config, instance=instance, raise_on_error=False)))
        runner.start()
        try:
            deadline, seen = time.monotonic() + 600, []
            while len(seen) < len(lines) and runner.is_alive() and time.monotonic() < deadline:
                time.sleep(1)
                runs = instance.get_runs()
                if runs:
                    seen = _observations(instance, runs[0].run_id, [spec.sink_table])
            (run,) = instance.get_runs()
            assert runner.is_alive() and run.status == DagsterRunStatus.STARTED, "the run ended before it reported"
            assert not instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        finally:
            request_stop(layout, spec.name, actor="test", reason="progress seen", settings=ControlSettings.from_env())
            runner.join(timeout=600)
    result = outcome["result"]
    assert result.success
    assert [o["batch"] for o in seen] == list(range(len(lines)))
    assert [o["input_rows"] for o in seen] == lines
    assert all(o["state_rows"] > 0 for o in seen), seen
    assert [o["watermark"][:10] for o in seen] == ["1970-01-01"] + ["2026-01-01"] * (len(lines) - 1), seen
    assert all(datetime.fromisoformat(o["batch_time"].replace("Z", "+00:00")) and o["batch_ms"] > 0 for o in seen)
    assert _metadata(result, spec.sink_table)["batches"] == len(lines)
