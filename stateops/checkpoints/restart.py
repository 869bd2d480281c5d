"""What a restart needs, from a checkpoint's file listing: which batches are still restorable, and which
files a restart from any batch at or after a floor needs (everything else is history Spark no longer reads).

Restarting from batch N (DESIGN.md) needs `metadata`, `offsets/N` and `offsets/N-1`, `commits/N`,
`sources/`, and every state store at version N+1. A store loads version v from its latest snapshot at or
below v (RocksDB `<s>.zip` with every SST and archived log its metadata names; HDFS provider
`<s>.snapshot`; none: the empty version 0) plus the deltas s+1..v (`.changelog`, `.delta`). So keeping
batches F..latest restorable keeps, per store, the latest snapshot at or below F+1 (the base), every
version from the base up, and the immutable files those snapshots name; older versions, files no kept
snapshot names, and offsets/commits before F-1/F are history.

What is never touched here: `metadata`, `sources/` (the file source's own log, compacted by Spark),
`_metadata` folders, versions above the latest batch (a batch in flight), and any store that uses
Spark's checkpoint format v2 (`<v>_<id>.zip`: the commit log decides which file is current). A store
that cannot load a version it should (a gap, a missing SST) makes the whole checkpoint "unhealthy":
retention leaves its files alone and says why.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

from stateops.checkpoints.checkpoint import IMMUTABLE_DIRS, OFFSETS
from stateops.checkpoints.listing import Entry, Tree, zip_references

_NUMBER = re.compile(r"^\d+$")
_VERSIONED = re.compile(r"^(\d+)(_[0-9a-f-]+)?\.(changelog|zip|delta|snapshot)$")
SNAPSHOTS = ("zip", "snapshot")
DELTAS = ("changelog", "delta")
# Hadoop's CheckpointFileManager writes `.<name>.<uuid>.tmp` (and its `.crc`), then renames it into place.
TEMP = re.compile(r"^\..+\.tmp(\.crc)?$")
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def crc_of(rel: str) -> str:
    folder, name = posixpath.split(rel)
    return posixpath.join(folder, f".{name}.crc")


@dataclass
class Store:
    """One state store's folder: state/<operator>/<partition>[/<store name>]."""

    operator: int
    partition: int
    name: str
    folder: str                                                     # relative to the checkpoint
    versions: dict[int, dict[str, str]] = field(default_factory=dict)  # version -> kind -> relative path
    immutable: dict[str, str] = field(default_factory=dict)         # file name -> relative path
    unique_ids: bool = False                                        # checkpoint format v2 files seen

    def snapshot(self, version: int) -> str | None:
        kinds = self.versions.get(version, {})
        return next((kinds[k] for k in SNAPSHOTS if k in kinds), None)

    def delta(self, version: int) -> str | None:
        kinds = self.versions.get(version, {})
        return next((kinds[k] for k in DELTAS if k in kinds), None)

    def base(self, version: int) -> int:
        """The snapshot a load of `version` starts from: the latest one at or below it (0: empty)."""
        return max((v for v in self.versions if v <= version and self.snapshot(v)), default=0)


