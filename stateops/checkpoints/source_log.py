"""Spark's file-source log, the one place its format is read and written: `sources/<index>/<batch>` files, each
`v1` then one JSON entry per line ({"path", "timestamp", "batchId"}), compacted every few source batches into
`<batch>.compact` (every entry up to that batch). A Kafka source keeps only its first offsets there (`0`, JSON
without a `path`), so a log that names no path is another source's.

Spark names each file it read as `SparkPath.urlEncoded` (spark_form): a home moved without rewriting these entries
fails (`Wrong basePath`) or reads its input again, which is why the placement check and the home move read them.
"""
from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

from stateops.storage import LOCAL, kind, names

SOURCES = "sources"
# A log file's path, relative to anything above its checkpoint (an archived copy's included).
SOURCE_LOG = re.compile(r"(?:^|/)sources/\d+/\d+(?:\.compact)?$")
_ENTRY = re.compile(r"^(\d+)(\.compact)?$")


def spark_form(home: str) -> str:
    """How Spark's file source names a file under `home` (its prefix): `file://` + the absolute path, URL-encoded,
    on local disk; the URL itself on S3."""
    if kind(home) == LOCAL:
        path = os.path.abspath(home.removeprefix("file://"))
        return "file://" + quote(path, safe="/")
    return home.rstrip("/")


def checkpoint_of(rel: str) -> str | None:
    """The checkpoint a source-log file belongs to (the part of `rel` before `sources/`), None for another file."""
    return rel.rsplit(f"/{SOURCES}/", 1)[0] if SOURCE_LOG.search(rel) else None


def entries(folder: str) -> dict[int, str]:
    """Source batch -> the name of the log file that holds it alone or last (`<b>` or `<b>.compact`)."""
    found = {}
    for name in names(folder) or ():
        match = _ENTRY.match(name)
        if match:
            found[int(match.group(1))] = name
    return found


def records(text: str) -> list[dict]:
    """The entries of one log file's text that name a file (none for a Kafka source's)."""
    found = []
    for line in text.split("\n")[1:]:  # the version line first
        try:
            entry = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(entry, dict) and "path" in entry:
            found.append(entry)
    return found


def logged_paths(text: str) -> list[str]:
    """The file paths a file source's log file names (none for another source's log: Kafka's holds offsets)."""
    return [entry["path"] for entry in records(text)]


def lines_by_batch(text: str) -> dict[int, list[str]]:
    """A compact file's entry lines, by the source batch each belongs to (to write single batches back)."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines()[1:]:
        found.setdefault(int(json.loads(line)["batchId"]), []).append(line)
    return found


def batch_text(lines: list[str]) -> str:
    """One source batch's log file, as Spark writes it."""
    return "v1\n" + "\n".join(lines)


def rewrite_paths(text: str, rewrite) -> tuple[str, int]:
    """A log file with every entry's `path` passed through `rewrite` (str -> str), in Spark's own format (the version
    line, one compact JSON object per line, in order); returns the text and how many paths changed."""
    lines = text.split("\n")
    changed = 0
    for number, line in enumerate(lines):
        if number == 0 or not line.strip():
            continue  # the version line ("v1"), and a trailing newline
        entry = json.loads(line)
        path = rewrite(entry["path"])
        if path != entry["path"]:
            entry["path"] = path
            changed += 1
            lines[number] = json.dumps(entry, separators=(",", ":"), ensure_ascii=False)
    return "\n".join(lines), changed
