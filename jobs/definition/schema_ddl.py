"""An input's schema, read from Spark's DDL without a JVM: `parse_schema`.

A config file is loaded by every entry point, sensors and the code location among them, which never start Spark, so
the schema is checked here, in Python, when the job is defined; the query parses its lines with the same text
(`StructType.fromDDL`, jvm/json LineParser). What it reads is Spark's DDL for a row of JSON: columns `name TYPE`,
comma-separated, each type a scalar (`STRING`, `TIMESTAMP`, `DOUBLE`, `DECIMAL(12, 4)`, ...) or nested
(`STRUCT<name: TYPE, ...>`, `ARRAY<TYPE>`, `MAP<KEY, VALUE>`), case-insensitive, with Spark's synonyms. Anything else
is refused naming the column, so that a typo never reaches the query as a JVM error. tests/spark/test_line_parser.py
holds every form this reads to what Spark's own DDL parser reads.
"""
from __future__ import annotations

import re

from stateops.errors import ConfigError

# Spark's scalar type names and synonyms -> the name Spark prints (DataType.simpleString)
SCALARS = {"string": "string", "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz", "date": "date",
           "double": "double", "float": "float", "real": "float", "long": "bigint", "bigint": "bigint", "int": "int",
           "integer": "int", "smallint": "smallint", "short": "smallint", "tinyint": "tinyint", "byte": "tinyint",
           "boolean": "boolean", "binary": "binary"}
_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")
FIX = ("write columns as 'name TYPE, ...' with Spark's types: STRING, TIMESTAMP, DOUBLE, LONG, INT, BOOLEAN, DATE, "
       "DECIMAL(p, s), STRUCT<name: TYPE, ...>, ARRAY<TYPE>, MAP<STRING, TYPE>")


class _Unreadable(ValueError):
    pass


class _Tokens:
    """The DDL's words, numbers and marks, read one at a time."""

    def __init__(self, text: str) -> None:
        self.items: list[str] = []
        position = 0
        while text[position:].strip():
            match = _TOKEN.match(text, position)
            if not match:
                raise _Unreadable(f"cannot read {text[position:].strip()[:20]!r}")
            self.items.append(match.group(match.lastindex))
            position = match.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.items[self.at] if self.at < len(self.items) else None

    def take(self, expected: str | None = None) -> str:
        found = self.peek()
        if found is None or (expected is not None and found.lower() != expected):
            raise _Unreadable(f"expected {expected or 'more'} but found {found or 'the end'}")
        self.at += 1
        return found

    def name(self) -> str:
        found = self.take()
        if not re.match(r"^[A-Za-z_]", found):
            raise _Unreadable(f"expected a name but found {found!r}")
        return found


def _type(tokens: _Tokens) -> str:
    """One type, as Spark prints it (`DataType.simpleString`: `struct<lat:double,n:array<bigint>>`)."""
    word = tokens.name().lower()
    if word == "struct":
        tokens.take("<")
        fields = []
        while tokens.peek() != ">":
            if fields:
                tokens.take(",")
            name = tokens.name()
            if tokens.peek() == ":":
                tokens.take(":")
            fields.append(f"{name}:{_type(tokens)}")
        tokens.take(">")
        return f"struct<{','.join(fields)}>"
    if word == "array":
        tokens.take("<")
        element = _type(tokens)
        tokens.take(">")
        return f"array<{element}>"
    if word == "map":
        tokens.take("<")
        key = _type(tokens)
        tokens.take(",")
        value = _type(tokens)
        tokens.take(">")
        return f"map<{key},{value}>"
    if word in ("decimal", "dec", "numeric"):
        if tokens.peek() != "(":
            return "decimal(10,0)"
        tokens.take("(")
        precision = int(tokens.take())
        scale = 0
        if tokens.peek() == ",":
            tokens.take(",")
            scale = int(tokens.take())
        tokens.take(")")
        if not 1 <= precision <= 38 or scale > precision:
            raise _Unreadable(f"decimal({precision},{scale}) is not a decimal Spark holds (precision 1-38, "
                              "scale at most the precision)")
        return f"decimal({precision},{scale})"
    if word not in SCALARS:
        raise _Unreadable(f"{word!r} is not a type")
    return SCALARS[word]


def parse_schema(ddl: str, field_name: str) -> dict[str, str]:
    """Column name -> type (as Spark prints it) of an input's DDL; refuses anything it cannot read with a
    ConfigError naming the column and the fix."""
    columns: dict[str, str] = {}
    for part in top_level_parts(ddl or ""):
        try:
            tokens = _Tokens(part)
            name = tokens.name()
            kind = _type(tokens)
            if tokens.peek() is not None:
                raise _Unreadable(f"unexpected {tokens.peek()!r} after the type")
        except ValueError as error:  # _Unreadable, or a decimal's precision that is no number
            raise ConfigError(field_name, f"cannot read column definition {part.strip()!r} ({error})", FIX) from None
        if name in columns:
            raise ConfigError(field_name, f"column {name!r} is defined twice", "name each column once")
        columns[name] = kind
    return columns


def top_level_parts(text: str) -> list[str]:
    """`text` split at the commas outside `<...>` and `(...)`: a DDL's column definitions, a nested type's
    parameters."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:at])
            start = at + 1
    parts.append(text[start:])
    return parts