@dataclass
class CheckpointFiles:
    """A checkpoint's files as restart logic sees them."""

    tree: Tree
    offsets: list[int]
    commits: list[int]
    stores: list[Store]
    confs: dict[int, dict]                       # batch -> the Spark conf recorded in offsets/<batch>
    timestamps: dict[int, int]                   # batch -> batchTimestampMs (when the batch was planned)
    references: dict[str, set[str] | None]       # zip relative path -> immutable file names (None: unreadable)

    @property
    def latest(self) -> int | None:
        return self.commits[-1] if self.commits else None

    def partitions(self, batch: int) -> int | None:
        value = self.confs.get(batch, {}).get("spark.sql.shuffle.partitions")
        return int(value) if value else None

    def provider(self) -> str | None:
        """The state store provider's class name, from the newest offset log entry."""
        return self.confs.get(self.offsets[-1], {}).get(PROVIDER) if self.offsets else None

    def stores_at(self, batch: int) -> list[Store]:
        count = self.partitions(batch)
        return [s for s in self.stores if count is None or s.partition < count]

    def missing_stores(self, batch: int) -> list[str]:
        """Partitions of an operator/store that batch `batch` ran with but that have no folder at all."""
        count = self.partitions(batch)
        if count is None:
            return []
        names = {(s.operator, s.name) for s in self.stores}
        present = {(s.operator, s.name, s.partition) for s in self.stores}
        return [f"state/{op}/{p}{'' if name == 'default' else '/' + name}"
                for op, name in sorted(names) for p in range(count) if (op, name, p) not in present]

    def intact(self, store: Store, version: int) -> bool:
        """Is the snapshot of `version` readable, with every immutable file it names present?"""
        path = store.snapshot(version)
        if path is None:
            return False
        if not path.endswith(".zip"):
            return True
        names = self.references.get(path)
        return names is not None and all(n in store.immutable for n in names)

    def loadable_versions(self, store: Store, low: int, high: int) -> set[int]:
        """Versions in [low, high] this store can load from its files."""
        ok, out = True, set()  # version 0 is the empty store
        for version in range(1, high + 1):
            if store.snapshot(version):
                ok = self.intact(store, version)
            else:
                ok = ok and store.delta(version) is not None
            if ok and version >= low:
                out.add(version)
        return out

    def restorable_batches(self) -> list[int]:
        """Every committed batch a restart (or a rewind) can start from, oldest first."""
        if not self.commits:
            return []
        low, high = self.commits[0] + 1, self.commits[-1] + 1
        loadable = {id(s): self.loadable_versions(s, low, high) for s in self.stores}
        out = []
        for batch in self.commits:
            if batch not in self.offsets or (batch > 0 and batch - 1 not in self.offsets):
                continue
            if self.missing_stores(batch):
                continue
            if all(batch + 1 in loadable[id(s)] for s in self.stores_at(batch)):
                out.append(batch)
        return out


def is_checkpoint(tree: Tree) -> bool:
    """Whether a listed tree holds a checkpoint: its query's `metadata` and an offset log with a batch."""
    return "metadata" in tree and bool(tree.children(OFFSETS))


def parse(tree: Tree, read: Callable[[list[str]], Mapping[str, bytes]]) -> CheckpointFiles:
    """The checkpoint in `tree`; `read(paths)` fetches small files (offset logs, zip metadata) by full path."""
    offsets = sorted(int(n) for n in tree.children("offsets") if _NUMBER.match(n) and f"offsets/{n}" in tree)
    commits = sorted(int(n) for n in tree.children("commits") if _NUMBER.match(n) and f"commits/{n}" in tree)
    stores: dict[str, Store] = {}
    for rel in tree.files:
        parts = rel.split("/")
        if parts[0] != "state" or len(parts) < 4 or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        if any(p.startswith("_") for p in parts) or parts[-1].startswith("."):
            continue
        middle = parts[3:-1]
        name = middle[0] if middle and middle[0] not in IMMUTABLE_DIRS else "default"
        folder = "/".join(parts[:3] + ([name] if name != "default" else []))
        store = stores.setdefault(folder, Store(int(parts[1]), int(parts[2]), name, folder))
        rest = parts[3 + (name != "default"):]
        if len(rest) == 2 and rest[0] in IMMUTABLE_DIRS:
            store.immutable[rest[1]] = rel
        elif len(rest) == 1:
            match = _VERSIONED.match(rest[0])
            if match:
                store.unique_ids = store.unique_ids or bool(match.group(2))
                store.versions.setdefault(int(match.group(1)), {})[match.group(3)] = rel
    texts = read([tree.path(f"offsets/{b}") for b in offsets])
    meta = {b: _batch_metadata(texts.get(tree.path(f"offsets/{b}"))) for b in offsets}
    confs = {b: m.get("conf") if isinstance(m.get("conf"), dict) else {} for b, m in meta.items()}
    times = {b: int(m["batchTimestampMs"]) for b, m in meta.items() if isinstance(m.get("batchTimestampMs"), int)}
    return CheckpointFiles(tree, offsets, commits, sorted(stores.values(), key=lambda s: s.folder), confs, times, {})


