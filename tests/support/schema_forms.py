"""The forms of Spark's DDL an input's schema may take, each with what the config's schema reader reads from it
(stateops.jobs.definition.schema_ddl): held to the reader in the unit tests and to Spark's own DDL parser in
tests/spark/test_line_parser.py."""

# (DDL, what parse_schema reads: Spark's own names, DataType.simpleString)
READ = [
    ("event_id STRING, event_time TIMESTAMP, value DOUBLE",
     {"event_id": "string", "event_time": "timestamp", "value": "double"}),
    ("a LONG, b INTEGER, c SHORT, d BYTE, e REAL, f BIGINT, g INT, h SMALLINT, i TINYINT, j FLOAT",
     {"a": "bigint", "b": "int", "c": "smallint", "d": "tinyint", "e": "float", "f": "bigint", "g": "int",
      "h": "smallint", "i": "tinyint", "j": "float"}),
    ("p DECIMAL(12,4), q decimal(5), r DECIMAL, s Dec(3, 1), t NUMERIC(38,38)",
     {"p": "decimal(12,4)", "q": "decimal(5,0)", "r": "decimal(10,0)", "s": "decimal(3,1)", "t": "decimal(38,38)"}),
    ("ok BOOLEAN, day DATE, raw BINARY, local TIMESTAMP_NTZ",
     {"ok": "boolean", "day": "date", "raw": "binary", "local": "timestamp_ntz"}),
    ("loc STRUCT<lat: DOUBLE, lon DOUBLE, label:STRING>, tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>",
     {"loc": "struct<lat:double,lon:double,label:string>", "tags": "array<string>", "attrs": "map<string,bigint>"}),
    ("deep ARRAY<STRUCT<n: MAP<STRING, ARRAY<DECIMAL(4,2)>>, e: STRUCT<>>>, x string",
     {"deep": "array<struct<n:map<string,array<decimal(4,2)>>,e:struct<>>>", "x": "string"}),
]
