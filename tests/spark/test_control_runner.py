"""The runner under the control plane, on real Spark: a stop request lets the batch in flight complete, a
batch that never ends is stopped after the grace period, a run that loses its lease stops its queries,
and the overrides in force are applied at the next start (seen in the checkpoint's offset log).

Oracles: the checkpoint's offset and commit logs, the landing files (tests/support/oracle.py), the Delta table."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest
from click.testing import CliRunner
from pyspark.sql import functions as F

from stateops.jobs.definition.environment import get_job, read_settings
from stateops.jobs.examples.builtin import EVENTS
from stateops.cli.main import main
from stateops.jobs.definition.spec import JobSpec
from stateops.jobs.demo.generator import GeneratorConfig, generate
from stateops.jobs.runtime.runner import run_job
from stateops import actions
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.control import LeaseLostError, WatermarkBounds, current_lease, request_stop
from stateops.control import overrides
from stateops.control.store import ControlStore
from stateops.control import ControlSettings
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.trees import file_hashes

pytestmark = pytest.mark.spark

JOB = "user_activity"
DEADLINE = 300


class Background:
    """run_job in a thread; `result()` re-raises what the run raised."""

    def __init__(self, **kwargs):
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._run, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, **kwargs):
        try:
            self.outcome["result"] = run_job(**kwargs, settings=read_settings())
        except BaseException as err:  # noqa: BLE001 - handed to the test thread
            self.outcome["error"] = err

    def result(self):
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the run did not end"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["result"]


def _wait_for(condition, what: str):
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _in_flight(checkpoint: str) -> int | None:
    """A batch planned in the offset log and not yet committed."""
    try:
        cp = Checkpoint(checkpoint)
        pending = set(cp.offset_batches()) - set(cp.committed_batches())
    except FileNotFoundError:
        return None
    return min(pending) if pending else None


def test_stop_request_lets_the_batch_in_flight_complete(spark, layout):
    generate(layout, GeneratorConfig(events=1200, files=4, users=120, duplicate_share=0.05, late_share=0.05,
                                     minutes_per_file=15, seed=71))
    spec = get_job(JOB)
    checkpoint = spec.checkpoint_path(layout)
    run = Background(spark=spark, spec=spec, layout=layout, mode="continuous", poll_seconds=0.2)
    _wait_for(lambda: _in_flight(checkpoint) is not None, "a batch in flight")
    batch = _in_flight(checkpoint)
    assert request_stop(layout, JOB, actor="test", reason="graceful", grace_seconds=DEADLINE,
                        settings=ControlSettings.from_env()) is not None

    result = run.result()
    assert result.stop_reason == "stop_request" and not result.hard_stopped
    committed = Checkpoint(checkpoint).committed_batches()
    assert batch in committed, "the batch in flight when the stop came completed"
    assert current_lease(layout, JOB) is None, "the lease is released"
    assert ControlStore(layout, JOB).read("stop") is None, "the stop request is cleared"
    # The table equals the oracle over exactly the files of the committed batches.
    files = {os.path.basename(path) for path, b in Checkpoint(checkpoint).source_files()[0] if b <= committed[-1]}
    batches = [b for b, name in zip(oracle.typed_batches(layout.landing("events"), "events"),
                                    sorted(os.listdir(layout.landing("events")))) if name in files]
    assert len(batches) == len(files) >= 1
    got = table_rows(layout.table(JOB), ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert sorted(got) == sorted(oracle.user_activity(batches, spec.watermark_seconds * 1000))
    (done,) = actions.read(layout, JOB, "stop")
    assert done["actor"] == "test" and done["details"]["interrupted_batch"] is False


def sleepy(events):
    """Every batch sleeps ten minutes in a Python UDF: a query that does not stop by itself."""
    @F.udf("string")
    def slow(value):
        import time as clock
        clock.sleep(600)
        return value

    return events.select(slow("event_id").alias("event_id"), "event_time").dropDuplicatesWithinWatermark(
        ["event_id"])


def test_a_batch_that_does_not_finish_is_stopped_after_the_grace_period(spark, layout):
    spec = JobSpec(name="sleepy", inputs=(EVENTS,), transformation=f"{__name__}:sleepy", output_mode="append",
                   sink_table="sleepy", watermark_delay="10 minutes", watermark_min="1 minute",
                   watermark_max="1 hour", shuffle_partitions=2)
    generate(layout, GeneratorConfig(events=20, files=1, users=5, seed=3))
    checkpoint = spec.checkpoint_path(layout)
    run = Background(spark=spark, spec=spec, layout=layout, mode="continuous", poll_seconds=0.2)
    _wait_for(lambda: _in_flight(checkpoint) is not None, "the sleeping batch")
    request_stop(layout, "sleepy", actor="test", grace_seconds=2, settings=ControlSettings.from_env())

    result = run.result()
    assert result.stop_reason == "stop_request" and result.hard_stopped
    assert Checkpoint(checkpoint).committed_batches() == [], "the sleeping batch was interrupted, not committed"
    assert not [q for q in spark.streams.active if q.name == "sleepy"]
    assert current_lease(layout, "sleepy") is None
    (done,) = actions.read(layout, "sleepy", "stop")
    assert done["details"]["interrupted_batch"] is True


def test_a_run_that_loses_its_lease_stops_its_queries(spark, layout):
    generate(layout, GeneratorConfig(events=300, files=2, users=30, seed=5))
    spec = get_job(JOB)
    run = Background(spark=spark, spec=spec, layout=layout, mode="continuous", poll_seconds=0.2)
    _wait_for(lambda: Checkpoint(spec.checkpoint_path(layout)).committed_batches() if
              os.path.exists(f"{spec.checkpoint_path(layout)}/commits") else False, "a committed batch")
    mine = current_lease(layout, JOB)
    store = ControlStore(layout, JOB)
    with store.critical():  # what a takeover from another host looks like on disk
        store.write("lease", {**mine.to_dict(), "lease_id": "other", "run_id": "other-run", "host": "elsewhere",
                              "pid": 1})

    with pytest.raises(LeaseLostError, match="lost its lease .*other-run"):
        run.result()
    assert not [q for q in spark.streams.active if q.name in (JOB, f"{JOB}__deadletter")]
    assert current_lease(layout, JOB).run_id == "other-run", "the new holder's lease is left alone"


def _max_event_ms_before(checkpoint: Checkpoint, batch: int) -> int:
    """Largest event time in the files of batches before `batch` (from the landing files)."""
    paths = [path for path, b in checkpoint.source_files()[0] if b < batch]
    return max(row["t"] for path in paths for row in oracle.file_rows(path.removeprefix("file:"), "events"))


def test_overrides_in_force_are_applied_at_the_next_start(spark, layout):
    spec = get_job(JOB)
    bounds = WatermarkBounds(spec.watermark_min, spec.watermark_max)
    overrides.set_override(layout, JOB, "shuffle_partitions", 3, bounds=bounds, reason="new checkpoint", actor="t")
    generate(layout, GeneratorConfig(events=400, files=3, users=40, minutes_per_file=15, seed=8))
    run_job(spark, spec, layout, settings=read_settings())
    checkpoint = Checkpoint.open(spec.checkpoint_path(layout))
    first_run = checkpoint.offset_batches()
    last = first_run[-1]
    assert checkpoint.shuffle_partitions(last) == 3, "the override applies to a new checkpoint"
    assert checkpoint.batch_metadata(last)["batchWatermarkMs"] == _max_event_ms_before(checkpoint, last) - 10 * 60_000

    overrides.set_override(layout, JOB, "watermark_delay", "30 minutes", bounds=bounds, reason="late data",
                           actor="alice")
    overrides.set_override(layout, JOB, "shuffle_partitions", 5, bounds=bounds, reason="too late", actor="t")
    generate(layout, GeneratorConfig(events=400, files=3, users=40, minutes_per_file=15, seed=9,
                                     start="2026-01-01T03:00:00+00:00"))
    run_job(spark, spec, layout, settings=read_settings())
    second_run = [b for b in checkpoint.offset_batches() if b not in first_run]
    last = second_run[-1]
    assert len(second_run) >= 3
    watermark = checkpoint.batch_metadata(last)["batchWatermarkMs"]
    assert watermark == _max_event_ms_before(checkpoint, last) - 30 * 60_000, "the 30-minute delay is in force"
    assert all(checkpoint.shuffle_partitions(b) == 3 for b in second_run), "a checkpoint keeps its partitions"

    described = json.loads(CliRunner().invoke(main, ["--home", layout.home, "jobs", "describe", JOB, "--json"]).output)
    delay = described["settings"]["watermark_delay"]
    assert (delay["value"], delay["source"], delay["actor"], delay["reason"]) == ("30 minutes", "override", "alice",
                                                                                  "late data")
    assert described["watermark"]["delay"] == "30 minutes"
    partitions = described["settings"]["shuffle_partitions"]
    assert (partitions["value"], partitions["source"], partitions["in_checkpoint"]) == (5, "override", 3)


def test_a_finished_run_leaves_no_writer_in_its_checkpoint(spark, layout):
    """Spark's state store maintenance uploads a RocksDB snapshot into a stopped query's checkpoint on its
    next round: with a round every 2 s and a snapshot after every delta, the last batch's snapshot would be
    uploaded after run_job returned (and a runbook archiving it would copy a moving tree). Oracle: sha256 of every
    file of the checkpoint, 5 s apart."""

    generate(layout, GeneratorConfig(events=600, files=6, users=40, minutes_per_file=15, seed=72))
    spec = get_job(JOB)
    settings = {"spark.sql.streaming.stateStore.maintenanceInterval": "2s",
                "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"}
    before = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        run_job(spark, spec, layout, settings=read_settings(), mode="bounded")
        after_run = file_hashes(spec.checkpoint_path(layout))
        time.sleep(5)
        assert file_hashes(spec.checkpoint_path(layout)) == after_run
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
