"""protocol.validate: every record of a batch is checked, as Kafka's LogValidator does, and a
compressed payload is inflated only up to a bound."""

from __future__ import annotations

import random
import struct

import pytest
import zstandard
from crc32c import crc32c

from tmqgate.protocol import compression
from tmqgate.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from tmqgate.protocol.records import build_batch, parse_header
from tmqgate.protocol.validate import DecompressedTooLarge, InvalidRecords, validate_records

TS = 1_700_000_000_000
BOUND = 1 << 20


def raw_batch(payload: bytes, record_count: int, *, codec: int = 0, last_offset_delta: int | None = None) -> bytes:
    lod = record_count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", codec, lod, TS, TS, -1, -1, -1, record_count) + payload
    head = struct.pack(">qiib", 0, 9 + len(tail), -1, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail


def validate(batch: bytes, bound: int = BOUND):  # type: ignore[no-untyped-def]
    h = parse_header(batch)
    return validate_records(batch, h.record_count, h.last_offset_delta, h.attributes, h.base_timestamp,
                            h.size, bound)


GOOD = [(b"k%d" % i, b"v" * (i * 37), [("h", b"x"), ("n", None)] if i % 2 else [], TS + (i * 7) % 5)
        for i in range(50)]


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_valid_batches_of_every_codec_pass(codec: int) -> None:
    batch = build_batch(GOOD + [(None, None, [], TS), (b"", b"\xff" * 300, [("", b"")], TS - 3)], compression=codec)
    v = validate(batch)
    assert v.records_size == len(build_batch(GOOD + [(None, None, [], TS),
                                                     (b"", b"\xff" * 300, [("", b"")], TS - 3)])) - 61
    assert (v.min_timestamp, v.min_index, v.max_timestamp, v.max_index) == (TS - 3, 51, TS + 4, 2)


def _rec(body: bytes) -> bytes:
    """One record: zigzag length (< 64 bytes) then body."""
    assert len(body) < 64
    return bytes([len(body) << 1]) + body


OK = _rec(bytes([0, 0, 0, 1, 2]) + b"a" + b"\x00")  # attrs, ts 0, delta 0, key null, value "a", 0 headers


def _ok(delta: int) -> bytes:
    return _rec(bytes([0, 0, delta << 1, 1, 2]) + b"a" + b"\x00")


POISON = {
    # name: (records section, record count, the index reported (None: the batch as a whole))
    "ff-filler": (b"\xff" * 200, 1, 0),
    "count-1-holds-3": (_ok(0) + _ok(1) + _ok(2), 1, None),
    "count-3-holds-1": (_ok(0), 3, 1),
    "length-past-end": (_ok(0) + bytes([60 << 1]) + b"\x00" * 10, 2, 1),
    "length-too-short": (_ok(0) + _rec(b"\x00\x00\x02\x01"), 2, 1),
    "offset-delta-not-index": (_ok(0) + _ok(5), 2, 1),
    "bad-key-length": (_rec(bytes([0, 0, 0, 5, 2]) + b"ab\x00"), 1, 0),
    "key-past-record": (_rec(bytes([0, 0, 0, 40, 2]) + b"ab\x00"), 1, 0),
    "bad-value-length": (_rec(bytes([0, 0, 0, 1, 7]) + b"\x00"), 1, 0),
    "negative-header-count": (_rec(bytes([0, 0, 0, 1, 1, 3])), 1, 0),
    "header-count-too-big": (_rec(bytes([0, 0, 0, 1, 1, 10])), 1, 0),
    "negative-header-key": (_rec(bytes([0, 0, 0, 1, 1, 2, 3, 1])), 1, 0),
    "bad-header-value": (_rec(bytes([0, 0, 0, 1, 1, 2, 2]) + b"k" + b"\x05"), 1, 0),
    "record-longer-than-fields": (_rec(bytes([0, 0, 0, 1, 1, 0]) + b"junk"), 1, 0),
    "trailing-bytes": (_ok(0) + b"\x00\x00", 1, None),
    "endless-varint": (_ok(0) + b"\x0e\x00" + b"\xff" * 12, 2, 1),
}


@pytest.mark.parametrize("codec", [NONE, GZIP, ZSTD])
@pytest.mark.parametrize("name", sorted(POISON))
def test_poison_is_refused_with_the_record_index(name: str, codec: int) -> None:
    payload, count, index = POISON[name]
    batch = raw_batch(compress(codec, payload) if codec else payload, count, codec=codec)
    with pytest.raises(InvalidRecords) as e:
        validate(batch)
    assert e.value.index == index, str(e.value)
    if index is not None:
        assert f"Record {index} " in str(e.value)


def test_the_poison_payloads_are_otherwise_well_formed() -> None:
    """The good records the poison cases are built from do pass."""
    assert validate(raw_batch(_ok(0) + _ok(1) + _ok(2), 3)).records_size == 3 * len(OK)


@pytest.mark.parametrize("count, lod", [(0, 0), (2, 0), (1, 1), (3, 1)])
def test_count_and_last_offset_delta_must_agree(count: int, lod: int) -> None:
    with pytest.raises(InvalidRecords) as e:
        validate(raw_batch(_ok(0), count, last_offset_delta=lod))
    assert e.value.index is None


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_payload_that_does_not_decompress(codec: int) -> None:
    """Fixed garbage (seed 0): random bytes were flaky — about one in ten snappy headers
    claims a length over the bound, which is the next test's refusal, not this one's."""
    with pytest.raises(InvalidRecords, match="decompress") as e:
        validate(raw_batch(random.Random(0).randbytes(300), 1, codec=codec))
    assert e.value.index is None


def test_snappy_length_claim_over_the_bound_is_too_large() -> None:
    """A snappy stream whose header claims more than the bound is refused before it is
    decompressed (MESSAGE_TOO_LARGE to the producer), whatever follows."""
    with pytest.raises(DecompressedTooLarge):
        validate(raw_batch(random.Random(1).randbytes(300), 1, codec=SNAPPY))


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_bomb_stops_at_the_bound(codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 MiB of zeros in a small batch: refused with the bound at 1 MiB, and the codec never
    produced more than the bound (+ one step) of output on the way."""
    bomb = compress(codec, b"\x00" * (64 << 20))
    assert len(bomb) < 4 << 20
    produced: list[int] = []
    real = compression._DECOMPRESS[codec]

    def spy(data: bytes, max_size: int) -> bytes:
        produced.append(max_size)
        return real(data, max_size)

    monkeypatch.setitem(compression._DECOMPRESS, codec, spy)
    with pytest.raises(DecompressedTooLarge):
        validate(raw_batch(bomb, 1, codec=codec), bound=BOUND)
    assert produced == [BOUND]


def test_zstd_bomb_without_content_size_is_streamed_to_the_bound() -> None:
    """A streamed zstd frame states no size: decompression proceeds in small steps and stops
    within one step of the bound, never inflating the 100 MiB it would reach."""
    c = zstandard.ZstdCompressor()
    co = c.compressobj()
    bomb = co.compress(b"\x00" * (100 << 20)) + co.flush()
    assert zstandard.frame_content_size(bomb) == -1 and len(bomb) < 16_000
    with pytest.raises(DecompressedTooLarge):
        decompress(ZSTD, bomb, BOUND)
    with pytest.raises(DecompressedTooLarge):
        validate(raw_batch(bomb, 1, codec=ZSTD))


def test_uncompressed_records_over_the_bound() -> None:
    batch = build_batch([(None, b"x" * 2000, [], TS)])
    with pytest.raises(DecompressedTooLarge):
        validate(batch, bound=1000)
    assert validate(batch, bound=len(batch) - 61).records_size == len(batch) - 61
