"""The shared fake-checkpoint builder (tests/support/fake_checkpoint.py) writes what the product's readers expect: the
files, names and bytes as Spark 4 writes them, read back through stateops.checkpoints.checkpoint and the retention
listing (so a test built on it tests the product, not the builder's own idea of a checkpoint)."""
from __future__ import annotations

import json
import zipfile
import zlib

import pytest

from stateops.checkpoints.checkpoint import Checkpoint
from stateops.checkpoints.listing import zip_references
from tests.support.fake_checkpoint import HDFS, ROCKSDB, FakeCheckpoint, hadoop_crc

pytestmark = pytest.mark.unit


def test_logs_are_written_in_sparks_format_and_read_back_by_checkpoint(tmp_path):
    cp = FakeCheckpoint(tmp_path / "cp", "q-7", provider=HDFS, partitions=3)
    cp.batch(0, watermark_ms=0, timestamp_ms=5)
    cp.batch(1, watermark_ms=1_767_225_600_000, next_watermark_ms=9, sources=[{"logOffset": 4}, "garbage"])
    cp.batch(2, commit=False)
    assert (tmp_path / "cp" / "metadata").read_text() == '{"id":"q-7"}'
    assert (tmp_path / "cp" / "commits" / "1").read_text() == 'v1\n{"nextBatchWatermarkMs":9}'
    lines = (tmp_path / "cp" / "offsets" / "1").read_text().split("\n")
    assert lines[0] == "v1" and lines[2:] == ['{"logOffset":4}', "garbage"]
    checkpoint = Checkpoint.open(cp.path)
    assert checkpoint.query_id() == "q-7"
    assert (checkpoint.offset_batches(), checkpoint.committed_batches()) == ([0, 1, 2], [0, 1])
    assert checkpoint.watermark(0) is None and checkpoint.watermark(1).isoformat() == "2026-01-01T00:00:00+00:00"
    assert checkpoint.source_offsets(1) == [{"logOffset": 4}, None]
    assert (checkpoint.state_provider(2), checkpoint.shuffle_partitions(2)) == (HDFS, 3)
    assert checkpoint.batch_metadata(0)["batchTimestampMs"] == 5


def test_state_files_zips_and_checksums(tmp_path):
    cp = FakeCheckpoint(tmp_path / "cp", provider=ROCKSDB, crc=True).batches(range(2))
    cp.store(0, partitions=2, store="left-keyToNumValues", changelog=[1, 2], zip={2: ["a.sst", "w.log"]},
             missing=["w.log"], size=7)
    files = sorted((f.partition_id, f.store_name, f.kind, f.version, f.size) for f in Checkpoint(cp.path).state_files())
    assert files == [(p, "left-keyToNumValues", kind, version, size) for p in (0, 1) for kind, version, size in (
        ("changelog", 1, 7), ("changelog", 2, 7), ("sst", None, 32), ("zip", 2, cp.size(
            f"state/0/{p}/left-keyToNumValues/2.zip")))]  # w.log is named but missing
    raw = (tmp_path / "cp" / "state/0/0/left-keyToNumValues/2.zip").read_bytes()
    assert zip_references(raw) == {"a.sst", "w.log"}
    with zipfile.ZipFile(tmp_path / "cp" / "state/0/0/left-keyToNumValues/2.zip") as archive:
        meta = archive.read("metadata").decode().split("\n")
    assert meta[0] == "v1" and json.loads(meta[1])["sstFiles"][0]["dfsSstFileName"] == "a.sst"
    # Hadoop's checksum: header, bytes per checksum, one CRC32 per 512-byte chunk
    data = (tmp_path / "cp" / "offsets" / "1").read_bytes()
    crc = (tmp_path / "cp" / "offsets" / ".1.crc").read_bytes()
    assert crc == hadoop_crc(data) and crc[:8] == b"crc\x00\x00\x00\x02\x00"
    assert int.from_bytes(crc[8:12], "big") == zlib.crc32(data) and len(crc) == 12
    assert len(hadoop_crc(b"x" * 1025)) == 8 + 3 * 4
