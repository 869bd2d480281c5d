"""How the audit and explain-key split a checkpoint's stores into what Spark's state reader reads on its own
(stateops.checkpoints.sparkstate.readable_units), from state-metadata rows written here."""
from __future__ import annotations

import json

import pytest

from stateops.checkpoints.sparkstate import join_state_format, readable_units

pytestmark = pytest.mark.unit


def test_plain_stores_are_read_whole_by_name():
    assert readable_units(0, "default", None) == [("default", (("operatorId", "0"),))]
    assert readable_units(2, "left-keyToNumValues", "") == [
        ("left-keyToNumValues", (("operatorId", "2"), ("storeName", "left-keyToNumValues")))]


def test_transform_with_state_is_read_per_variable_without_its_timers():
    properties = json.dumps({"stateVariables": [
        {"stateName": "totals", "stateVariableType": "ValueState"},
        {"stateName": "by_action", "stateVariableType": "MapState"},
        {"stateName": "$procTimers_keyToTimestamp", "stateVariableType": "TimerState"},
        {"stateName": "$ttl_totals", "stateVariableType": "ValueState"}]})
    assert readable_units(1, "default", properties) == [
        ("totals", (("operatorId", "1"), ("stateVarName", "totals"))),
        ("by_action", (("operatorId", "1"), ("stateVarName", "by_action")))]


def test_unreadable_properties_read_the_store_whole():
    assert readable_units(1, "default", "{not json") == [("default", (("operatorId", "1"),))]


def test_a_joins_column_families_are_read_one_by_one_by_its_state_format():
    """Formats 3 and 4 keep a join's state in one store (`default`) of column families; the values stores of format
    4 carry the rows (their time index holds none of its own)."""
    properties = '{"useVirtualColumnFamilies":true}'
    assert readable_units(0, "default", properties, "symmetricHashJoin", 4) == [
        ("left-keyWithTsToValues", (("operatorId", "0"), ("storeName", "left-keyWithTsToValues"))),
        ("right-keyWithTsToValues", (("operatorId", "0"), ("storeName", "right-keyWithTsToValues")))]
    assert [label for label, _ in readable_units(0, "default", properties, "symmetricHashJoin", 3)] == [
        "left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    assert readable_units(0, "left-keyToNumValues", None, "symmetricHashJoin", 2) == [
        ("left-keyToNumValues", (("operatorId", "0"), ("storeName", "left-keyToNumValues")))]
    assert join_state_format({}) == 1 and join_state_format({"spark.sql.streaming.join.stateFormatVersion": "4"}) == 4
