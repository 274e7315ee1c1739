"""Record-level validation of a produced v2 batch, as Apache Kafka's ``LogValidator`` does it.

A batch whose CRC is right can still carry records no consumer can read: a compressed payload
that does not decompress, filler bytes, a header that says 1 record over 3.  Kafka parses every
record of every batch before appending it (decompressing compressed ones); so does
:func:`validate_records`, without building any record object: it walks the varints in place
and raises :class:`InvalidRecords` (with the index of the first bad record where there is one)
or :class:`DecompressedTooLarge` (the decompressed records would pass ``max_size``; the
codecs stop there instead of allocating the rest).

What is checked, per Kafka's ``DefaultRecordBatch`` / ``DefaultRecord.readFrom``:

- the header's record count is positive and matches ``lastOffsetDelta + 1``;
- the payload decompresses (bounded by ``max_size``);
- each record: its length varint is sane and its fields (attributes, timestamp delta, offset
  delta, key, value, header count, header keys and values) end exactly where the length says;
  key/value/header-value lengths are >= -1, header key lengths and the header count >= 0;
- each record's offset delta is its index (every client writes them so, and offsets of the
  stored batch are base offset + delta);
- no bytes remain after the declared number of records, and no record is missing.

The result carries the smallest and largest record timestamps (CreateTime), with the
indexes of the records holding them, so timestamp limits can name the offending record, and
the indexes of keyless records (a compacted topic refuses them).
"""

from __future__ import annotations

from typing import NamedTuple

from tmqgate.protocol.compression import CorruptRecord, DecompressedTooLarge, decompress
from tmqgate.protocol.varint import read_varint

__all__ = ["InvalidRecords", "DecompressedTooLarge", "Validated", "validate_records"]

_HEADER_SIZE = 61
_COMPRESSION_MASK = 0x07


