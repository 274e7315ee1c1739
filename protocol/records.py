"""Kafka record batches, magic v2 (the only format produce v3+ / fetch v4+ carry).

The broker moves batches around as opaque ``bytes``: it reads headers (``iter_batches``,
``parse_header``), checks CRCs and rewrites the base offset, none of which touches the records.
``decode_records`` / ``build_batch`` exist for the places that really need record contents
(query topics, control records, tests).

Batch layout (61-byte header, then the records, compressed as a whole when attributes say so)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records...

The CRC is CRC-32C from ``attributes`` to the end, so the base offset and leader epoch can be
rewritten without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import Any, NamedTuple

from crc32c import crc32c

from tmqgate.protocol import clock
from tmqgate.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED,
    CorruptRecord,
    DecompressedTooLarge,
    compress,
    decompress,
)
from tmqgate.protocol.varint import encode_varint, read_uvarint

__all__ = [
    "BatchHeader",
    "ControlRecordType",
    "CorruptRecord",
    "DecompressedTooLarge",
    "DEFAULT_MAX_DECOMPRESSED",
    "HEADER_SIZE",
    "Record",
    "RecordRef",
    "EndTxnMarker",
    "build_batch",
    "build_end_txn_marker",
    "decode_records",
    "filtered_batch",
    "scan_records",
    "iter_batches",
    "max_record_size",
    "parse_end_txn_marker",
    "parse_header",
    "verify_crc",
    "with_base_offset",
]

# ---------------------------------------------------------------------------- constants

MAGIC = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAGIC_OFFSET = 16
_MAX_TIMESTAMP_OFFSET = 35  # attributes(2) + lastOffsetDelta(4) + baseTimestamp(8) after offset 21

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset .. crc: the part outside the CRC
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount: the CRC'd part of the header
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
assert _HEADER.size == HEADER_SIZE == _PREFIX.size + _TAIL.size

_tuple_new = tuple.__new__


class BatchHeader(NamedTuple):
    """A parsed batch header; the batch is ``data[offset:offset + size]`` of the walked blob."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    offset: int = 0
    size: int = 0

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class Record(NamedTuple):
    """One decoded record; ``offset`` is absolute (base offset + offset delta)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# ---------------------------------------------------------------------------- headers

_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes of a v0/v1 message
_LEGACY_MIN_LENGTH = 14  # crc + magic + attributes + key length + value length (v0)


def _legacy_header_at(data: bytes | bytearray | memoryview, pos: int, end: int) -> BatchHeader:
    """A v0/v1 message-set entry, walked so callers can answer Kafka's own error for it
    (produce v3+ must carry magic 2) instead of CORRUPT_MESSAGE.  Fields v0/v1 lack are -1."""
    if end - pos < LOG_OVERHEAD + _LEGACY_MIN_LENGTH:
        raise CorruptRecord(f"truncated legacy message at {pos}: {end - pos} bytes")
    base_offset, length, crc, magic, attributes = _LEGACY.unpack_from(data, pos)
    size = length + LOG_OVERHEAD
    if length < _LEGACY_MIN_LENGTH or pos + size > end:
        raise CorruptRecord(f"truncated or impossible legacy message at {pos}")
    return _tuple_new(
        BatchHeader,
        (base_offset, length, -1, magic, crc, attributes, 0, -1, -1, -1, -1, -1, 1, pos, size),
    )


def _header_at(data: bytes | bytearray | memoryview, pos: int, end: int) -> BatchHeader:
    """Parse and sanity-check the batch header at ``pos``; never reads past ``end``."""
    if end - pos < HEADER_SIZE:
        if end - pos > _MAGIC_OFFSET and data[pos + _MAGIC_OFFSET] in (0, 1):
            return _legacy_header_at(data, pos, end)
        raise CorruptRecord(f"truncated record batch header at {pos}: {end - pos} bytes")
    f = _HEADER.unpack_from(data, pos)
    if f[3] != MAGIC:
        if f[3] in (0, 1):
            return _legacy_header_at(data, pos, end)
        raise CorruptRecord(f"unknown record batch magic {f[3]} at {pos}")
    batch_length = f[1]
    if batch_length < _MIN_BATCH_LENGTH:
        raise CorruptRecord(f"record batch length {batch_length} below the header size")
    size = batch_length + LOG_OVERHEAD
    if pos + size > end:
        raise CorruptRecord(f"truncated record batch at {pos}: needs {size}, has {end - pos}")
    if f[5] & COMPRESSION_MASK > 4:
        raise CorruptRecord(f"unknown compression codec {f[5] & COMPRESSION_MASK}")
    if f[12] < 0 or f[6] < 0:
        raise CorruptRecord("negative record count or last offset delta")
    return _tuple_new(BatchHeader, (*f, pos, size))


def iter_batches(data: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Walk a records blob batch by batch, reading headers only (no CRC, no decompression).

    Raises :class:`CorruptRecord` on a truncated or impossible batch, including a partial
    batch at the end: a produce request must not carry one.  Legacy v0/v1 message-set
    entries (same offset/length/magic positions) are yielded with their ``magic`` so the
    caller can refuse them with the right error; every other function here wants magic 2.
    """
    pos, end = 0, len(data)
    while pos < end:
        h = _header_at(data, pos, end)
        yield h
        pos += h.size


