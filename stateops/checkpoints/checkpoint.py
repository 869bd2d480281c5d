"""A streaming checkpoint as data, read with the filesystem layer only (no JVM, cheap enough for ticks).

Layout read here (Spark 4): metadata (query id), offsets/<batch> (v1, then the batch metadata with the
watermark, then one offset per source), commits/<batch>, state/<operator>/<partition>/[<store>/]files,
state/<operator>/_metadata. Batches are committed when commits/<batch> exists.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from stateops.errors import StateOpsError
from stateops.storage import exists, filesystem, find_files, is_dir, names, read_text

_BATCH_FILE = re.compile(r"^\d+$")
# RocksDB: <v>.changelog, <v>.zip (snapshot), SSTs/*.sst; HDFS provider: <v>.delta, <v>.snapshot.
_VERSIONED = re.compile(r"^(\d+)(?:_[0-9a-f-]+)?\.(changelog|zip|delta|snapshot)$")
# RocksDB's immutable files, shared between versions and named in each version's zip: SSTs/*.sst and
# archived WAL files logs/*.log (in a store's folder, next to the versioned files).
IMMUTABLE_DIRS = ("SSTs", "logs")
IMMUTABLE_KINDS = {".sst": "sst", ".log": "log"}


class NotACheckpointError(StateOpsError):
    """The path is missing, empty, or not a Structured Streaming checkpoint."""


@dataclass(frozen=True)
class StateFile:
    operator_id: int
    partition_id: int
    store_name: str
    path: str
    size: int
    kind: str  # changelog | zip | delta | snapshot | sst | log | other
    version: int | None


def watermark_of(batch_metadata: dict) -> datetime | None:
    """The watermark in a batch's metadata (Checkpoint.batch_metadata); None before the first watermark."""
    millis = batch_metadata.get("batchWatermarkMs", 0)
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc) if millis else None


def provider_of(batch_metadata: dict) -> str | None:
    """The state store provider a batch's metadata records."""
    return batch_metadata.get("conf", {}).get("spark.sql.streaming.stateStore.providerClass")


