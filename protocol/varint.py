"""Kafka's variable-length integers, written once: unsigned (compact lengths, tagged fields)
and zigzag-signed (record fields), 10 bytes at most (Kafka's varlong bound).

The record decoders inline the one- and two-byte cases and call these for the rest."""

from __future__ import annotations

from tmqgate.protocol.compression import CorruptRecord


class VarintTooLong(CorruptRecord):
    """More than 10 bytes: no 64-bit value is that long."""


def read_uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it; IndexError when it runs to ``end``."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise IndexError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise VarintTooLong("varint longer than 10 bytes")


def read_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The zigzag (signed) varint at ``pos`` and the position after it."""
    u, pos = read_uvarint(buf, pos, end)
    return (u >> 1) ^ -(u & 1), pos


def encode_uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    """A signed value as Kafka's zigzag varint (record lengths, deltas, key/value lengths)."""
    return encode_uvarint((v << 1) if v >= 0 else (((-v) << 1) - 1))
