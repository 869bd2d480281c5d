"""Archives as retention sees them: does an archive still verify against its manifest, and archiving an
orphan checkpoint in the runbook's archive format (`<id>/manifest.json` + `<id>/checkpoint/`)."""
from __future__ import annotations

import hashlib
import json
import posixpath
from datetime import datetime, timezone
from typing import Any

from stateops.fs import filesystem
from stateops.retention.inventory import ARCHIVED, MANIFEST, ArchiveEntry
from stateops.retention.listing import Tree

_CHUNK = 1 << 20


def _sha256(path: str) -> str:
    fs, p = filesystem(path)
    digest = hashlib.sha256()
    with fs.open(p, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_tree(root: str, files: list[dict[str, Any]], tree: Tree | None = None) -> list[str]:
    """Problems of the files under `root` against a manifest's file list; [] when every file is there with
    its size and sha256 and nothing else is."""
    tree = tree if tree is not None else Tree.list(root)
    expected = {f["path"]: f for f in files}
    problems = [f"missing {rel}" for rel in sorted(set(expected) - set(tree.files))]
    problems += [f"unexpected {rel}" for rel in sorted(set(tree.files) - set(expected))]
    for rel in sorted(set(expected) & set(tree.files)):
        if tree.files[rel].size != expected[rel]["size"]:
            problems.append(f"{rel}: {tree.files[rel].size} bytes, the manifest says {expected[rel]['size']}")
    if problems:
        return problems
    return [f"{rel}: sha256 differs from the manifest" for rel in sorted(expected)
            if _sha256(tree.path(rel)) != expected[rel]["sha256"]]


def verify(entry: ArchiveEntry) -> list[str]:
    if entry.manifest is None:
        return [f"{entry.path}: no manifest"]
    return verify_tree(entry.tree.path(ARCHIVED), entry.manifest.get("files", []), entry.tree.sub(ARCHIVED))


def archive_checkpoint(source: str, destination: str, details: dict[str, Any]) -> None:
    """Copy `source` into `destination/checkpoint`, write the manifest (files, sizes, sha256), verify the
    copy against it; raises when it does not verify (the source is then left untouched)."""
    src = Tree.list(source)
    dst_fs, dst = filesystem(posixpath.join(destination, ARCHIVED))
    src_fs, _ = filesystem(source)
    files = []
    for rel in sorted(src.files):
        digest, target = hashlib.sha256(), posixpath.join(dst, rel)
        dst_fs.makedirs(posixpath.dirname(target), exist_ok=True)
        with src_fs.open(filesystem(src.path(rel))[1], "rb") as reader, dst_fs.open(target, "wb") as writer:
            while chunk := reader.read(_CHUNK):
                digest.update(chunk)
                writer.write(chunk)
        files.append({"path": rel, "size": src.files[rel].size, "sha256": digest.hexdigest()})
    manifest = {"archive_id": details.get("archive_id"), "job": None, "mode": "retention", "method": "copy",
                "source": source, "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "reason": "orphan checkpoint archived by retention", "total_bytes": src.bytes(), "files": files}
    fs, path = filesystem(posixpath.join(destination, MANIFEST))
    with fs.open(path, "w") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    problems = verify_tree(posixpath.join(destination, ARCHIVED), files)
    if problems:
        raise OSError(f"the archive of {source} at {destination} does not verify: {problems[0]}")
