"""What names the old home, rewritten to name the new one (pure functions; the executor applies them to copies in
the new home, never to the old home).

A home is named in two forms: as StateOps names it (a local path, or an s3:// / s3a:// URL) and as Spark's file
source records the files it read (`SparkPath.urlEncoded`: `file:///abs/path` on local disk, the URL itself on S3,
whose scheme is the one the home was given with). Both forms of the old home are mapped to the same forms of the new
one (`pairs`), and only where a whole path starts with them (a home `/data/h` does not rewrite `/data/h2`).
"""
from __future__ import annotations

import json
import os
from typing import Any

from stateops.checkpoints.source_log import rewrite_paths, spark_form
from stateops.storage import LOCAL, kind

# The ops tables whose columns name paths under the home: whole paths, and JSON text.
PATH_COLUMNS = {"audits": "checkpoint", "findings": "checkpoint", "storage": "home"}
JSON_COLUMNS = {"actions": "details_json"}


def pairs(old: str, new: str) -> list[tuple[str, str]]:
    """(old form, new form) for each way a record may name the home, longest first."""
    found = {old.rstrip("/"): new.rstrip("/"), spark_form(old): spark_form(new)}
    if kind(old) == LOCAL:
        found["file:" + os.path.abspath(old)] = "file:" + spark_form(new).removeprefix("file://") \
            if kind(new) == LOCAL else spark_form(new)
    return sorted(found.items(), key=lambda item: -len(item[0]))


def rewrite_path(value: str, mapping: list[tuple[str, str]]) -> str:
    """`value` with its home prefix replaced, when it is the home or a path under it; else unchanged."""
    for old, new in mapping:
        if value == old or value.startswith(old + "/"):
            return new + value[len(old):]
    return value


def rewrite_json(value: Any, mapping: list[tuple[str, str]]) -> Any:
    """Every string in a JSON value that is a path under the old home, rewritten (keys kept)."""
    if isinstance(value, str):
        return rewrite_path(value, mapping)
    if isinstance(value, list):
        return [rewrite_json(item, mapping) for item in value]
    if isinstance(value, dict):
        return {key: rewrite_json(item, mapping) for key, item in value.items()}
    return value


def rewrite_text(text: str, mapping: list[tuple[str, str]]) -> str:
    """A JSON text (a record, a journal line, an ops table's JSON column) with its home paths rewritten; text that is
    not JSON is left as it is."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    rewritten = rewrite_json(value, mapping)
    return text if rewritten == value else json.dumps(rewritten, sort_keys=isinstance(value, dict))


def rewrite_source_log(text: str, mapping: list[tuple[str, str]]) -> tuple[str, int]:
    """A file source log file with every entry's `path` under the old home rewritten (its text, how many changed)."""
    return rewrite_paths(text, lambda path: rewrite_path(path, mapping))


def sql_text(value: str) -> str:
    """A SQL string literal of `value`."""
    return "'" + value.replace("'", "''") + "'"


def path_column_update(column: str, values: list[str], mapping: list[tuple[str, str]]) -> str | None:
    """A SQL expression (delta-rs' update) giving each of `values` (a column of whole paths) its rewritten path;
    None when none changes."""
    changes = {value: rewrite_path(value, mapping) for value in values if value is not None}
    changes = {old: new for old, new in changes.items() if old != new}
    if not changes:
        return None
    cases = " ".join(f"WHEN {sql_text(old)} THEN {sql_text(new)}" for old, new in sorted(changes.items()))
    return f"CASE {column} {cases} ELSE {column} END"


def json_column_update(column: str, mapping: list[tuple[str, str]]) -> str:
    """A SQL expression rewriting the home's forms inside a JSON text column: a string that is the home, or starts
    with it and a slash (json.dumps leaves slashes as they are)."""
    expression = column
    for old, new in mapping:
        for suffix in ('"', "/"):
            expression = f"replace({expression}, {sql_text(chr(34) + old + suffix)}, {sql_text(chr(34) + new + suffix)})"
    return expression
