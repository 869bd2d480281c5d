"""Spark's hash partitioning of a string key in plain Python: which shuffle partition a key's state lives on.

Spark sends a row to partition pmod(murmur3(key, seed 42), n). Its Murmur3_x86_32.hashUnsafeBytes mixes
the body 4 bytes at a time (little endian), then each trailing byte on its own as a full signed 32-bit block,
which differs from the reference murmur3's tail. The test suite checks this against Spark's own `hash()`.
"""
from __future__ import annotations

SEED = 42
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    return (_rotl(k1, 15) * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def spark_hash(text: str, seed: int = SEED) -> int:
    """Spark's `hash(text)` for a UTF-8 string column: a signed 32-bit int."""
    data = text.encode("utf-8")
    aligned = len(data) - len(data) % 4
    h1 = seed & _MASK
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    h1 = _fmix(h1, len(data))
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition(text: str, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives a single string key: pmod(hash, partitions)."""
    return spark_hash(text) % partitions
