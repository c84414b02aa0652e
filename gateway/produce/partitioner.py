"""Kafka's default partitioner: murmur2(key) for keyed records, sticky for key-less ones.

A keyed record goes to the partition a Kafka producer would pick for the same key bytes, so
Sluice and Kafka clients can share a topic's key layout.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@lru_cache(maxsize=65536)
def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (32-bit, seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """`toPositive(murmur2(key)) % partitions`, exactly as Kafka's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Key-less records of one request stay together; successive requests rotate partitions."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def next_partition(self, partitions: int, pinned_by: bytes | None = None) -> int:
        """The partition for a request's key-less records; `pinned_by` makes it deterministic
        (used for idempotent requests, so a retry lands where the first attempt did)."""
        if pinned_by is not None:
            return partition_for_key(pinned_by, partitions)
        return next(self._counter) % partitions
