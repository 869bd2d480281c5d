"""Where a checkpoint keeps its stores' schema files, and a copy of them alone: what `jobs check` plans a restart
against (Spark validates a query there with its own rules and writes into the copy, never into the checkpoint).

Spark keeps them per operator (`state/<op>/_metadata/metadata` the operator's metadata, `state/<op>/_stateSchema/
<store>/<n>_<uuid>` schema files of format v3, Spark 4's transformWithState and format-2 checkpoints) and in
partition 0 (`state/<op>/0/_metadata/schema`, `state/<op>/0/<store>/_metadata/schema`: format v2, every operator
before Spark 4.0 and the others since). They are listed there only, so the cost does not grow with the state's files.
"""
from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass

from stateops.checkpoints.checkpoint import METADATA, SCHEMA, Checkpoint
from stateops.storage import filesystem, find_files, is_url, names, read_text, write_text

STATE_SCHEMA = "_stateSchema"


@dataclass(frozen=True)
class SchemaFile:
    """One schema file: its operator, the store (folder) it describes, and its order among the store's files
    (v3 files are numbered by the batch that wrote them; the newest is the one in force)."""

    operator_id: int
    store: str
    path: str
    order: int


def _files_under(folder: str) -> list[str]:
    fs, path = filesystem(folder)
    prefix = path.rstrip("/") + "/"
    return sorted(folder.rstrip("/") + "/" + found[len(prefix):] for found in find_files(fs, path)
                  if found.startswith(prefix))


def _schema_folders(state_root: str, op: int) -> list[str]:
    """The folders (relative to `state/<op>`) that may hold the operator's schema and metadata files."""
    folders = [METADATA, STATE_SCHEMA, f"0/{METADATA}"]
    first = posixpath.join(state_root, str(op), "0")
    return folders + [f"0/{name}/{METADATA}" for name in sorted(names(first) or ())
                      if not name.startswith((".", "_")) and "." not in name]


def schema_files(state_root: str) -> list[SchemaFile]:
    """Every store's schema files under a state root (a checkpoint's `state/`, or a copy laid out as it), the
    oldest first per store."""
    found = []
    for op in Checkpoint.operators_under(state_root):
        base = posixpath.join(state_root, str(op))
        for folder in _schema_folders(state_root, op):
            for path in _files_under(posixpath.join(base, folder)):
                rel = path[len(base) + 1:].split("/")
                name = rel[-1]
                if name.startswith("."):
                    continue
                if len(rel) > 1 and rel[-2] == METADATA and name == SCHEMA:
                    found.append(SchemaFile(op, "/".join(rel[1:-2]) or "default", path, 0))
                elif STATE_SCHEMA in rel:
                    found.append(SchemaFile(op, "/".join(rel[rel.index(STATE_SCHEMA) + 1:-1]) or "default", path,
                                            int(name.split("_")[0] or 0)))
    return sorted(found, key=lambda f: (f.operator_id, f.order))


def copy_schema_files(checkpoint: str, target: str) -> None:
    """The checkpoint's `state/` folders and the schema and metadata files in them, nothing else, into the local
    folder `target` (a restart of a checkpoint without `state/` is what
    STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY is about)."""
    state_root = Checkpoint(checkpoint).state_root
    ops = Checkpoint.operators_under(state_root)
    if not ops and names(state_root) is None:
        return
    os.makedirs(target, exist_ok=True)
    fs, root = filesystem(state_root)
    root = root.rstrip("/")
    for op in ops:
        os.makedirs(os.path.join(target, str(op)), exist_ok=True)
        for folder in _schema_folders(state_root, op):
            for path in _files_under(posixpath.join(state_root, str(op), folder)):
                rel = path[len(state_root.rstrip("/")) + 1:]
                if not posixpath.basename(rel).startswith("."):
                    os.makedirs(os.path.join(target, posixpath.dirname(rel)), exist_ok=True)
                    fs.get_file(filesystem(path)[1], os.path.join(target, rel))


def repoint_schema_paths(state_root: str, written_under: str, final_root: str) -> list[str]:
    """Operator metadata of format v2 (`state/<op>/_metadata/v2/<batch>`, transformWithState's) names its schema
    files by absolute path (`stateSchemaFilePaths`): in the files under `state_root`, the paths Spark wrote under
    the state folder `written_under` (where it planned the query) now name the same files under `final_root` (where
    the state will be read). The files rewritten."""
    marker = written_under.rstrip("/") + "/"
    rewritten = []
    for op in Checkpoint.operators_under(state_root):
        folder = posixpath.join(state_root, str(op), METADATA, "v2")
        for name in sorted(n for n in names(folder) or () if n.isdigit()):
            path = posixpath.join(folder, name)
            header, _, body = read_text(path).partition("\n")
            meta = json.loads(body)
            for store in meta.get("stateStoreInfo", []):
                store["stateSchemaFilePaths"] = [_moved(p, marker, final_root) for p in store.get(
                    "stateSchemaFilePaths", [])]
            text = header + "\n" + json.dumps(meta, separators=(",", ":"))
            if text.strip() != read_text(path).strip():
                write_text(path, text, replace=True)
                rewritten.append(path)
    return rewritten


def _moved(path: str, marker: str, final_root: str) -> str:
    if marker not in path:
        return path
    scheme, rest = path.split(marker, 1)
    root = final_root if is_url(final_root) else scheme + final_root  # Spark's `file:` before a local path
    return root.rstrip("/") + "/" + rest
