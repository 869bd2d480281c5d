"""Rewind surgery on a stopped v1 checkpoint: back to batch N, so that batch N+1 runs again.

Spark restarts from the latest batch in `offsets/` (here N, committed in `commits/N`, with `offsets/N-1`
for the watermark of late rows) and loads state version N+1 of every partition. So the cut keeps those,
and removes from the checkpoint everything later: offsets and commits above N, state files of versions
above N+1 (with the v1 format a stale higher version could be picked up as a base snapshot), file-source
log entries above the source offset recorded in `offsets/N`, and their `.crc` files. A source log
compacts every 10 source batches (`<b>.compact` holds every entry up to b): a compact file past the cut
is removed after the individual entries up to the cut were written back from it. The runbook archives
and verifies the whole checkpoint first, so every removed file stays in the archive.

Every operation is idempotent (removing what is already gone, writing back what is already there), so an
interrupted cut is completed by running it again.
"""
from __future__ import annotations

import posixpath

from stateops.checkpoints import restart, source_log
from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.listing import Tree, read_many
from stateops.storage import filesystem, read_text


def _remove(fs, path: str) -> int:
    """Remove a checkpoint file and its Hadoop checksum file; how many were there."""
    removed = 0
    folder, name = posixpath.split(path)
    for target in (path, posixpath.join(folder, f".{name}.crc")):
        if fs.exists(target):
            fs.rm(target)
            removed += 1
    return removed


def _source_offsets(checkpoint: Checkpoint, batch_id: int) -> dict[int, int | None]:
    """File-source index -> the last source-log batch that query batch `batch_id` covers (others omitted)."""
    out = {}
    for index, offset in enumerate(checkpoint.source_offsets(batch_id)):
        if isinstance(offset, dict) and "logOffset" in offset:
            out[index] = int(offset["logOffset"])
    return out


def rewind_problems(checkpoint: Checkpoint, to_batch: int) -> list[str]:
    """Why the checkpoint cannot be rewound to `to_batch` (empty when it can)."""
    committed, offsets = checkpoint.committed_batches(), checkpoint.offset_batches()
    latest = committed[-1]
    if to_batch >= latest:
        return [f"batch {to_batch} is not before the latest committed batch {latest}; nothing to rewind "
                f"(choose 0 <= N < {latest})"]
    needed = [("offsets", to_batch), ("commits", to_batch)] + ([("offsets", to_batch - 1)] if to_batch > 0 else [])
    missing = [f"{folder}/{batch}" for folder, batch in needed
               if batch not in (offsets if folder == "offsets" else committed)]
    if missing:
        return [f"{', '.join(missing)} no longer retained (oldest offsets: {offsets[0]}); choose N >= "
                f"{max(offsets[0] + 1, committed[0])}"]
    # Which state a restart from to_batch loads: stateops.checkpoints.restart, as retention sees it. A
    # snapshot counts only with every SST its metadata names, and every partition's store must be there.
    files = restart.parse(Tree.list(checkpoint.path), read_many)
    version = to_batch + 1
    restart.load_references(files, read_many, lambda store: store.base(version))
    problems = [f"the state store {folder} is missing" for folder in files.missing_stores(to_batch)]
    problems += [f"state version {version} of operator {s.operator} store {s.name} partition {s.partition} is no "
                 "longer retained (or a file its snapshot names is gone)"
                 for s in files.stores_at(to_batch) if version not in files.loadable_versions(s, version, version)]
    if problems:
        return [f"{problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; choose a "
                "later batch (Spark keeps spark.sql.streaming.minBatchesToRetain batches of state)"]
    for index, cut in _source_offsets(checkpoint, to_batch).items():
        names = source_log.entries(checkpoint.source_dir(index))
        compacts = [b for b, n in names.items() if n.endswith(".compact")]
        base = max((b for b in compacts if b <= cut), default=-1)
        later = [b for b in compacts if b > cut]
        gaps = [b for b in range(base + 1, cut + 1) if b not in names]
        if gaps and not later:
            problems.append(f"source {index}: log entries {gaps[0]}..{gaps[-1]} are missing")
    return problems


def _restore_entries(fs, folder: str, names: dict[int, str], cut: int, archived_folder: str | None) -> int:
    """Write back the individual log entries up to `cut` that only a later compact file still holds."""
    compacts = sorted(b for b, n in names.items() if n.endswith(".compact"))
    base = max((b for b in compacts if b <= cut), default=-1)
    gaps = [b for b in range(base + 1, cut + 1) if b not in names]
    later = [b for b in compacts if b > cut]
    if not gaps:
        return 0
    source = posixpath.join(folder, names[later[0]])
    if not fs.exists(source) and archived_folder:  # removed by an interrupted cut: the archive has it
        text = read_text(posixpath.join(archived_folder, names[later[0]]))
    else:
        with fs.open(source, "r") as handle:
            text = handle.read()
    entries = source_log.lines_by_batch(text)
    for batch in gaps:
        with fs.open(posixpath.join(folder, str(batch)), "w") as handle:
            handle.write(source_log.batch_text(entries.get(batch, [])))
    return len(gaps)


def rewind(checkpoint_path: str, to_batch: int, archived_checkpoint: str | None = None) -> dict[str, int]:
    """Cut the checkpoint back to `to_batch` (see the module doc); counts of files written back and removed."""
    checkpoint = Checkpoint(checkpoint_path)
    fs, _ = filesystem(checkpoint_path)
    counts = {"source_entries_written": 0, "removed": 0}
    for index, cut in _source_offsets(checkpoint, to_batch).items():
        fs_src, folder = filesystem(checkpoint.source_dir(index))
        names = source_log.entries(checkpoint.source_dir(index))
        archived = Checkpoint(archived_checkpoint).source_dir(index) if archived_checkpoint else None
        counts["source_entries_written"] += _restore_entries(fs_src, folder, names, cut, archived)
        for batch, name in names.items():
            if batch > cut:
                counts["removed"] += _remove(fs_src, posixpath.join(folder, name))
    for path in checkpoint.batch_files(above=to_batch):
        counts["removed"] += _remove(fs, filesystem(path)[1])
    for f in checkpoint.state_files():
        if f.version is not None and f.version > to_batch + 1:
            counts["removed"] += _remove(fs, f.path)
    for path in checkpoint.operator_metadata_files(above=to_batch):
        counts["removed"] += _remove(fs, filesystem(path)[1])
    return counts
