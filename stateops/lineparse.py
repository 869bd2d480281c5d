"""JSON lines parsed exactly as Spark's JSON file source parses them, with the line kept: `parse_rows`.

A job's query reads its input once, as text, and needs each bad line's exact bytes for the dead-letter table, so it
parses the lines itself. `from_json` would do that through a java.io.InputStreamReader per row (about twice the file
source's time) and judge invalid UTF-8, a leading byte-order mark and a top-level array otherwise than the file source
(docs/spark-behaviour.md). StateOps' LineParser (jvm/json, in StateOps' jar on every session) runs the file source's
own parser over the line's bytes: a line reads as the JSON source would read it.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrameReader, SparkSession
from pyspark.sql.streaming import DataStreamReader


def parse_rows(spark: SparkSession, value: Column, schema: str) -> Column:
    """The rows Spark's JSON source reads from each line of `value` against `schema` (DDL), in PERMISSIVE mode: an
    array of structs, one for an object (invalid fields null; all null for a line that does not parse), one per
    element for a top-level array, none for a blank line or `[]`."""
    return Column(spark._jvm.io.stateops.json.LineParser.column(value._jc, schema))


def json_source(reader: DataFrameReader | DataStreamReader, schema: str) -> DataFrameReader | DataStreamReader:
    """Spark's JSON source over a file input (`schema` as DDL, PERMISSIVE): what `parse_rows` is held to (the oracle of
    its test and the parse benchmark) and the throughput benchmark's baseline."""
    return reader.schema(schema).option("mode", "PERMISSIVE")
