"""One recursive listing per root, and the small reads retention needs, through fsspec.

A root is listed once (`stateops.storage.find_files`: one scandir walk on local disk, paged LIST calls on an object
store) and everything else (checkpoints, archives, tables under it) is cut out of that listing, so the
cost of an inventory stays close to the cost of a bare listing of the tree (bench/bench_retention.py).
Paths are kept as the filesystem names them, with the URL scheme put back for object stores.
"""
from __future__ import annotations

import io
import json
import zipfile
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping

from stateops.storage import filesystem, find_files


@dataclass(frozen=True)
class Entry:
    size: int
    mtime: float  # seconds since the epoch


def _mtime(info: Mapping) -> float:
    for key in ("mtime", "LastModified", "last_modified", "modified", "created"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return 0.0


class Tree:
    """Files under one directory: relative path -> Entry (directories are implied by their files).

    A folder's files are one run of the sorted relative paths, found by bisection: the inventory cuts every
    job's checkpoint, tables and archives out of the home's listing, and a scan of all files per cut made
    it grow with jobs x files."""

    def __init__(self, root: str, files: Mapping[str, Entry], _sorted: list[str] | None = None):
        self.root = root.rstrip("/")
        self.files = dict(files)
        self._keys = _sorted  # the sorted relative paths, when known (built on first use)

    def _under(self, prefix: str) -> list[str]:
        """The relative paths that start with `prefix`, in order."""
        if self._keys is None:
            self._keys = sorted(self.files)
        start = end = bisect_left(self._keys, prefix)
        while end < len(self._keys) and self._keys[end].startswith(prefix):
            end += 1
        return self._keys[start:end]

    @classmethod
    def list(cls, root: str) -> "Tree":
        """Every file under `root` (empty when it does not exist)."""
        fs, base = filesystem(root)
        base = base.rstrip("/")
        if not fs.exists(base):
            return cls(root, {})
        found = find_files(fs, base)
        files, prefix = {}, base.split("://", 1)[-1] + "/"
        for path, info in found.items():
            path = path.split("://", 1)[-1]
            if path.startswith(prefix) and info.get("type", "file") != "directory":
                files[path[len(prefix):]] = Entry(int(info.get("size") or 0), _mtime(info))
        return cls(root, files)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def sub(self, rel_dir: str) -> "Tree":
        """The files under `rel_dir` (relative to this tree), as a tree of their own."""
        prefix = rel_dir.strip("/") + "/"
        inside = [rel[len(prefix):] for rel in self._under(prefix)]  # still sorted: one prefix cut off
        return Tree(self.path(rel_dir.strip("/")), {rel: self.files[prefix + rel] for rel in inside}, inside)

    def children(self, rel_dir: str = "") -> set[str]:
        """Names of the directories and files directly under `rel_dir`."""
        prefix = rel_dir.strip("/") + "/" if rel_dir.strip("/") else ""
        return {rel[len(prefix):].split("/", 1)[0] for rel in (self._under(prefix) if prefix else self.files)}

    def bytes(self) -> int:
        return sum(e.size for e in self.files.values())

    def last_modified(self) -> float | None:
        return max((e.mtime for e in self.files.values()), default=None)

    def __len__(self) -> int:
        return len(self.files)

    def __contains__(self, rel: str) -> bool:
        return rel in self.files


def read_many(paths: Iterable[str]) -> dict[str, bytes]:
    """Whole small files, fetched together (fsspec's `cat` of a list: concurrent on object stores)."""
    paths = list(paths)
    if not paths:
        return {}
    fs, _ = filesystem(paths[0])
    names = {filesystem(p)[1]: p for p in paths}
    data = fs.cat(list(names), on_error="omit")
    return {names[name]: value for name, value in data.items() if name in names}


def zip_references(data: bytes) -> set[str] | None:
    """The immutable files (SSTs, archived logs) a RocksDB version zip names in its `metadata` entry
    (`v1` then JSON with sstFiles[].dfsSstFileName and logFiles[].dfsLogFileName); None if unreadable."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            text = archive.read("metadata").decode("utf-8")
        lines = [line for line in text.splitlines() if line.strip().startswith("{")]
        doc = json.loads(lines[0])
    except (zipfile.BadZipFile, KeyError, IndexError, ValueError, UnicodeDecodeError):
        return None
    names = {f.get("dfsSstFileName") for f in doc.get("sstFiles", [])}
    names |= {f.get("dfsLogFileName") for f in doc.get("logFiles", [])}
    return {n for n in names if n}