def _batch_metadata(data: bytes | None) -> dict:
    """The batch metadata of an offset log entry (`v1`, then this JSON, then one line per source)."""
    lines = (data or b"").decode("utf-8", errors="replace").splitlines()
    try:
        meta = json.loads(lines[1])
    except (IndexError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def load_references(files: CheckpointFiles, read: Callable[[list[str]], Mapping[str, bytes]],
                    from_version: Callable[[Store], int] = lambda store: 0) -> None:
    """Read the metadata of the zips at or above `from_version(store)` (the ones retention keeps)."""
    wanted = []
    for store in files.stores:
        low = from_version(store)
        wanted += [path for v, kinds in store.versions.items() if v >= low
                   for kind, path in kinds.items() if kind == "zip" and path not in files.references]
    data = read([files.tree.path(p) for p in wanted])
    for rel in wanted:
        raw = data.get(files.tree.path(rel))
        files.references[rel] = zip_references(raw) if raw is not None else None


@dataclass(frozen=True)
class History:
    """What retention may remove from one checkpoint for a floor batch F (every batch >= F stays restorable)."""

    floor: int
    state: tuple[str, ...]        # versions below each store's base (with their checksums)
    logs: tuple[str, ...]         # offsets before F-1, commits before F
    unreferenced: tuple[str, ...]  # immutable files no kept snapshot names
    temp: tuple[str, ...]         # temp files of interrupted writes, checksums of missing files
    problems: tuple[str, ...]     # why nothing (or less) may be removed


def _with_crc(tree: Tree, rels: list[str]) -> list[str]:
    return sorted({r for rel in rels for r in (rel, crc_of(rel)) if r in tree})


def history(files: CheckpointFiles, floor: int, *, live: bool) -> History:
    """Files not needed to restart from any batch in [floor, latest]. `live`: someone holds the job's lease
    (a query may be writing): then only provably unreferenced files, as Spark's own cleanup decides them:
    versions below the base, and immutable files older than every file a kept snapshot names. Temp files
    are listed either way; only a caller that knows no lease is held may delete them."""
    tree, latest = files.tree, files.latest
    problems: list[str] = []
    if latest is None:
        return History(floor, (), (), (), (), ("no committed batch",))
    floor = min(max(floor, 0), latest)
    restorable = set(files.restorable_batches())
    lost = [b for b in range(floor, latest + 1) if b not in restorable]
    if lost:
        problems.append(f"batch {lost[0]} cannot be restored from its files (of {floor}..{latest}): "
                        "retention leaves this checkpoint's files alone")
    formats = [s.folder for s in files.stores if s.unique_ids]
    if formats:
        problems.append(f"{formats[0]} uses checkpoint format v2 (<version>_<id> files): its files are left alone")
    names = {posixpath.split(rel) for rel in tree.files}  # temp files: listed live or not, the caller decides
    temp = [rel for rel in tree.files if TEMP.match(posixpath.basename(rel))]
    for rel in tree.files:  # `.x.crc` whose `x` is gone
        folder, name = posixpath.split(rel)
        if name.startswith(".") and name.endswith(".crc") and not TEMP.match(name):
            if (folder, name[1:-4]) not in names and rel not in temp:
                temp.append(rel)
    if problems:
        return History(floor, (), (), (), tuple(sorted(temp)), tuple(problems))
    logs = [f"offsets/{b}" for b in files.offsets if b < floor - 1] + [f"commits/{b}" for b in files.commits if b < floor]
    state, unreferenced = [], []
    for store in files.stores:
        base = store.base(floor + 1)
        state += [path for v, kinds in store.versions.items() if v < base for path in kinds.values()]
        kept = [p for v, kinds in store.versions.items() if v >= base for k, p in kinds.items() if k == "zip"]
        if any(files.references.get(p) is None for p in kept):
            problems.append(f"{store.folder}: a snapshot's metadata could not be read; its immutable files stay")
            continue
        named = set().union(*(files.references[p] for p in kept)) if kept else set()
        loose = [name for name in store.immutable if name not in named]
        if live:  # Spark's orphan rule: older than every file a kept snapshot names (never by age alone)
            times = [tree.files[store.immutable[n]].mtime for n in named if n in store.immutable]
            oldest = min(times, default=None)
            loose = [n for n in loose if oldest is not None and tree.files[store.immutable[n]].mtime < oldest]
        unreferenced += [store.immutable[n] for n in loose]
    return History(floor, tuple(_with_crc(tree, state)), tuple(_with_crc(tree, logs)),
                   tuple(_with_crc(tree, unreferenced)), tuple(sorted(temp)), tuple(problems))


def sizes(tree: Tree, rels: tuple[str, ...] | list[str]) -> tuple[int, int]:
    """(bytes, files) of `rels` in `tree`."""
    entries: list[Entry] = [tree.files[r] for r in rels if r in tree.files]
    return sum(e.size for e in entries), len(entries)
