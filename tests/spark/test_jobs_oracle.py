"""Each job's Delta table equals the batch recomputation (tests/support/oracle.py) over the same input,
including late, duplicate and malformed events from the generator, and poison timestamps: rows stamped in
2099 from the second file on, which used to move the watermark and silently drop every row from the fourth
file on. They are dead letters now, and the later windows, sessions, pairs and rows reach the tables."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from stateops.jobs.definition.environment import load_jobs, read_settings
from stateops.jobs.runtime.runner import run_job
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.layout import Layout
from stateops.profile.report import profiles
from tests.support.scenarios import ORACLE_INPUT
from tests.support import oracle
from tests.support.delta_rows import table_rows
from tests.support.delta_writers import spark_writer_in_long_tier

pytestmark = pytest.mark.spark

INPUT = ORACLE_INPUT
# Event time where the fourth file starts: with the poison rows admitted, nothing from here on was emitted.
LATER_MS = round((datetime.fromisoformat(INPUT.start) + timedelta(minutes=3 * INPUT.minutes_per_file))
                 .timestamp() * 1000)


def _run(spark, layout: Layout, name: str):
    spec = load_jobs()[name]
    return spec, run_job(spark, spec, layout, settings=read_settings())


def _check_parts(layout: Layout, name: str) -> None:
    """The run's batches have their time in parts (stateops.profile.parts) that add up to Spark's duration, the
    unexplained rest of the median batch under 15% of it."""
    batches = profiles(layout, name, batches=INPUT.files)
    assert len(batches) == INPUT.files and all(b["parts"] for b in batches), batches
    for batch in batches:
        assert abs(sum(batch["parts"].values()) - batch["duration_ms"]) <= len(batch["parts"]), batch
    median = sorted(batches, key=lambda b: b["duration_ms"])[len(batches) // 2]
    assert median["parts"]["rest"] <= 0.15 * median["duration_ms"], median
    assert {f"state_updates:{op['operator']}" for op in median["operators"]} <= set(median["parts"]), median


def _check_poison_dead_letters(layout: Layout, spec) -> None:
    """Every poison row is a dead letter whose reason names the column, its time and the tolerance."""
    dead = table_rows(layout.deadletter_table(spec.name), ["input", "raw", "error"])
    poison = sorted((source, raw) for source, raw, error in dead if "future_tolerance" in error)
    expected = sorted((i.name, raw) for i in spec.inputs for raw in oracle.future_lines(layout.landing(i.name), i.name))
    assert expected and poison == expected
    columns = {i.name: i.time_column for i in spec.inputs}
    for source, raw, error in dead:
        if "future_tolerance" in error:
            assert error.startswith(f"{columns[source]} 2099-"), error
            assert "is more than future_tolerance (1 day) ahead of its arrival" in error, error
            assert json.loads(raw)[columns[source]].startswith("2099-")


@spark_writer_in_long_tier()  # the MERGE job on the Spark writer in the default run: test_kill_restart, test_kafka_faults
def test_user_activity_matches_oracle(spark, oracle_home):
    spec, result = _run(spark, oracle_home, "user_activity")
    got = table_rows(oracle_home.table("user_activity"),
                     ["window_start", "window_end", "user_id", "events", "value_sum"])
    assert len(got) == len(set(got)), "MERGE must leave one row per window and user"
    expected = oracle.user_activity(oracle.typed_batches(oracle_home.landing("events"), "events"),
                                    spec.watermark_seconds * 1000)
    assert set(got) == expected
    assert any(row[0] >= LATER_MS for row in expected), "windows from the fourth file on"
    assert result.batches == INPUT.files
    _check_poison_dead_letters(oracle_home, spec)
    _check_parts(oracle_home, "user_activity")
    # The generator's too-late events were really dropped by the watermark (not a vacuous pass).
    all_rows = sum(len(b) for b in oracle.typed_batches(oracle_home.landing("events"), "events"))
    assert sum(row[3] for row in expected) < all_rows


@spark_writer_in_long_tier()
def test_user_sessions_matches_oracle(spark, oracle_home):
    spec, _ = _run(spark, oracle_home, "user_sessions")
    got = table_rows(oracle_home.table("user_sessions"), ["session_start", "session_end", "user_id", "events",
                                                   "first_event_time", "last_event_time"])
    expected = oracle.user_sessions(oracle.typed_batches(oracle_home.landing("events"), "events"),
                                    spec.watermark_seconds * 1000)
    assert len(expected) > 50 and any(row[0] >= LATER_MS for row in expected), "sessions from the fourth file on"
    assert sorted(got) == sorted(expected)
    _check_poison_dead_letters(oracle_home, spec)
    _check_parts(oracle_home, "user_sessions")


@spark_writer_in_long_tier()  # the Spark writer's appends in the default run: test_delta_engines, and the
# dead letters of test_kill_restart [user_activity-spark] (appended by it, a whole run and its restart)
def test_order_payments_matches_oracle(spark, oracle_home):
    spec, _ = _run(spark, oracle_home, "order_payments")
    got = table_rows(oracle_home.table("order_payments"), ["order_id", "payment_id", "order_time", "payment_time"])
    expected = oracle.order_payments(oracle.typed_batches(oracle_home.landing("orders"), "orders"),
                                     oracle.typed_batches(oracle_home.landing("payments"), "payments"),
                                     spec.watermark_seconds * 1000)
    assert sorted(got) == sorted(expected)
    assert any(row[2] >= LATER_MS for row in expected), "pairs from the fourth file on"
    _check_poison_dead_letters(oracle_home, spec)
    _check_parts(oracle_home, "order_payments")
    cases = {order_id for order_id, *_ in got}
    assert len(cases) == len(got), "an order is paid once"
    assert 0 < len(got) < INPUT.orders, "some orders must stay unmatched (never paid, late, out of bounds)"


@spark_writer_in_long_tier()
def test_user_actions_matches_oracle(spark, oracle_home):
    spec, _ = _run(spark, oracle_home, "user_actions")
    got = table_rows(oracle_home.table("user_actions"),
                     ["user_id", "action_count", "last_action", "first_event_time", "last_event_time"])
    expected = oracle.user_actions(oracle.typed_batches(oracle_home.landing("events"), "events"),
                                   spec.watermark_seconds * 1000)
    assert len(expected) > 20 and any(row[3] >= LATER_MS for row in expected), "rows from the fourth file on"
    assert sorted(got) == sorted(expected)
    _check_poison_dead_letters(oracle_home, spec)
    _check_parts(oracle_home, "user_actions")


@spark_writer_in_long_tier()
def test_malformed_lines_go_to_dead_letters_and_valid_rows_are_unaffected(spark, oracle_home):
    _run(spark, oracle_home, "user_activity")  # the first run (or nothing new when an earlier test of the module ran it)
    spec, result = _run(spark, oracle_home, "user_activity")  # a second run: nothing new, nothing rewritten
    assert result.output_rows == 0 and result.deadletter_rows == 0
    dead = table_rows(oracle_home.deadletter_table("user_activity"), ["input", "raw", "error", "batch_id"])
    expected = oracle.malformed_count(oracle_home.landing("events"), "events")
    assert expected > 0 and len(dead) == expected
    assert all(error and raw for _, raw, error, _ in dead)
    assert {batch for *_, batch in dead} <= set(range(INPUT.files))


@pytest.mark.long  # the default run: the partitions a rebuild gives a checkpoint (tests/unit/test_recovery_preflight.py)
@spark_writer_in_long_tier()
def test_spec_shuffle_partitions_apply_to_a_new_checkpoint(spark, oracle_home):
    spec = replace(load_jobs()["user_actions"], shuffle_partitions=3, sink_table="user_actions_p3",
                   checkpoint=oracle_home.checkpoint("user_actions_p3"))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    run_job(spark, spec, oracle_home, settings=read_settings())
    checkpoint = Checkpoint.open(spec.checkpoint)
    assert checkpoint.shuffle_partitions(checkpoint.latest_committed_batch()) == 3
    assert spark.conf.get("spark.sql.shuffle.partitions") == before, "the job's count stays out of the session"
    assert {f.partition_id for f in checkpoint.state_files()} == {0, 1, 2}


@spark_writer_in_long_tier()
def test_untracked_state_rows_are_recorded_as_unknown(spark, oracle_home):
    """RocksDB's trackTotalNumberOfRows off (a user's STATEOPS_SPARK_CONF): the job's output still equals the
    oracle, Spark reports numRowsTotal 0, and StateOps records the rows as unknown (null), never as an empty
    state; Spark's state reader (the deep audit) still counts them."""
    from stateops import progress as progress_table
    from stateops.audit import deep_audit
    from stateops.jobs.runtime.session import TRACK_ROWS, state_rows_tracked

    spec = replace(load_jobs()["user_sessions"], sink_table="user_sessions_untracked",
                   checkpoint=oracle_home.checkpoint("user_sessions_untracked"))
    spark.conf.set(TRACK_ROWS, "false")
    try:
        assert not state_rows_tracked(spark)
        seen = []
        result = run_job(spark, spec, oracle_home, settings=read_settings(), on_progress=seen.append)
    finally:
        spark.conf.unset(TRACK_ROWS)
    assert state_rows_tracked(spark)
    got = table_rows(oracle_home.table(spec.sink_table),
                     ["session_start", "session_end", "user_id", "events", "first_event_time",
                      "last_event_time"])
    assert set(got) == oracle.user_sessions(oracle.typed_batches(oracle_home.landing("events"), "events"),
                                            spec.watermark_seconds * 1000)
    assert [op["num_rows_total"] for op in result.state_operators] == [None]
    assert seen and all(op["numRowsTotal"] is None for p in seen for op in p["stateOperators"])
    recorded = [r for r in progress_table.read(oracle_home, spec.name).to_pylist() if r["query_id"] == result.query_id]
    assert recorded and all(r["state_rows_total"] is None for r in recorded)
    assert any(r["state_rows_updated"] for r in recorded)
    kept = [op for r in recorded for op in json.loads(r["state_operators_json"])]  # Spark's own times (SLOW_*)
    assert all(isinstance(op[name], int) for op in kept
               for name in ("commit_time_ms", "all_updates_time_ms", "all_removals_time_ms", "num_rows_removed"))
    assert any(op["commit_time_ms"] > 0 for op in kept) and any(op["all_updates_time_ms"] > 0 for op in kept)
    [op] = deep_audit(spark, spec.checkpoint).operators
    assert op.rows_total > 0  # the state holds rows: the zero Spark reported was not a count
