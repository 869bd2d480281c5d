"""A batch's parts from its progress event and the writer's laps (stateops.profile.parts), and the profiles read back
from the progress table (stateops.profile.report): pure logic and a real Delta table, no JVM. The same parts from
real Spark runs: tests/spark/test_batch_parts.py."""
from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from stateops import progress
from stateops.delta import append_rows
from stateops.profile.parts import BEGAN_AT, Laps, attribute, largest
from stateops.profile.report import profiles, render

pytestmark = pytest.mark.unit

TRIGGER_AT_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _event(batch_id: int = 3, *, add_batch: int = 900, duration: int = 1000, operators=None) -> dict:
    return {"name": "job", "id": "q", "runId": "r", "batchId": batch_id, "timestamp": "2026-01-01T00:00:00.000Z",
            "numInputRows": 10, "batchDuration": duration,
            "durationMs": {"latestOffset": 10, "getBatch": 5, "walCommit": 15, "queryPlanning": 50,
                           "addBatch": add_batch, "commitOffsets": 10, "triggerExecution": duration},
            "stateOperators": operators if operators is not None else [
                {"operatorName": "dedupeWithinWatermark", "numShufflePartitions": 4, "allUpdatesTimeMs": 400,
                 "allRemovalsTimeMs": 40, "commitTimeMs": 80, "numRowsTotal": 5, "numRowsUpdated": 5}]}


def _laps(handed_over_after_ms: float = 100.0, **laps: float) -> dict:
    return {BEGAN_AT: TRIGGER_AT_MS + handed_over_after_ms, **laps}


def test_the_parts_add_up_to_the_duration_and_split_the_plans_run_by_the_operators_task_time():
    parts = attribute(_event(), _laps(plan_run=500, sink_write=200, dead_letters=20), cores=2)
    assert sum(parts.values()) == 1000
    # 4 partitions on 2 cores: the task times over 2
    assert parts["state_updates:dedupeWithinWatermark"] == 200 and parts["state_eviction:dedupeWithinWatermark"] == 20
    assert parts["state_commit"] == 40 and parts["read_parse"] == 500 - 260
    assert (parts["planning"], parts["offsets"], parts["log"]) == (50, 15, 25)
    assert (parts["sink_write"], parts["dead_letters"]) == (200, 20)
    # handed over 100 ms after the trigger began: 100 - (offsets 15 + walCommit 15 + planning 50)
    assert parts["handover"] == 20
    assert parts["rest"] == 1000 - sum(v for k, v in parts.items() if k != "rest")
    assert largest(parts) == "read_parse"


def test_operators_that_claim_more_than_the_plans_run_are_scaled_into_it():
    parts = attribute(_event(), _laps(plan_run=100, sink_write=10), cores=8)
    state = sum(v for k, v in parts.items() if k.startswith("state_"))
    assert parts["read_parse"] == 0 and 99 <= state <= 101
    assert sum(parts.values()) == 1000


def test_without_the_writers_laps_the_whole_add_batch_is_the_plans_run():
    parts = attribute(_event(), None, cores=2)
    assert "handover" not in parts and parts["sink_write"] == 0 and parts["dead_letters"] == 0
    assert parts["read_parse"] + sum(v for k, v in parts.items() if k.startswith("state_")) == 900
    assert sum(parts.values()) == 1000


def test_two_operators_of_one_name_are_numbered_and_a_query_without_state_has_none():
    twice = {"operatorName": "dedupe", "numShufflePartitions": 1, "allUpdatesTimeMs": 10}
    parts = attribute(_event(operators=[twice, twice]), None, cores=2)
    assert {"state_updates:dedupe#1", "state_updates:dedupe#2"} <= set(parts)
    bare = attribute(_event(operators=[]), None, cores=2)
    assert bare["state_commit"] == 0 and not [k for k in bare if k.startswith("state_updates")]


def test_a_handover_is_never_negative_nor_more_than_add_batch_leaves():
    assert attribute(_event(), _laps(0.0, plan_run=500), cores=2)["handover"] == 0
    assert attribute(_event(), _laps(5000.0, plan_run=500), cores=2)["handover"] == 900 - 500


def test_laps_add_up_per_name_and_are_taken_once():
    laps = Laps()
    laps.begin(7)
    time.sleep(0.02)
    laps.lap("plan_run")
    laps.lap("dead_letters")
    time.sleep(0.01)
    laps.lap("dead_letters")
    laps.end()
    taken = laps.take(7)
    assert taken["plan_run"] >= 20 and 10 <= taken["dead_letters"] < taken["plan_run"]
    assert abs(taken[BEGAN_AT] - time.time() * 1000) < 5000
    assert laps.take(7) is None


def test_laps_keep_only_the_newest_batches_never_taken():
    laps = Laps()
    for batch in range(Laps.KEPT + 5):
        laps.begin(batch)
        laps.end()
    assert laps.take(0) is None and laps.take(Laps.KEPT + 4) is not None


def _row(batch_id: int, *, ran: bool = True, parts: bool = True) -> dict:
    event = _event(batch_id)
    if not ran:
        event["durationMs"] = {"latestOffset": 3, "triggerExecution": 3}
    if parts:
        event["stateopsParts"] = attribute(event, None, cores=2)
    return progress.progress_row(event, "job", "run")


def test_profiles_are_the_batches_that_ran_newest_last_and_rows_before_the_parts_have_none(tmp_path):
    from stateops.layout import Layout

    layout = Layout(str(tmp_path / "home"))
    old = pa.schema([f for f in progress.SCHEMA if f.name != "parts_json"])  # a table written before the parts
    first = {k: v for k, v in _row(0, parts=False).items() if k != "parts_json"}
    append_rows(layout.ops_table(progress.TABLE), pa.Table.from_pylist([first], schema=old))
    progress.append(layout, [_row(1), _row(2, ran=False), _row(3), _row(4)])
    found = profiles(layout, "job", batches=3)
    assert [b["batch_id"] for b in found] == [1, 3, 4]  # batch 2 found nothing new: no batch ran
    assert [b["batch_id"] for b in profiles(layout, "job", batches=10)] == [0, 1, 3, 4]
    everything = profiles(layout, "job", batches=10)
    assert everything[0]["parts"] is None and everything[1]["parts"]["state_commit"] == 40
    (op,) = everything[1]["operators"]
    assert (op["operator"], op["update_ms"], op["removal_ms"], op["commit_ms"]) == (
        "dedupeWithinWatermark", 400, 40, 80)
    json.dumps(everything)  # the CLI's --json
    text = render("job", everything)
    assert text.startswith("job: 4 batches (0..4), median 1,000 ms") and "read_parse" in text
    assert render("job", everything[:1]).count("no batch has its parts") == 1
    assert render("job", []) == "job: no batch recorded (run it: stateops jobs run job)"


def test_the_batchs_observation_carries_its_parts_as_numbers_dagster_plots():
    from orchestration.streaming_jobs.assets import progress_metadata

    event = _event()
    assert not any(k.startswith("part_ms/") for k in progress_metadata(event))  # not recorded by StateOps
    event["stateopsParts"] = attribute(event, _laps(plan_run=500, sink_write=200), cores=2)
    meta = progress_metadata(event)
    assert {k[len("part_ms/"):]: v for k, v in meta.items() if k.startswith("part_ms/")} == event["stateopsParts"]
    assert all(isinstance(v, int) for k, v in meta.items() if k.startswith("part_ms/"))