@dataclass(frozen=True)
class Checkpoint:
    path: str

    def _join(self, *parts: str) -> str:
        return posixpath.join(self.path.rstrip("/"), *parts)

    @classmethod
    def open(cls, path: str) -> "Checkpoint":
        """Refuse, with a clear message, anything that is not a checkpoint."""
        if not exists(path):
            raise NotACheckpointError(f"{path}: does not exist; pass a job name or a checkpoint directory")
        if not is_dir(path):
            raise NotACheckpointError(f"{path}: is a file, not a checkpoint directory")
        if not exists(posixpath.join(path, "metadata")) or not exists(posixpath.join(path, "offsets")):
            raise NotACheckpointError(
                f"{path}: not a Structured Streaming checkpoint (no metadata or offsets/); "
                "has the job run yet? (stateops jobs run NAME)")
        return cls(path)

    def query_id(self) -> str:
        return json.loads(read_text(self._join("metadata")).splitlines()[0])["id"]

    def _batches(self, folder: str) -> list[int]:
        return sorted(int(name) for name in names(self._join(folder)) or () if _BATCH_FILE.match(name))

    def offset_batches(self) -> list[int]:
        return self._batches("offsets")

    def committed_batches(self) -> list[int]:
        return self._batches("commits")

    def latest_committed_batch(self) -> int:
        committed = self.committed_batches()
        if not committed:
            raise NotACheckpointError(f"{self.path}: no committed batch yet; run the job first")
        return committed[-1]

    def _offset_lines(self, batch_id: int) -> list[str]:
        try:
            return read_text(self._join("offsets", str(batch_id))).splitlines()
        except FileNotFoundError:
            raise NotACheckpointError(f"{self.path}: batch {batch_id} is not in the offset log "
                                      f"(available: {self.offset_batches()[:1]}..{self.offset_batches()[-1:]})") from None

    def checkpoint_format(self, batch_id: int) -> int:
        """The checkpoint format a committed batch was written in: its commit file's version (`v2`: the state
        files carry unique ids, recorded in the commit as `stateUniqueIds`); 1 for a batch not committed."""
        try:
            header = read_text(self._join("commits", str(batch_id))).split("\n", 1)[0].strip()
        except FileNotFoundError:
            return 1
        return int(header[1:]) if header.startswith("v") and header[1:].isdigit() else 1

    def batch_metadata(self, batch_id: int) -> dict:
        """The offset log's metadata line for a batch: batchWatermarkMs, batchTimestampMs, conf."""
        return json.loads(self._offset_lines(batch_id)[1])

    def source_offsets(self, batch_id: int) -> list[dict | None]:
        """One offset per source for a batch (file sources: {"logOffset": n}); None where unreadable."""
        offsets = []
        for line in self._offset_lines(batch_id)[2:]:
            try:
                offsets.append(json.loads(line))
            except ValueError:
                offsets.append(None)
        return offsets

    def source_files(self) -> dict[int, list[tuple[str, int]]]:
        """File sources' logs: source index -> [(file path, source batch id)], in batch order."""
        return {index: sorted(((path, int(entry["batchId"])) for path, entry in self.source_log(index).items()),
                              key=lambda item: item[1])
                for index in self.file_sources()}

    def file_sources(self) -> list[int]:
        """The indexes of the sources that keep a file log (`sources/<index>/`: Spark's file source)."""
        fs, root = filesystem(self._join("sources"))
        if not fs.exists(root):
            return []
        return sorted(int(name) for name in (posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False))
                      if name.isdigit())

    def source_log(self, index: int) -> dict[str, dict]:
        """A file source's log (its batch files and compactions, `v1` then one JSON entry a line): file path ->
        its entry {"path", "timestamp", "batchId"}, the newest entry where a path repeats."""
        fs, folder = filesystem(self._join("sources", str(index)))
        seen: dict[str, dict] = {}
        if not fs.exists(folder):
            return seen
        entries = [e for e in fs.ls(folder, detail=False) if not posixpath.basename(e).startswith(".")
                   and posixpath.basename(e).split(".")[0].isdigit()]
        for entry in sorted(entries, key=lambda e: int(posixpath.basename(e).split(".")[0])):
            with fs.open(entry, "r") as handle:
                for line in handle.read().splitlines()[1:]:
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and "path" in record and "batchId" in record:
                        seen[record["path"]] = record
        return seen

    def watermark(self, batch_id: int) -> datetime | None:
        """The event-time watermark in force during `batch_id` (None before the first watermark)."""
        return watermark_of(self.batch_metadata(batch_id))

    def shuffle_partitions(self, batch_id: int) -> int | None:
        value = self.batch_metadata(batch_id).get("conf", {}).get("spark.sql.shuffle.partitions")
        return int(value) if value else None

    def state_provider(self, batch_id: int) -> str | None:
        return provider_of(self.batch_metadata(batch_id))

    def operator_ids(self) -> list[int]:
        return sorted(int(name) for name in names(self._join("state")) or () if name.isdigit())

    def state_partitions(self, batch_id: int, files: list[StateFile] | None = None) -> dict[tuple[int, str], int]:
        """(operator, store) -> partitions that wrote state version `batch_id + 1` (the version batch_id
        committed), counted from the state files themselves: `state-metadata` keeps the count the operator
        was created with, also after an offline repartition. `files`: state_files() when the caller has them."""
        written: dict[tuple[int, str], set[int]] = {}
        for f in self.state_files() if files is None else files:
            if f.version == batch_id + 1:
                written.setdefault((f.operator_id, f.store_name), set()).add(f.partition_id)
        return {store: len(partitions) for store, partitions in written.items()}

    def state_files(self) -> list[StateFile]:
        """Every state file with its operator, partition, store and size, from one recursive listing."""
        fs, root = filesystem(self._join("state"))
        if not fs.exists(root):
            return []
        files, prefix = [], root.rstrip("/") + "/"
        for path, info in find_files(fs, root).items():
            rel = (path[len(prefix):] if path.startswith(prefix) else posixpath.relpath(path, root)).split("/")
            name = rel[-1]
            if (name.startswith(".") or len(rel) < 3 or not rel[0].isdigit() or not rel[1].isdigit()
                    or any(part.startswith("_") for part in rel)):
                continue  # crc files, _metadata (schemas), anything not under <op>/<partition>/
            middle = rel[2:-1]
            store = "default"
            if middle and middle[0] not in IMMUTABLE_DIRS:
                store = middle[0]
            match = _VERSIONED.match(name)
            if match:
                kind, version = match.group(2), int(match.group(1))
            else:
                kind, version = IMMUTABLE_KINDS.get(posixpath.splitext(name)[1], "other"), None
            files.append(StateFile(int(rel[0]), int(rel[1]), store, path, int(info.get("size") or 0),
                                   kind, version))
        return files
