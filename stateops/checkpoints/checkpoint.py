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
from stateops.checkpoints import source_log
from stateops.checkpoints.source_log import SOURCES
from stateops.storage import exists, filesystem, find_files, is_dir, names, read_text, remove, write_text

OFFSETS, COMMITS, STATE, METADATA = "offsets", "commits", "state", "_metadata"
SCHEMA = "schema"  # a store's schema file (format v2) in `<store folder>/_metadata/`
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


def store_dir(state_root: str, operator_id: int, partition: int, store: str = "default") -> str:
    """A store's folder for one partition under a state root (a checkpoint's `state/`, or a scratch laid out as it)."""
    return posixpath.join(state_root, str(operator_id), str(partition), *([] if store == "default" else [store]))


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
        if not exists(posixpath.join(path, "metadata")) or not exists(posixpath.join(path, OFFSETS)):
            raise NotACheckpointError(
                f"{path}: not a Structured Streaming checkpoint (no metadata or offsets/); "
                "has the job run yet? (stateops jobs run NAME)")
        return cls(path)

    def query_id(self) -> str:
        return json.loads(read_text(self._join("metadata")).splitlines()[0])["id"]

    def _batches(self, folder: str) -> list[int]:
        return sorted(int(name) for name in names(self._join(folder)) or () if _BATCH_FILE.match(name))

    def has_batches(self) -> bool:
        """Whether the offset log holds a batch (a query planned one; it may not have committed it)."""
        return bool(self.offset_batches())

    def planned(self, batch_id: int) -> bool:
        """Whether the offset log has an entry for the batch (Spark writes it before running the batch)."""
        return exists(self._join(OFFSETS, str(batch_id)))

    def batch_files(self, above: int) -> list[str]:
        """The offset and commit files of the batches after `above` (what a rewind to `above` removes)."""
        return [self._join(folder, str(batch)) for folder in (OFFSETS, COMMITS) for batch in self._batches(folder)
                if batch > above]

    def commit_metadata(self, batch_id: int) -> dict:
        """A committed batch's commit line: nextBatchWatermarkMs, and (format v2) stateUniqueIds."""
        lines = read_text(self._join(COMMITS, str(batch_id))).splitlines()
        return json.loads(lines[1]) if len(lines) > 1 else {}

    def next_watermark_ms(self, batch_id: int) -> int:
        """The watermark the batch after `batch_id` runs with, as its commit records it (0 before any)."""
        return int(self.commit_metadata(batch_id).get("nextBatchWatermarkMs", 0))

    def offset_batches(self) -> list[int]:
        return self._batches(OFFSETS)

    def committed_batches(self) -> list[int]:
        return self._batches(COMMITS)

    def latest_committed_batch(self) -> int:
        committed = self.committed_batches()
        if not committed:
            raise NotACheckpointError(f"{self.path}: no committed batch yet; run the job first")
        return committed[-1]

    def _offset_lines(self, batch_id: int) -> list[str]:
        try:
            return read_text(self._join(OFFSETS, str(batch_id))).splitlines()
        except FileNotFoundError:
            raise NotACheckpointError(f"{self.path}: batch {batch_id} is not in the offset log "
                                      f"(available: {self.offset_batches()[:1]}..{self.offset_batches()[-1:]})") from None

    def checkpoint_format(self, batch_id: int) -> int:
        """The checkpoint format a committed batch was written in: its commit file's version (`v2`: the state
        files carry unique ids, recorded in the commit as `stateUniqueIds`); 1 for a batch not committed."""
        try:
            header = read_text(self._join(COMMITS, str(batch_id))).split("\n", 1)[0].strip()
        except FileNotFoundError:
            return 1
        return int(header[1:]) if header.startswith("v") and header[1:].isdigit() else 1

    def batch_metadata(self, batch_id: int) -> dict:
        """The offset log's metadata line for a batch: batchWatermarkMs, batchTimestampMs, conf."""
        return json.loads(self._offset_lines(batch_id)[1])

    def write_planned_batch(self, batch_id: int, metadata: str) -> None:
        """An offset file with the batch's metadata and no source offsets: a scratch copy's restart point, planned
        and never run (Spark reads the metadata's confs; transformWithState reads up to the log's end)."""
        write_text(self._join(OFFSETS, str(batch_id)), f"v1\n{metadata}\n")

    def write_batch_metadata(self, batch_id: int, metadata: dict) -> None:
        """Replace a batch's metadata line in its offset file, the rest as it was, and drop its Hadoop checksum
        (Spark checks a .crc against the file when one is there, and rewrites none)."""
        path = self._join(OFFSETS, str(batch_id))
        lines = read_text(path).split("\n")
        lines[1] = json.dumps(metadata, separators=(",", ":"))
        remove(self._join(OFFSETS, f".{batch_id}.crc"))
        write_text(path, "\n".join(lines))

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
                for index in self.logged_sources()}

    def logged_sources(self) -> list[int]:
        """The indexes of the sources that keep a log folder (`sources/<index>/`: the file source's log; a Kafka
        source's holds only its first offsets)."""
        return sorted(int(name) for name in names(self._join(SOURCES)) or () if name.isdigit())

    def source_dir(self, index: int) -> str:
        return self._join(SOURCES, str(index))

    def source_log_files(self, index: int) -> dict[int, str]:
        """Source batch -> the path of the log file that holds it alone or last (`<b>` or `<b>.compact`)."""
        return {batch: posixpath.join(self.source_dir(index), name)
                for batch, name in source_log.entries(self.source_dir(index)).items()}

    def newest_source_log(self, index: int) -> str | None:
        files = self.source_log_files(index)
        return files[max(files)] if files else None

    def source_log(self, index: int) -> dict[str, dict]:
        """A file source's log (its batch files and compactions): file path -> its entry {"path", "timestamp",
        "batchId"}, the newest entry where a path repeats."""
        seen: dict[str, dict] = {}
        for _, path in sorted(self.source_log_files(index).items()):
            for record in source_log.records(read_text(path)):
                if "batchId" in record:
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
        return self.operators_under(self.state_root)

    @staticmethod
    def operators_under(state_root: str) -> list[int]:
        """The operators a state root holds folders for (`state/<op>/`)."""
        return sorted(int(name) for name in names(state_root) or () if name.isdigit())

    @property
    def state_root(self) -> str:
        return self._join(STATE)

    def state_dir(self, operator_id: int, partition: int, store: str = "default") -> str:
        """A store's folder for one partition: `state/<op>/<partition>`, and `/<store>` for a store not `default`."""
        return store_dir(self.state_root, operator_id, partition, store)

    def operator_metadata_files(self, above: int) -> list[str]:
        """The operators' metadata files of format v2 (`state/<op>/_metadata/v2/<batch>`) of batches after `above`."""
        found = []
        for op in self.operator_ids():
            folder = self._join(STATE, str(op), METADATA, "v2")
            found += [posixpath.join(folder, name) for name in names(folder) or ()
                      if name.isdigit() and int(name) > above]
        return found

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
        fs, root = filesystem(self.state_root)
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
