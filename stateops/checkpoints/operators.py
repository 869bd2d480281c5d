"""The state on disk, per operator, store and partition, read with the filesystem layer only (no JVM).

Bytes, everywhere in the audits, mean **the state files retained on disk now** for that store and
partition: RocksDB changelogs, snapshot zips and SST files; HDFS-provider delta and snapshot files
(checksums and `_metadata` excluded). Not "the files the audited version needs": with changelog
checkpointing that set is hard to pin down (SSTs are shared between snapshots, snapshots upload
asynchronously), whereas retained files are what the checkpoint costs, what retention frees, and the
same number for fast and deep audits, so growth across audits compares like with like. Auditing an
older batch id still reports today's files.
"""
from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from stateops.checkpoints.checkpoint import IMMUTABLE_DIRS, METADATA, SCHEMA, Checkpoint, StateFile
from stateops.checkpoints.profile import JOIN, parse_schema_file
from stateops.storage import filesystem, is_dir, names


@dataclass
class StoreFiles:
    bytes_per_partition: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    files: int = 0
    min_version: int | None = None
    max_version: int | None = None

    def add(self, partition: int, size: int, version: int | None) -> None:
        self.bytes_per_partition[partition] += size
        self.files += 1
        if version is not None:
            self.min_version = version if self.min_version is None else min(self.min_version, version)
            self.max_version = version if self.max_version is None else max(self.max_version, version)


@dataclass(frozen=True)
class OperatorMeta:
    operator_id: int
    operator_name: str
    stores: tuple[tuple[str, int], ...]  # (store name, num partitions)
    properties: dict | None = None  # transformWithState: state variables
    prefix_columns: Mapping[str, int] = field(default_factory=dict)  # store -> the key's leading columns it
    # scans by (numColsPrefixKey: session windows), for stores that have any


def files_by_store(checkpoint: Checkpoint, files: list[StateFile] | None = None) -> dict[tuple[int, str], StoreFiles]:
    """(operator id, store name) -> bytes per partition and the range of versions on disk (`files`: the
    checkpoint's state_files() when the caller has them)."""
    stores: dict[tuple[int, str], StoreFiles] = defaultdict(StoreFiles)
    for f in checkpoint.state_files() if files is None else files:
        stores[(f.operator_id, f.store_name)].add(f.partition_id, f.size, f.version)
    return dict(stores)


def _read(path: str) -> bytes | None:
    fs, p = filesystem(path)
    if not fs.exists(p):
        return None
    with fs.open(p, "rb") as handle:
        return handle.read()


def operator_meta(checkpoint: Checkpoint, operator_id: int) -> OperatorMeta | None:
    """Operator name and stores from `state/<op>/_metadata/metadata` (v1) or its newest v2 file."""
    base = posixpath.join(checkpoint.state_root, str(operator_id), METADATA)
    data = _read(posixpath.join(base, "metadata"))
    if data is None:
        fs, p = filesystem(posixpath.join(base, "v2"))
        if fs.exists(p):
            versions = sorted((posixpath.basename(f) for f in fs.ls(p, detail=False)
                               if posixpath.basename(f).isdigit()), key=int)
            data = _read(posixpath.join(base, "v2", versions[-1])) if versions else None
    if data is None:
        return None
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        info = doc.get("operatorInfo", {})
        stores = tuple((s.get("storeName", "default"), int(s.get("numPartitions", 0)))
                       for s in doc.get("stateStoreInfo", []))
        props = doc.get("operatorPropertiesJson")
        prefix = {s.get("storeName", "default"): int(s["numColsPrefixKey"])
                  for s in doc.get("stateStoreInfo", []) if s.get("numColsPrefixKey")}
        return OperatorMeta(int(info.get("operatorId", operator_id)), info.get("operatorName", "unknown"),
                            stores, json.loads(props) if isinstance(props, str) and props else None, prefix)
    return None


def store_schema(checkpoint: Checkpoint, operator_id: int, store_name: str) -> tuple[dict | None, dict | None]:
    """Key and value schema JSON of a store, from partition 0's schema file (None when absent)."""
    data = _read(posixpath.join(checkpoint.state_dir(operator_id, 0, store_name), METADATA, SCHEMA))
    return parse_schema_file(data) if data else (None, None)


# What an operator is, from its stores' schema files where Spark wrote no operator metadata (before 4.0): a join's
# stores are named by side; a deduplication's value is one null `__dummy__` (with its expiry, `expiresAtMicros`,
# within the watermark); [flat]mapGroupsWithState's and applyInPandasWithState's value is the group's state in
# `groupState` (the two write the same shape, so both read as flatMapGroupsWithState); an aggregation's value is its
# buffers. A session window's key scans by its leading columns (numColsPrefixKey), which no file before Spark 4.0
# records, so it is not guessed: it stays unnamed, and a reader of it refuses.
_SESSION = "spark.sessionWindow"


def _named_by_schema(stores: list[str], schemas: Mapping[str, tuple[dict | None, dict | None]]) -> str | None:
    if stores and all(store.startswith(("left-", "right-")) for store in stores):
        return JOIN
    key, value = schemas.get("default", (None, None))
    if value is None:
        return None
    names = {f.get("name") for f in value.get("fields", [])}
    if any(_SESSION in (f.get("metadata") or {}) for f in (key or {}).get("fields", [])):
        return None
    if "expiresAtMicros" in names:
        return "dedupeWithinWatermark"
    if names == {"__dummy__"}:
        return "dedupe"
    if "groupState" in names:
        return "flatMapGroupsWithState"
    return "stateStoreSave"


def _store_folders(checkpoint: Checkpoint, operator_id: int) -> list[str]:
    """The stores of an operator, from partition 0's folder: `default` where its files lie there, else one
    folder per store (a join's four); RocksDB's shared files and the schema folder are not stores."""
    listed = names(checkpoint.state_dir(operator_id, 0)) or []
    stores = sorted(n for n in listed if "." not in n and not n.startswith(("_", ".")) and n not in IMMUTABLE_DIRS
                    and is_dir(checkpoint.state_dir(operator_id, 0, n)))
    return stores or ["default"]


def _from_files(checkpoint: Checkpoint, operator_id: int) -> OperatorMeta | None:
    stores = _store_folders(checkpoint, operator_id)
    name = _named_by_schema(stores, {store: store_schema(checkpoint, operator_id, store) for store in stores})
    if name is None:
        return None
    partitions = len([n for n in names(posixpath.join(checkpoint.state_root, str(operator_id))) or () if n.isdigit()])
    return OperatorMeta(operator_id, name, tuple((store, partitions) for store in stores))


def describe(checkpoint: Checkpoint, operator_id: int) -> OperatorMeta | None:
    """An operator as Spark's operator metadata records it, or, where there is none (a checkpoint written before
    Spark 4.0), as its store folders and schema files show it; None when neither tells."""
    return operator_meta(checkpoint, operator_id) or _from_files(checkpoint, operator_id)