class InvalidRecords(CorruptRecord):
    """The batch's records are malformed; ``index`` is the first bad record's (None if the
    batch as a whole is at fault: its payload does not decompress, or its count is wrong)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class Validated(NamedTuple):
    """What validation learnt: decompressed records size and the record timestamp range;
    for a compressed batch, ``records`` is its records section decompressed (so a caller that
    needs the records, schemaless ingestion, decodes them without decompressing again)."""

    records_size: int
    min_timestamp: int
    min_index: int
    max_timestamp: int
    max_index: int
    records: bytes | None = None
    keyless: tuple[int, ...] = ()  # indexes of the records without a key (null key)


def validate_records(batch: bytes | memoryview, record_count: int, last_offset_delta: int,
                     attributes: int, base_timestamp: int, size: int,
                     max_size: int) -> Validated:
    """Check every record of the v2 batch ``batch[:size]`` (header fields as parsed).

    ``max_size`` bounds the decompressed (or, uncompressed, the plain) records section.
    Raises :class:`InvalidRecords` or :class:`DecompressedTooLarge`.
    """
    if record_count <= 0:
        raise InvalidRecords(f"Invalid reported count for record batch: {record_count}")
    if last_offset_delta + 1 != record_count:
        raise InvalidRecords(f"Inconsistent batch offset range (last offset delta {last_offset_delta}) "
                             f"and record count ({record_count})")
    codec = attributes & _COMPRESSION_MASK
    buf: bytes | memoryview
    decompressed: bytes | None = None
    if codec:
        try:
            buf = decompressed = decompress(codec, memoryview(batch)[_HEADER_SIZE:size], max_size)
        except DecompressedTooLarge:
            raise
        except CorruptRecord as exc:
            raise InvalidRecords(f"Failed to decompress record stream: {exc}") from None
    else:
        buf = batch
        if size - _HEADER_SIZE > max_size:
            raise DecompressedTooLarge(f"records of {size - _HEADER_SIZE} bytes exceed {max_size} bytes")
    start = 0 if codec else _HEADER_SIZE
    end = len(buf) if codec else size
    if record_count > end - start:  # a record takes at least 7 bytes: refuse absurd counts at once
        raise InvalidRecords(f"Record count {record_count} cannot fit in {end - start} bytes of records")
    try:
        valid = _walk(buf, start, end, record_count, base_timestamp)
        return valid if decompressed is None else valid._replace(records=decompressed)
    except _Bad as exc:
        raise InvalidRecords(f"Record {exc.index} of the batch is invalid: {exc.why}", exc.index) from None


class _Bad(Exception):
    def __init__(self, index: int, why: str) -> None:
        self.index = index
        self.why = why


# Per-record walk kept inlined, past C901's limit: a call per field costs measurable throughput.
def _walk(buf: bytes | memoryview, pos: int, end: int, count: int, base_ts: int) -> Validated:  # noqa: C901
    varint = read_varint
    start = pos
    lo = hi = base_ts
    lo_i = hi_i = 0
    first = True
    keyless: list[int] = []
    i = 0
    try:
        for i in range(count):
            # Record length and timestamp delta: 1- and 2-byte varints inline, else the loop.
            v = buf[pos]
            if v < 0x80:
                length = (v >> 1) ^ -(v & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = varint(buf, pos, end)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise _Bad(i, f"record length {length} does not fit the {end - pos} bytes left")
            pos += 1  # attributes
            v = buf[pos]
            if v < 0x80:
                ts_delta = (v >> 1) ^ -(v & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                ts_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                ts_delta, pos = varint(buf, pos, rec_end)
            v = buf[pos]
            if v < 0x80:
                offset_delta = (v >> 1) ^ -(v & 1)
                pos += 1
            else:
                offset_delta, pos = varint(buf, pos, rec_end)
            if offset_delta != i:
                raise _Bad(i, f"offset delta {offset_delta}, expected {i}")
            ts = base_ts + ts_delta
            if first:
                lo = hi = ts
                first = False
            elif ts < lo:
                lo, lo_i = ts, i
            elif ts > hi:
                hi, hi_i = ts, i
            # key and value: the 1- and 2-byte length cases inline
            v = buf[pos]
            if v < 0x80:
                n = (v >> 1) ^ -(v & 1)
                pos += 1
            else:
                n, pos = varint(buf, pos, rec_end)
            if n >= 0:
                pos += n
            elif n == -1:
                keyless.append(i)
            else:
                raise _Bad(i, f"invalid key length {n}")
            if pos >= rec_end:
                raise _Bad(i, "key runs past the record's end")
            v = buf[pos]
            if v < 0x80:
                n = (v >> 1) ^ -(v & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                v = (v & 0x7F) | (buf[pos + 1] << 7)
                n = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                n, pos = varint(buf, pos, rec_end)
            if n >= 0:
                pos += n
            elif n != -1:
                raise _Bad(i, f"invalid value length {n}")
            if pos >= rec_end:
                raise _Bad(i, "value runs past the record's end")
            v = buf[pos]
            if v < 0x80:
                nh = (v >> 1) ^ -(v & 1)
                pos += 1
            else:
                nh, pos = varint(buf, pos, rec_end)
            if nh:
                if nh < 0 or 2 * nh > rec_end - pos:
                    raise _Bad(i, f"invalid number of record headers {nh}")
                for _ in range(nh):
                    n, pos = varint(buf, pos, rec_end)
                    if n < 0:
                        raise _Bad(i, f"invalid negative header key size {n}")
                    pos += n
                    if pos >= rec_end:
                        raise _Bad(i, "header key runs past the record's end")
                    n, pos = varint(buf, pos, rec_end)
                    if n >= 0:
                        pos += n
                    elif n != -1:
                        raise _Bad(i, f"invalid header value size {n}")
                    if pos > rec_end:
                        raise _Bad(i, "header value runs past the record's end")
            if pos != rec_end:
                raise _Bad(i, f"expected to read {length} bytes in the record payload, read "
                              f"{length - (rec_end - pos)}")
    except IndexError:
        raise _Bad(i, "record truncated") from None
    except ValueError as exc:
        raise _Bad(i, str(exc)) from None
    if pos != end:
        raise InvalidRecords(f"Incorrect declared batch size, {end - pos} bytes remain after "
                             f"the {count} declared records")
    return Validated(end - start, lo, lo_i, hi, hi_i, keyless=tuple(keyless))
