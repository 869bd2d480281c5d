"""A migration applied to a stopped checkpoint (the runbook's migrate step): the state of the latest committed batch
N rewritten into the new query's state at version N + 1, the new query's schema files and operator metadata in place,
and the old `state/` gone (the runbook's archive keeps it). No input is read; offsets, commits and sources stay, so
the restart plans batch N + 1 and the sink's batch ids go on.

In order, each part idempotent and the next started only when the last completed (a migration killed anywhere is
completed by running it again):
1. `write`: into `<checkpoint>/state.migrate` (laid out as `state/`): every rewritten operator's store through the
   store's own StateStore API (the JVM writer behind the runtime's `rewrite_state`), an empty store for an added
   operator, after the schema and metadata files Spark writes when it plans the new query (`state_files`); then the
   marker `_COMPLETE` with the rows written;
2. `assemble`: the state files of each kept operator move from `state/<old id>` to `state.migrate/<new id>` (its
   schema and metadata files stay behind: the new query's are in place);
3. `swap`: `state/` goes, `state.migrate` becomes `state/`, and `state.migrated` records the runbook that did it.
Fault point `migrate.part` (job, part: write | moved | swapped, n) kills it between any two of its writes.
"""
from __future__ import annotations

import json
import posixpath
from typing import Callable

from stateops.checkpoints import state_store
from stateops.checkpoints.checkpoint import METADATA, Checkpoint
from stateops.checkpoints.schemas import STATE_SCHEMA
from stateops.faults import fault_point
from stateops.migration.classify import Migration, Rewrite
from stateops.storage import exists, files_under, move_file, read_text, write_text
from stateops.storage.copies import move_tree, remove_tree

SCRATCH = "state.migrate"
COMPLETE = "_COMPLETE"
DONE = "state.migrated"

# rewrite(checkpoint, batch, rewrite, provider class, version, scratch state root, partitions, (key, value) schema of
# the new store) -> rows per partition
StateWriter = Callable[[str, int, Rewrite, str, int, str, int, "tuple[str, str] | None"], list[int]]
# state_files(scratch state root): the new query's schema and operator metadata files written under it; the (key,
# value) schema of each operator's store
StateFiles = Callable[[str], "dict[int, tuple[str, str]]"]


def _job(checkpoint: str) -> str:
    return posixpath.basename(checkpoint.rstrip("/"))


def done(checkpoint: str, runbook_id: str) -> bool:
    marker = posixpath.join(checkpoint.rstrip("/"), DONE)
    return exists(marker) and json.loads(read_text(marker)).get("runbook_id") == runbook_id


def schema_file(rel: str) -> bool:
    """A path under `state/<op>/` that is a schema or operator metadata file (the new query's replace them)."""
    parts = rel.split("/")
    return METADATA in parts or STATE_SCHEMA in parts


def write(checkpoint: str, migration: Migration, writer: StateWriter, state_files: StateFiles,
          partitions: int) -> dict[str, list[int]]:
    """Part 1: the new state of every rewritten or added operator and the new query's schema files into the scratch,
    then the marker; rows written per operator (per `operator/store` where it has several). A complete scratch is
    kept as it is."""
    base = checkpoint.rstrip("/")
    scratch = posixpath.join(base, SCRATCH)
    marker = posixpath.join(scratch, COMPLETE)
    if exists(marker):
        return json.loads(read_text(marker))["rows"]
    remove_tree(scratch)
    formats = state_store.of_checkpoint(checkpoint)[0]
    provider = state_store.STORES.get(formats.store, formats.store)
    batch = migration.position.batch
    schemas = state_files(scratch)
    rows = {}
    for n, rewrite in enumerate(migration.rewrites):
        if rewrite.how == "keep":
            continue
        name = str(rewrite.operator_id) if rewrite.store == "default" else f"{rewrite.operator_id}/{rewrite.store}"
        rows[name] = writer(checkpoint, batch, rewrite, provider, batch + 1, scratch, partitions,
                            schemas.get(rewrite.operator_id))
        fault_point("migrate.part", job=_job(checkpoint), part="write", n=n)
    write_text(marker, json.dumps({"rows": rows}, sort_keys=True))
    return rows


def assemble(checkpoint: str, migration: Migration) -> int:
    """Part 2: each kept operator's state files into its folder in the scratch; the files moved."""
    base = checkpoint.rstrip("/")
    moved = 0
    for rewrite in migration.rewrites:
        if rewrite.how != "keep":
            continue
        source = posixpath.join(Checkpoint(checkpoint).state_root, str(rewrite.source_id))
        target = posixpath.join(base, SCRATCH, str(rewrite.operator_id))
        for rel in sorted(files_under(source) or ()):
            if schema_file(rel):
                continue
            move_file(posixpath.join(source, rel), posixpath.join(target, rel))
            moved += 1
            fault_point("migrate.part", job=_job(checkpoint), part="moved", n=moved)
    return moved


def swap(checkpoint: str, runbook_id: str) -> None:
    """Part 3: the old state out (the archive holds it), the scratch in its place, the record of it."""
    base = checkpoint.rstrip("/")
    scratch, state = posixpath.join(base, SCRATCH), Checkpoint(checkpoint).state_root
    if exists(posixpath.join(scratch, COMPLETE)):
        remove_tree(state)
        fault_point("migrate.part", job=_job(checkpoint), part="swapped", n=0)
        remove_tree(posixpath.join(scratch, COMPLETE))
    if exists(scratch):
        move_tree(scratch, state)
    write_text(posixpath.join(base, DONE), json.dumps({"runbook_id": runbook_id}))


def apply(checkpoint: str, migration: Migration, runbook_id: str, writer: StateWriter, state_files: StateFiles,
          partitions: int) -> dict:
    """The whole migration, resumable (the module doc): what each part did."""
    result = {"rows": None, "files_moved": 0}
    if not done(checkpoint, runbook_id):
        result["rows"] = write(checkpoint, migration, writer, state_files, partitions)
        result["files_moved"] = assemble(checkpoint, migration)
        swap(checkpoint, runbook_id)
    return result
