"""A Structured Streaming checkpoint written by hand on local disk, laid out as Spark 4 writes it (no JVM).

For tests of code that reads checkpoint files (stateops/checkpoints/checkpoint.py, stateops/checkpoints/restart.py and
inventory.py, stateops/audit, stateops/recovery/preflight.py and stateops/checkpoints/rewind.py): every file is exactly what the
test asked for, so sizes, versions, gaps and broken files are known by construction. Formats (as found in
checkpoints Spark 4 wrote for this project's jobs):

    metadata                                   {"id":"<query id>"}
    offsets/<b>                                v1 \\n {"batchWatermarkMs":..,"batchTimestampMs":..,"conf":{..}}
                                               \\n one line per source ({"logOffset":n} for a file source)
    commits/<b>                                v1 \\n {"nextBatchWatermarkMs":..}
    sources/<i>/<b>                            file source <i>'s log: v1 \\n {"path":..,"batchId":b,..} per file
    state/<op>/_metadata/metadata              v1 \\n {"operatorInfo":{..},"stateStoreInfo":[..]}
    state/<op>/0/[<store>/]_metadata/schema    the store's key and value schema (partition 0 only)
    state/<op>/<p>/[<store>/]<v>.delta         HDFS-backed provider: one delta per version ...
    state/<op>/<p>/[<store>/]<v>.snapshot      ... and a snapshot now and then
    state/<op>/<p>/[<store>/]<v>.changelog     RocksDB with changelog checkpointing
    state/<op>/<p>/[<store>/]<v>.zip           RocksDB snapshot: a zip whose `metadata` entry is v1 \\n
                                               {"sstFiles":[{"dfsSstFileName":..}],"logFiles":[{"dfsLogFileName":..}]}
    state/<op>/<p>/[<store>/]SSTs/<name>.sst   RocksDB's immutable files, named by the zips
    state/<op>/<p>/[<store>/]logs/<name>.log   (archived WAL files, named the same way)
    <folder>/.<name>.crc                       Hadoop's checksum of <name> (crc=True: written for every file)
    <folder>/.<name>.<uuid>.tmp                a write that was interrupted before its rename (temp())

Spark writes these files without a trailing newline; so does this module. Example, an HDFS-backed store
with two partitions, ten committed batches, snapshots of versions 4 and 8:

    cp = FakeCheckpoint(tmp_path / "cp", provider=HDFS, partitions=2, crc=True)
    cp.batches(range(10))                                   # offsets/0..9, commits/0..9
    cp.store(0, partitions=2, delta=range(1, 11), snapshot=[4, 8])

or the same from one compact description:

    FakeCheckpoint.build(tmp_path / "cp", batches=range(10), provider=HDFS, partitions=2, crc=True,
                         stores=[dict(op=0, partitions=2, delta=range(1, 11), snapshot=[4, 8])])

and RocksDB snapshots name their SSTs (written too, unless `missing` lists them):

    cp.store(0, partitions=[0], changelog=range(1, 9), zip={3: ["a.sst", "b.sst"], 6: ["b.sst", "c.sst"]})
"""
from __future__ import annotations

import io
import json
import os
import posixpath
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
QUERY_ID = "00000000-0000-0000-0000-000000000000"
VERSIONED_KINDS = ("delta", "snapshot", "changelog", "zip")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def hadoop_crc(data: bytes) -> bytes:
    """Hadoop's ChecksumFileSystem sidecar: "crc\\0", bytes per checksum (512), a CRC32 per 512-byte chunk."""
    chunks = [data[i:i + 512] for i in range(0, len(data), 512)]
    return (b"crc\x00" + (512).to_bytes(4, "big")
            + b"".join((zlib.crc32(chunk) & 0xFFFFFFFF).to_bytes(4, "big") for chunk in chunks))


def crc_name(rel: str) -> str:
    """The checksum file of `rel`: `folder/.name.crc`."""
    folder, name = posixpath.split(rel)
    return posixpath.join(folder, f".{name}.crc")


def store_folder(op: int, partition: int, store: str = "default") -> str:
    """state/<op>/<partition>[/<store>] (the default store has no folder of its own)."""
    return f"state/{op}/{partition}" + ("" if store == "default" else f"/{store}")


def _partitions(value: int | Iterable[int]) -> list[int]:
    return list(range(value)) if isinstance(value, int) else list(value)


