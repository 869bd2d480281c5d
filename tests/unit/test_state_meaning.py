"""What a run keeps of its state's meaning (jobs/runtime/compatibility.py): written per checkpoint query beside the
job's other records, read back only for the same query, an older run's join keys read where that is all it kept,
and a change of what produced a stored value found at the operator it happened in. No JVM: the planned query's
part (state_schemas.value_meanings) is the Spark tests' (tests/spark/test_state_compatibility.py)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from stateops.jobs.runtime.compatibility import (COMPATIBLE, UNDECIDED, StateFit, _changed_values, kept_meaning,
                                                 remember_meaning)
from stateops.jobs.runtime.state_schemas import StoreSchema

pytestmark = pytest.mark.unit

JOB = "clicks"
VALUES = {"0": ["count(1)", "max(value)", "min(value)"]}
JOINS = {"1": "order_id = order_id"}
SHAPES = [{"operator_id": 0, "operator_name": "stateStoreSave", "kind": "aggregation", "keys": []}]


def _fit(status: str = COMPATIBLE) -> StateFit:
    return StateFit(JOB, "/cp", status, join_keys=JOINS, values=VALUES, shapes=SHAPES)


def test_a_run_keeps_its_querys_meaning_and_only_that_query_reads_it_back(layout):
    remember_meaning(layout, JOB, "q1", _fit(), "10 minutes")
    kept = json.loads(open(layout.state_meaning(JOB)).read())
    assert kept == {"query_id": "q1", "joins": JOINS, "values": VALUES, "shapes": SHAPES,
                    "watermark_delay": "10 minutes"}
    assert kept_meaning(layout, JOB, "q1") == kept
    assert kept_meaning(layout, JOB, "q2") == {}, "another checkpoint's query (rebuilt, restored) reads nothing"
    remember_meaning(layout, JOB, "q1", _fit(UNDECIDED))  # not planned: what is kept stays
    assert kept_meaning(layout, JOB, "q1") == kept


def test_an_older_runs_join_keys_are_read_and_replaced_by_the_next_record(layout):
    os.makedirs(os.path.dirname(layout.legacy_join_keys(JOB)), exist_ok=True)
    with open(layout.legacy_join_keys(JOB), "w") as handle:
        json.dump({"query_id": "q1", "joins": JOINS}, handle)
    assert kept_meaning(layout, JOB, "q1") == {"query_id": "q1", "joins": JOINS}, "no `values`: the check says so"
    remember_meaning(layout, JOB, "q1", _fit())
    assert not os.path.exists(layout.legacy_join_keys(JOB))
    assert kept_meaning(layout, JOB, "q1")["values"] == VALUES


def test_a_changed_value_is_found_at_its_operator_and_named_old_to_new():
    stored = [StoreSchema(0, "stateStoreSave", "default", "struct<...>", "struct<...>", ("window", "user_id"))]
    assert _changed_values(stored, VALUES, VALUES) is None
    assert _changed_values(stored, VALUES, {"0": ["count(1)", "min(value)", "max(value)"]}) == (
        "operator 0 (stateStoreSave)",
        "value fields (count(1), max(value), min(value)) -> (count(1), min(value), max(value))")
    assert _changed_values(stored, VALUES, {"2": ["sum(value)"]}) is None, "an operator with nothing kept"


def test_a_partial_migrations_debt_warns_the_state_check_until_it_is_settled():
    """`state_compatible` (orchestration/audits/checks.py): a query that fits passes; with a partial migration's
    windows still in the state it warns, naming the debt; once the watermark settled it, it passes again."""
    from dagster import AssetCheckSeverity

    from stateops.dagster.audits.checks import compatibility_result
    from stateops.migration.debt import Debt

    owed = Debt("clicks-1", "q1", {"batch": 5, "complete_from": "2026-01-01T01:00:00+00:00",
                                   "settled_at_watermark_ms": 2_000}, ("add_aggregate at operator 0",))
    assert compatibility_result(_fit()).passed
    warned = compatibility_result(replace(_fit(), debt=owed.to_dict(1_000)))
    assert not warned.passed and warned.severity == AssetCheckSeverity.WARN
    assert "migration clicks-1 is partial (add_aggregate at operator 0): complete from batch 5" in warned.description
    assert "until the watermark reaches 2000 ms (now 1000 ms)" in warned.description
    settled = compatibility_result(replace(_fit(), debt=owed.to_dict(2_000)))
    assert settled.passed and "is partial" not in settled.description
    never = Debt("clicks-1", "q1", {"batch": 5, "complete_from": "x", "settled_at_watermark_ms": None}, ("a",))
    assert not never.settled(10**15) and "no watermark evicts them" in never.line(0)
