"""An input's schema read from Spark's DDL without a JVM (stateops.jobs.definition.schema_ddl): what it reads, and each
refusal naming the column and the fix. tests/spark/test_line_parser.py holds what it reads to Spark's own parser."""
from __future__ import annotations

import pytest

from stateops.errors import ConfigError
from stateops.jobs.definition.schema_ddl import parse_schema
from tests.support.schema_forms import READ

pytestmark = pytest.mark.unit

@pytest.mark.parametrize("ddl,columns", READ)
def test_every_form_of_spark_ddl_a_json_input_uses_is_read(ddl, columns):
    assert parse_schema(ddl, "jobs.x.inputs.events.schema") == columns


@pytest.mark.parametrize("ddl,words", [
    ("event_id STRNG, event_time TIMESTAMP", "'strng' is not a type"),
    ("a STRUCT<b INT", "cannot read column definition 'a STRUCT<b INT'"),
    ("a ARRAY<INT>>, b INT", "unexpected '>'"),
    ("a MAP<STRING>", "cannot read column definition 'a MAP<STRING>'"),
    ("a INT, a LONG", "column 'a' is defined twice"),
    ("a DECIMAL(40,2)", "precision 1-38"),
    ("a DECIMAL(4,5)", "scale at most the precision"),
    ("", "cannot read column definition ''"),
    ("a INT,", "cannot read column definition ''"),
    ("a", "cannot read column definition 'a'"),
    ("a INT NOT NULL", "unexpected 'NOT'"),
    ("a-b INT", "cannot read"),
])
def test_an_unreadable_schema_is_refused_naming_the_column_and_the_fix(ddl, words):
    with pytest.raises(ConfigError) as refused:
        parse_schema(ddl, "jobs.x.inputs.events.schema")
    message = str(refused.value)
    assert words in message and message.startswith("jobs.x.inputs.events.schema: ")
    assert "STRUCT<name: TYPE, ...>" in message or "defined twice" in message
