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

from stateops.checkpoints.profile import parse_schema_file
from stateops.checkpoints.checkpoint import Checkpoint, StateFile
from stateops.storage import filesystem


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
    base = posixpath.join(checkpoint.path.rstrip("/"), "state", str(operator_id), "_metadata")
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
    parts = [checkpoint.path.rstrip("/"), "state", str(operator_id), "0"]
    if store_name != "default":
        parts.append(store_name)
    data = _read(posixpath.join(*parts, "_metadata", "schema"))
    return parse_schema_file(data) if data else (None, None)
