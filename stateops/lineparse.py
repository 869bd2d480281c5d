"""JSON lines parsed exactly as Spark's JSON file source parses them, with the line kept: `parse_rows`.

The stateful query reads a file input with Spark's JSON source; the dead-letter query needs each bad line's exact
bytes, so it reads the lines as text and parses them itself. `from_json` would do that through a
java.io.InputStreamReader per row (about twice the file source's time) and judge invalid UTF-8, a leading byte-order
mark and a top-level array otherwise (docs/spark-behaviour.md). StateOps' LineParser (jvm/json, in StateOps' jar on
every session) runs the file source's own parser over the line's bytes: both queries judge every line alike.
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
    """Spark's JSON source as the stateful query reads a file input (`schema` as DDL, PERMISSIVE): what explain-key's
    evidence and the parse benchmark read too, so each reads the rows the query read."""
    return reader.schema(schema).option("mode", "PERMISSIVE")
