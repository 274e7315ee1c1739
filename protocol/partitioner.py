"""The Java client's default partitioner hash, so the broker needs no client library at run time.

Kafka's producers place a keyed record in partition ``toPositive(murmur2(key)) % partitions``
(``org.apache.kafka.common.utils.Utils.murmur2`` / ``BuiltInPartitioner``); whatever must agree
with them (e.g. a child table's home vnode) uses the same hash.
"""

from __future__ import annotations

__all__ = ["murmur2", "partition_for"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 of ``data`` as Kafka computes it, as an unsigned 32-bit int (Java's int
    reinterpreted; ``& 0x7FFFFFFF`` gives Kafka's ``toPositive``)."""
    data = bytes(data)
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra >= 3:
        h ^= data[end + 2] << 16
    if extra >= 2:
        h ^= data[end + 1] << 8
    if extra >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes | bytearray | memoryview, partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
