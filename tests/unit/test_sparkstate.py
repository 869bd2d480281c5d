"""How the audit and explain-key split a checkpoint's stores into what Spark's state reader reads on its own
(stateops.sparkstate.readable_units), from state-metadata rows written here."""
from __future__ import annotations

import json

import pytest

from stateops.sparkstate import readable_units

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