def parse_header(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Header of the batch at the start of ``batch`` (record count, timestamps, producer...)."""
    return _header_at(batch, 0, len(batch))


def verify_crc(batch: bytes | bytearray | memoryview) -> bool:
    """True if the CRC-32C of the (first) batch matches; False for anything malformed."""
    n = len(batch)
    if n < HEADER_SIZE:
        return False
    if batch[_MAGIC_OFFSET] != MAGIC:
        return False
    (batch_length,) = _I32.unpack_from(batch, 8)
    end = batch_length + LOG_OVERHEAD
    if batch_length < _MIN_BATCH_LENGTH or end > n:
        return False
    (stored,) = _U32.unpack_from(batch, _CRC_OFFSET)
    return bool(crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:end]) == stored)


def with_base_offset(batch: bytes | bytearray | memoryview, base_offset: int) -> bytes:
    """A copy of ``batch`` with its base offset replaced; the CRC stays valid (it starts later)."""
    if len(batch) < HEADER_SIZE:
        raise CorruptRecord(f"truncated record batch header: {len(batch)} bytes")
    return b"".join((_I64.pack(base_offset), memoryview(batch)[8:]))


def with_log_append_time(batch: bytes | bytearray | memoryview, timestamp: int) -> bytes:
    """A copy of ``batch`` stamped with the broker's time, as Kafka does for topics with
    message.timestamp.type=LogAppendTime: the timestamp-type bit is set, maxTimestamp becomes
    ``timestamp`` (consumers report it for every record), and the CRC is recomputed."""
    b = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", b, _ATTRIBUTES_OFFSET)
    struct.pack_into(">h", b, _ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", b, _MAX_TIMESTAMP_OFFSET, timestamp)
    (batch_length,) = _I32.unpack_from(b, 8)
    _U32.pack_into(b, _CRC_OFFSET, crc32c(memoryview(b)[_ATTRIBUTES_OFFSET:batch_length + LOG_OVERHEAD]))
    return bytes(b)


def max_record_size(batch: bytes | bytearray | memoryview) -> int:
    """Size compared with max.message.bytes: for magic v2 Kafka checks whole batches
    (LOG_OVERHEAD + batchLength); for a blob of several batches, the largest one."""
    return max((h.size for h in iter_batches(batch)), default=0)


# ---------------------------------------------------------------------------- decoding

# Per-record loop kept inlined, past C901's limit: a call per field costs measurable throughput.
def decode_records(  # noqa: C901
    batch: bytes | bytearray | memoryview,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED,
    decompressed: bytes | None = None,
) -> list[Record]:
    """Decode (decompressing if needed) the records of the batch at the start of ``batch``.

    ``max_size`` caps the decompressed size.  Any malformation — bad varints, a record whose
    fields overrun its length, trailing bytes, a record count that does not match — raises
    :class:`CorruptRecord`.  For LogAppendTime batches each record's timestamp is the batch's
    max timestamp, as Kafka consumers report it.  The CRC is not checked here.
    ``decompressed``: a compressed batch's records section already decompressed (by
    ``validate.validate_records``), used instead of decompressing again.
    """
    h = _header_at(batch, 0, len(batch))
    if h.magic != MAGIC:
        raise CorruptRecord(f"cannot decode record batch magic {h.magic}: only magic 2")
    codec = h.attributes & COMPRESSION_MASK
    if codec and decompressed is not None:
        buf = decompressed
    elif codec:
        buf = decompress(codec, memoryview(batch)[HEADER_SIZE : h.size], max_size)
    else:
        buf = bytes(memoryview(batch)[HEADER_SIZE : h.size])
    count = h.record_count
    end = len(buf)
    if count > end:  # every record takes at least 7 bytes; refuse absurd counts cheaply
        raise CorruptRecord(f"record count {count} exceeds the batch's {end} bytes")
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    uvarint = read_uvarint
    new = _tuple_new
    rec_cls = Record
    records: list[Record] = []
    append = records.append
    pos = 0
    try:
        for _ in range(count):
            # Varints are zigzag-encoded; the 1- and 2-byte cases are inlined for speed.
            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            length = (v >> 1) ^ -(v & 1)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecord(f"bad record length {length} at {pos}")
            pos += 1  # record attributes: unused by Kafka

            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            ts_delta = (v >> 1) ^ -(v & 1)

            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            offset_delta = (v >> 1) ^ -(v & 1)

            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            n = (v >> 1) ^ -(v & 1)
            if n >= 0:
                key = buf[pos : pos + n]
                pos += n
            elif n == -1:
                key = None
            else:
                raise CorruptRecord(f"bad key length {n}")

            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            n = (v >> 1) ^ -(v & 1)
            if n >= 0:
                value = buf[pos : pos + n]
                pos += n
            elif n == -1:
                value = None
            else:
                raise CorruptRecord(f"bad value length {n}")

            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            n = (v >> 1) ^ -(v & 1)
            headers: list[tuple[str, bytes | None]] = []
            if n:
                if n < 0 or 2 * n > rec_end - pos:
                    raise CorruptRecord(f"bad header count {n}")
                for _h in range(n):
                    v = buf[pos]
                    if v < 0x80:
                        pos += 1
                    elif buf[pos + 1] < 0x80:
                        v = (v & 0x7F) | (buf[pos + 1] << 7)
                        pos += 2
                    else:
                        v, pos = uvarint(buf, pos, end)
                    hk = (v >> 1) ^ -(v & 1)
                    if hk < 0 or pos + hk > rec_end:
                        raise CorruptRecord(f"bad header key length {hk}")
                    hkey = str(buf[pos : pos + hk], "utf-8")
                    pos += hk
                    v = buf[pos]
                    if v < 0x80:
                        pos += 1
                    elif buf[pos + 1] < 0x80:
                        v = (v & 0x7F) | (buf[pos + 1] << 7)
                        pos += 2
                    else:
                        v, pos = uvarint(buf, pos, end)
                    hv = (v >> 1) ^ -(v & 1)
                    if hv >= 0:
                        hval = buf[pos : pos + hv]
                        pos += hv
                    elif hv == -1:
                        hval = None
                    else:
                        raise CorruptRecord(f"bad header value length {hv}")
                    headers.append((hkey, hval))

            if pos != rec_end:
                raise CorruptRecord(f"record fields overrun or underrun its length at {pos}")
            append(
                new(
                    rec_cls,
                    (
                        base_offset + offset_delta,
                        base_ts + ts_delta if log_append_ts is None else log_append_ts,
                        key,
                        value,
                        headers,
                    ),
                )
            )
    except IndexError:
        raise CorruptRecord(f"record batch truncated inside record {len(records)}") from None
    except UnicodeDecodeError as e:
        raise CorruptRecord(f"header key is not UTF-8: {e}") from None
    if pos != end:
        raise CorruptRecord(f"{end - pos} bytes after the batch's {count} records")
    return records


# ---------------------------------------------------------------------------- building

_ZZ_LIMIT = 1 << 13  # every value in [-8192, 8192) zigzags to at most 2 bytes: cache them
_ZZ = [encode_varint(v) for v in range(-_ZZ_LIMIT, _ZZ_LIMIT)]
_NULL = _ZZ[_ZZ_LIMIT - 1]  # zigzag(-1): a null key/value


def _zz(v: int) -> bytes:
    if -_ZZ_LIMIT <= v < _ZZ_LIMIT:
        return _ZZ[v + _ZZ_LIMIT]
    return encode_varint(v)


def _as_bytes(b: Any) -> bytes | bytearray | memoryview | None:
    if b is None or isinstance(b, bytes | bytearray | memoryview):
        return b
    if isinstance(b, str):
        return b.encode()
    raise TypeError(f"record key/value/header value must be bytes or None, not {type(b).__name__}")


def _attributes(compression: int, timestamp_type: int, transactional: bool, control: bool, horizon: bool) -> int:
    """A v2 batch's attributes: the codec in the low bits, then the flags (once per batch)."""
    attributes = compression
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def build_batch(
    records: Iterable[Record | tuple[Any, ...]],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build one v2 batch.

    Each record is either a :class:`Record` — its ``offset`` is absolute, so gaps (as a
    vnode WAL has) are kept — or a tuple ``(key, value[, headers[, timestamp]])`` taking the
    offset after the previous record.  A ``None`` timestamp means now.  Keys, values and
    header values are bytes-like or None (``str`` is UTF-8 encoded).  The base timestamp is
    the first record's, as the Java producer writes it.

    For the log cleaner (Kafka's ``MemoryRecords.filterTo``): ``last_offset_delta`` keeps the
    original batch's (its last records may be gone; the producer state needs it);
    ``delete_horizon_ms`` sets the delete-horizon attribute (KIP-534), the base timestamp
    being the horizon and the records' timestamp deltas relative to it.
    """
    if compression not in (0, 1, 2, 3, 4):
        raise ValueError(f"unknown compression codec {compression}")
    parts: list[bytes | bytearray | memoryview] = []
    add = parts.append
    zz = _zz
    zz_table = _ZZ
    lim = _ZZ_LIMIT
    null = _NULL
    now: int | None = None
    base_ts: int | None = delete_horizon_ms
    max_ts = NO_TIMESTAMP  # the first record's timestamp replaces it
    ts: int | None
    headers: Any
    delta = -1
    count = 0
    for rec in records:
        if isinstance(rec, Record):
            offset, ts, key, value, headers = rec
            d = offset - base_offset
            if d <= delta:
                raise ValueError(f"record offset {offset} not above the previous one")
            delta = d
        else:
            delta += 1
            key, value = rec[0], rec[1]
            headers = rec[2] if len(rec) > 2 else None
            ts = rec[3] if len(rec) > 3 else None
        if ts is None:
            if now is None:
                now = clock.now_ms()
            ts = now
        if base_ts is None:
            base_ts = max_ts = ts
        elif ts > max_ts or count == 0:
            max_ts = ts
        body = [b"\x00", zz(ts - base_ts), zz_table[delta + lim] if delta < lim else zz(delta)]
        if key is None:
            body.append(null)
        else:
            if not isinstance(key, bytes):
                key = _as_bytes(key)
            body.append(zz(len(key)))
            body.append(key)
        if value is None:
            body.append(null)
        else:
            if not isinstance(value, bytes):
                value = _as_bytes(value)
            body.append(zz(len(value)))
            body.append(value)
        if headers:
            body.append(zz(len(headers)))
            for hk, hv in headers:
                hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
                body.append(zz(len(hkb)))
                body.append(hkb)
                if hv is None:
                    body.append(null)
                else:
                    if not isinstance(hv, bytes):
                        hv = _as_bytes(hv)
                    body.append(zz(len(hv)))
                    body.append(hv)
        else:
            body.append(b"\x00")
        rec_bytes = b"".join(body)
        add(zz(len(rec_bytes)))
        add(rec_bytes)
        count += 1
    if delta >= 1 << 31:
        raise ValueError("offset delta does not fit in int32")
    payload = b"".join(parts)
    if compression:
        payload = compress(compression, payload)
    tail = _TAIL.pack(
        _attributes(compression, timestamp_type, is_transactional, is_control, delete_horizon_ms is not None),
        max(delta, 0) if last_offset_delta is None else last_offset_delta,
        NO_TIMESTAMP if base_ts is None else base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c(payload, crc32c(tail))
    head = _PREFIX.pack(base_offset, _MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC, crc)
    return b"".join((head, tail, payload))


# ---------------------------------------------------------------------------- the log cleaner


class RecordRef(NamedTuple):
    """A record as the log cleaner needs it, without decoding its value or headers: its
    absolute offset and timestamp, its key (None: no key), whether its value is null (a
    tombstone), and where its bytes (length varint included) lie in the records section."""

    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool
    start: int
    end: int


def scan_records(
    batch: bytes | bytearray | memoryview, *, max_size: int = DEFAULT_MAX_DECOMPRESSED
) -> tuple[bytes, list[RecordRef]]:
    """The batch's records section (decompressed) and a :class:`RecordRef` per record: the
    length, timestamp, offset and key of each are read, the rest is stepped over (what a
    cleaner's key map and filter need, a few times cheaper than :func:`decode_records`)."""
    h = _header_at(batch, 0, len(batch))
    if h.magic != MAGIC:
        raise CorruptRecord(f"cannot scan record batch magic {h.magic}: only magic 2")
    codec = h.attributes & COMPRESSION_MASK
    if codec:
        buf = decompress(codec, memoryview(batch)[HEADER_SIZE : h.size], max_size)
    else:
        buf = bytes(memoryview(batch)[HEADER_SIZE : h.size])
    end = len(buf)
    base_offset = h.base_offset
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    uvarint = read_uvarint
    new = _tuple_new
    refs: list[RecordRef] = []
    append = refs.append
    pos = 0
    try:
        for _ in range(h.record_count):
            start = pos
            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            length = (v >> 1) ^ -(v & 1)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecord(f"bad record length {length} at {pos}")
            pos += 1  # attributes
            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            ts_delta = (v >> 1) ^ -(v & 1)
            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            offset_delta = (v >> 1) ^ -(v & 1)
            v = buf[pos]
            if v < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                v, pos = uvarint(buf, pos, end)
            n = (v >> 1) ^ -(v & 1)
            if n >= 0:
                key: bytes | None = buf[pos : pos + n]
                pos += n
            else:
                key = None
            tombstone = buf[pos] == 1  # zigzag(-1): a null value
            append(new(RecordRef, (base_offset + offset_delta,
                                   base_ts + ts_delta if log_append_ts is None else log_append_ts,
                                   key, tombstone, start, rec_end)))
            pos = rec_end
    except IndexError:
        raise CorruptRecord("record batch truncated") from None
    if pos != end:
        raise CorruptRecord(f"{end - pos} bytes remain after the batch's records")
    return buf, refs


def filtered_batch(batch: bytes | bytearray | memoryview, buf: bytes, kept: list[RecordRef]) -> bytes:
    """The batch with only the ``kept`` records (refs from :func:`scan_records` over ``buf``),
    their bytes copied as they are: the header is kept (base offset, last offset delta,
    base timestamp, producer id, epoch, base sequence, attributes), the record count, the
    max timestamp (CreateTime: the kept records' largest) and the CRC are recomputed, the
    records compressed again with the batch's codec (Kafka's ``MemoryRecords.filterTo``)."""
    h = _header_at(batch, 0, len(batch))
    payload = b"".join([buf[r.start : r.end] for r in kept])
    codec = h.attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload)
    max_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else max(r.timestamp for r in kept)
    tail = _TAIL.pack(h.attributes, h.last_offset_delta, h.base_timestamp, max_ts, h.producer_id,
                      h.producer_epoch, h.base_sequence, len(kept))
    crc = crc32c(payload, crc32c(tail))
    head = _PREFIX.pack(h.base_offset, _MIN_BATCH_LENGTH + len(payload), h.partition_leader_epoch, MAGIC, crc)
    return b"".join((head, tail, payload))


# ---------------------------------------------------------------------------- control batches


class ControlRecordType(IntEnum):
    """The type in a control record's key (Kafka's ControlRecordType); ABORT and COMMIT are
    the transaction markers."""

    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    """A transaction marker's content (Kafka's EndTransactionMarker)."""

    commit: bool
    coordinator_epoch: int


_CONTROL_KEY = struct.Struct(">hh")  # version 0, type
_END_TXN_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    *,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A commit or abort marker as Kafka writes it: one control batch (attributes
    transactional | control) of the producer's id and epoch, base sequence -1, holding one
    record whose key is (version 0, type) and value (version 0, coordinator epoch)."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = (_CONTROL_KEY.pack(0, kind), _END_TXN_VALUE.pack(0, coordinator_epoch), None, timestamp)
    return build_batch(
        (record,),
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_end_txn_marker(batch: bytes | bytearray | memoryview) -> EndTxnMarker:
    """The marker of a control batch; ``CorruptRecord`` if it is not a transaction marker."""
    header = parse_header(batch)
    if not header.is_control:
        raise CorruptRecord("not a control batch")
    records = decode_records(batch)
    if len(records) != 1 or records[0].key is None or records[0].value is None:
        raise CorruptRecord("a transaction marker batch holds one record with a key and a value")
    key, value = bytes(records[0].key), bytes(records[0].value)
    if len(key) < _CONTROL_KEY.size or len(value) < _END_TXN_VALUE.size:
        raise CorruptRecord("transaction marker key or value too short")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0 or kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise CorruptRecord(f"control record type {kind} is not a transaction marker")
    value_version, epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecord(f"invalid transaction marker version {value_version}")
    return EndTxnMarker(kind == ControlRecordType.COMMIT, epoch)