class FakeCheckpoint:
    """A checkpoint folder under construction. Methods that add one file return its path relative to the
    root; methods that add many return the checkpoint (chainable).

    provider / partitions: the Spark conf every offsets/<b> records (provider=None leaves the provider out);
    conf: more conf entries. crc: write Hadoop's `.crc` next to every file (as a local Spark run does)."""

    def __init__(self, root: str | os.PathLike, query_id: str = QUERY_ID, *, provider: str | None = ROCKSDB,
                 partitions: int | None = 2, conf: Mapping[str, str] | None = None, crc: bool = False):
        self.root = Path(root)
        self.crc = crc
        self.conf: dict[str, str] = {}
        if provider:
            self.conf[PROVIDER] = provider
        if partitions is not None:
            self.conf[SHUFFLE_PARTITIONS] = str(partitions)
        self.conf.update(conf or {})
        self.root.mkdir(parents=True, exist_ok=True)
        self.write("metadata", _json({"id": query_id}))
        (self.root / "offsets").mkdir(exist_ok=True)
        (self.root / "commits").mkdir(exist_ok=True)

    @classmethod
    def build(cls, root: str | os.PathLike, *, batches: Iterable[int] = (), stores: Sequence[Mapping] = (),
              operators: Sequence[Mapping] = (), **options) -> "FakeCheckpoint":
        """The whole checkpoint from one description: `batches` committed (offsets and commits), `operators`
        (keyword arguments of operator()), `stores` (keyword arguments of store(), `op` included);
        `options` go to the constructor (query_id, provider, partitions, conf, crc)."""
        checkpoint = cls(root, **options)
        checkpoint.batches(batches)
        for operator in operators:
            checkpoint.operator(**operator)
        for spec in stores:
            checkpoint.store(**spec)
        return checkpoint

    @property
    def path(self) -> str:
        return str(self.root)

    # --- any file -----------------------------------------------------------------------------------

    def write(self, rel: str, data: bytes | str, *, mtime: float | None = None, crc: bool | None = None) -> str:
        """Write `rel` (and its `.crc` when crc, or the checkpoint's crc, says so); `mtime` in epoch seconds."""
        raw = data.encode() if isinstance(data, str) else data
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
        written = [path]
        if (self.crc if crc is None else crc) and not path.name.startswith("."):
            sidecar = self.root / crc_name(rel)
            sidecar.write_bytes(hadoop_crc(raw))
            written.append(sidecar)
        if mtime is not None:
            for p in written:
                os.utime(p, (mtime, mtime))
        return rel

    def remove(self, rel: str) -> None:
        """Delete `rel` and its `.crc` (as a file lost, or removed by someone else)."""
        for p in (self.root / rel, self.root / crc_name(rel)):
            if p.exists():
                p.unlink()

    def temp(self, folder: str, name: str = "0", *, crc: bool = False) -> str:
        """A write interrupted before its rename: `folder/.<name>.<uuid>.tmp` (Hadoop's CheckpointFileManager)."""
        rel = posixpath.join(folder, f".{name}.{uuid.uuid4()}.tmp")
        self.write(rel, b"half a file", crc=False)
        if crc:
            self.write(crc_name(rel), hadoop_crc(b"half a file"), crc=False)
        return rel

    def files(self) -> set[str]:
        """Every file under the root, relative to it ('/'-separated)."""
        return {p.relative_to(self.root).as_posix() for p in self.root.rglob("*") if p.is_file()}

    def size(self, *rels: str) -> int:
        """Bytes of these files on disk (all files under the root when none is named)."""
        return sum((self.root / rel).stat().st_size for rel in (rels or sorted(self.files())))

    def touch(self, mtime: float, rels: Iterable[str] | None = None) -> "FakeCheckpoint":
        """Set the modification time of `rels` (default: every file) to `mtime` (epoch seconds)."""
        for rel in (self.files() if rels is None else rels):
            os.utime(self.root / rel, (mtime, mtime))
        return self

    # --- logs -----------------------------------------------------------------------------------------

    def offset(self, batch: int, *, watermark_ms: int = 0, timestamp_ms: int = 0,
               conf: Mapping[str, str] | None = None, sources: Sequence[Any] | None = None) -> str:
        """offsets/<batch>: v1, the batch metadata (watermark, planning time, conf), one offset per source
        (default: one file source at logOffset <batch>; a string is written as it is)."""
        meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": timestamp_ms,
                "conf": {**self.conf, **(conf or {})}}
        lines = ["v1", _json(meta)] + [s if isinstance(s, str) else _json(s)
                                       for s in (sources if sources is not None else [{"logOffset": batch}])]
        return self.write(f"offsets/{batch}", "\n".join(lines))

    def commit(self, batch: int, *, next_watermark_ms: int = 0) -> str:
        """commits/<batch>: v1 and the watermark the next batch runs with."""
        return self.write(f"commits/{batch}", "v1\n" + _json({"nextBatchWatermarkMs": next_watermark_ms}))

    def batch(self, batch: int, *, commit: bool = True, next_watermark_ms: int = 0, **offset) -> "FakeCheckpoint":
        """offsets/<batch> (keywords of offset()) and, when `commit`, commits/<batch>."""
        self.offset(batch, **offset)
        if commit:
            self.commit(batch, next_watermark_ms=next_watermark_ms)
        return self

    def batches(self, ids: Iterable[int], **batch) -> "FakeCheckpoint":
        for b in ids:
            self.batch(b, **batch)
        return self

    def source(self, index: int, batch: int, paths: Sequence[str], *, timestamp_ms: int = 0) -> str:
        """sources/<index>/<batch>: the files file source <index> read in its batch <batch>."""
        lines = ["v1"] + [_json({"path": p, "timestamp": timestamp_ms, "batchId": batch}) for p in paths]
        return self.write(f"sources/{index}/{batch}", "\n".join(lines))

    # --- state ------------------------------------------------------------------------------------------

    def operator(self, op: int, name: str, *, stores: Sequence[str] = ("default",), partitions: int | None = None,
                 schema: bytes | None = None) -> "FakeCheckpoint":
        """state/<op>/_metadata/metadata (v1, operator info, one entry per store) and, given `schema`, each
        store's schema file in partition 0."""
        count = int(partitions if partitions is not None else self.conf.get(SHUFFLE_PARTITIONS, 1))
        info = {"operatorInfo": {"operatorId": op, "operatorName": name},
                "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": count} for s in stores]}
        self.write(f"state/{op}/_metadata/metadata", "v1\n" + _json(info))
        if schema is not None:
            for s in stores:
                self.write(f"{store_folder(op, 0, s)}/_metadata/schema", schema)
        return self

    def state(self, op: int, partition: int, version: int, kind: str, *, store: str = "default", size: int = 16,
              data: bytes | None = None, mtime: float | None = None) -> str:
        """One versioned state file, <version>.<kind> (delta, snapshot, changelog; zip: see rocksdb_zip)."""
        if kind not in VERSIONED_KINDS:
            raise ValueError(f"kind {kind!r}: use one of {VERSIONED_KINDS}")
        return self.write(f"{store_folder(op, partition, store)}/{version}.{kind}",
                          data if data is not None else bytes([version % 251]) * size, mtime=mtime)

    def immutable(self, op: int, partition: int, name: str, *, store: str = "default", size: int = 32,
                  mtime: float | None = None) -> str:
        """A RocksDB immutable file: SSTs/<name> for `.sst`, logs/<name> for `.log`."""
        folder = "logs" if name.endswith(".log") else "SSTs"
        return self.write(f"{store_folder(op, partition, store)}/{folder}/{name}", b"s" * size, mtime=mtime)

    @staticmethod
    def zip_bytes(ssts: Sequence[str] = (), logs: Sequence[str] = (), *, size: int = 32) -> bytes:
        """A RocksDB snapshot zip: its `metadata` entry names the SSTs and archived logs it needs."""
        meta = {"sstFiles": [{"localFileName": f"{i:06d}.sst", "dfsSstFileName": n, "sizeBytes": size}
                             for i, n in enumerate(ssts, 1)],
                "logFiles": [{"localFileName": f"{i:06d}.log", "dfsLogFileName": n, "sizeBytes": size}
                             for i, n in enumerate(logs, 1)],
                "numKeys": 0, "numInternalKeys": 0, "columnFamilyMapping": {}, "columnFamilyTypeMap": {},
                "maxColumnFamilyId": 0}
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("CURRENT", "MANIFEST-000005\n")
            archive.writestr("MANIFEST-000005", b"\x00" * 16)
            archive.writestr("metadata", "v1\n" + _json(meta))
        return buffer.getvalue()

    def rocksdb_zip(self, op: int, partition: int, version: int, ssts: Sequence[str] = (), *,
                    logs: Sequence[str] = (), store: str = "default", missing: Iterable[str] = (),
                    mtime: float | None = None) -> str:
        """<version>.zip naming `ssts` and `logs`; each named file is written too (if not there yet), except
        those in `missing`."""
        skip = set(missing)
        for name in [*ssts, *logs]:
            folder = "logs" if name.endswith(".log") else "SSTs"
            if name not in skip and not (self.root / store_folder(op, partition, store) / folder / name).exists():
                self.immutable(op, partition, name, store=store, mtime=mtime)
        return self.write(f"{store_folder(op, partition, store)}/{version}.zip", self.zip_bytes(ssts, logs),
                          mtime=mtime)

    def store(self, op: int, *, partitions: int | Iterable[int] = 1, store: str = "default",
              delta: Iterable[int] = (), snapshot: Iterable[int] = (), changelog: Iterable[int] = (),
              zip: Mapping[int, Sequence[str]] | Iterable[int] = (), missing: Iterable[str] = (),
              size: int = 16) -> "FakeCheckpoint":
        """A store's versions in each of `partitions` (a count or the ids): `delta`, `snapshot`, `changelog`
        versions, and `zip` versions (a mapping version -> the SSTs/logs it names, or just the versions)."""
        zips = zip if isinstance(zip, Mapping) else {v: () for v in zip}
        missing = list(missing)
        for p in _partitions(partitions):
            for kind, versions in (("delta", delta), ("snapshot", snapshot), ("changelog", changelog)):
                for v in versions:
                    self.state(op, p, v, kind, store=store, size=size)
            for v, names in zips.items():
                self.rocksdb_zip(op, p, v, [n for n in names if not n.endswith(".log")],
                                 logs=[n for n in names if n.endswith(".log")], store=store, missing=missing)
        return self
