"""Record batch v2 and compression codecs, cross-checked against kafka-python and aiokafka."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat_tests.helpers import require_module
from tmqgate.protocol import compression
from tmqgate.protocol.compression import CorruptRecord, DecompressedTooLarge, compress, decompress
from tmqgate.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    max_record_size,
    parse_header,
    verify_crc,
    with_base_offset,
)

CODECS = [0, 1, 2, 3, 4]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- strategies

keys = st.none() | st.binary(max_size=40)
values = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=30)), max_size=3)
timestamps = st.integers(min_value=0, max_value=1 << 45)
record_tuples = st.tuples(keys, values, headers, timestamps)


def _compressible(n: int) -> list[tuple[bytes, bytes, list, int]]:
    """Records that really shrink when compressed (kafka-python sends a batch uncompressed
    when compression doesn't pay, which would make its codec tests vacuous)."""
    return [
        (
            b"key-%d" % (i % 7) if i % 5 else None,
            (b"value %d " % i) * (i % 13) if i % 11 else None,
            [("h1", b"x" * (i % 3)), ("h\u00e9", None)] if i % 2 else [],
            1_700_000_000_000 + i * 3 - (i % 4) * 5,  # not monotonic: negative deltas too
        )
        for i in range(n)
    ]


def _as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


# ---------------------------------------------------------------------------- round trips

@FAST
@given(st.lists(record_tuples, max_size=25), st.sampled_from(CODECS), st.integers(0, (1 << 62)))
def test_round_trip_all_codecs(recs, codec, base_offset):
    batch = build_batch(recs, compression=codec, base_offset=base_offset)
    assert verify_crc(batch)
    h = parse_header(batch)
    assert (h.base_offset, h.record_count, h.compression, h.magic) == (base_offset, len(recs), codec, 2)
    assert h.size == len(batch) and h.batch_length == len(batch) - 12
    if recs:
        assert h.max_timestamp == max(r[3] for r in recs)
        assert h.base_timestamp == recs[0][3]
        assert h.last_offset == base_offset + len(recs) - 1
    out = decode_records(batch)
    assert [r.offset for r in out] == [base_offset + i for i in range(len(recs))]
    assert _as_tuples(out) == [(k, v, hs, t) for k, v, hs, t in recs]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_large_multiblock(codec):
    # > 32 KiB uncompressed: several xerial snappy blocks, several lz4 blocks.
    recs = [(b"k%d" % i, os.urandom(50) + b"z" * 400, [], 1000 + i) for i in range(1000)]
    batch = build_batch(recs, compression=codec)
    assert _as_tuples(decode_records(batch)) == recs


def test_explicit_offsets_keep_gaps_and_attributes():
    recs = [Record(105, 10, b"a", b"1", []), Record(107, 12, None, b"2", [("t", b"v")]), Record(110, 9, b"c", None, [])]
    batch = build_batch(
        recs, base_offset=100, producer_id=42, producer_epoch=3, base_sequence=17,
        is_transactional=True, partition_leader_epoch=5,
    )
    h = parse_header(batch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (42, 3, 17, 5)
    assert h.is_transactional and not h.is_control and h.timestamp_type == 0
    assert (h.last_offset_delta, h.last_offset, h.next_offset) == (10, 110, 111)
    assert (h.base_timestamp, h.max_timestamp) == (10, 12)
    assert decode_records(batch) == recs
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, None, []), Record(5, 0, None, None, [])], base_offset=0)


def test_log_append_time_and_control_flags():
    batch = build_batch([(b"k", b"v", [], 5), (b"k", b"v", [], 9)], timestamp_type=1, is_control=True)
    h = parse_header(batch)
    assert h.timestamp_type == 1 and h.is_control
    # Consumers report the batch's max timestamp for every record of a LogAppendTime batch.
    assert [r.timestamp for r in decode_records(batch)] == [9, 9]


def test_empty_batch_and_defaults():
    batch = build_batch([])
    h = parse_header(batch)
    assert h.record_count == 0 and h.base_timestamp == -1 and h.partition_leader_epoch == -1
    assert h.producer_id == -1 and len(batch) == HEADER_SIZE
    assert decode_records(batch) == []


def test_none_timestamp_means_now_and_str_is_utf8():
    import time

    before = int(time.time() * 1000)
    [r] = decode_records(build_batch([("clé", "valeur", [("h", "x")])]))
    assert r.key == "clé".encode() and r.value == b"valeur" and r.headers == [("h", b"x")]
    assert before <= r.timestamp <= int(time.time() * 1000)


# ---------------------------------------------------------------------------- kafka-python

def _kp_build(recs, codec, **producer):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        2, codec, producer.get("transactional", False), producer.get("pid", -1),
        producer.get("epoch", -1), producer.get("seq", -1), 1 << 22,
    )
    for i, (k, v, hs, ts) in enumerate(recs):
        assert b.append(i, ts, k, v, hs) is not None
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_builds_we_decode(codec):
    recs = _compressible(300)
    data = _kp_build(recs, codec, transactional=True, pid=7, epoch=2, seq=100)
    h = parse_header(data)
    assert h.compression == codec, "kafka-python fell back to no compression: test data too random"
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (7, 2, 100, True)
    assert verify_crc(data)
    out = decode_records(data)
    assert [r.offset for r in out] == list(range(300))
    assert _as_tuples(out) == recs


@pytest.mark.parametrize("codec", CODECS)
def test_we_build_kafka_python_decodes(codec):
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    recs = _compressible(300)
    one = build_batch(recs, compression=codec, base_offset=1000)
    two = build_batch(recs[:10], compression=codec, base_offset=1300)
    batch = DefaultRecordBatch(bytearray(one))
    assert batch.validate_crc() and batch.compression_type == codec
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in batch]
    assert got == [(1000 + i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(recs)]
    mem = MemoryRecords(one + two)
    batches = []
    while mem.has_next():
        batches.append(mem.next_batch())
    assert [b.base_offset for b in batches] == [1000, 1300]
    assert [len(list(b)) for b in batches] == [300, 10]


@pytest.mark.parametrize("codec", [0, 2, 4])
def test_byte_identical_to_kafka_python(codec):
    # Same layout decisions as kafka-python (first timestamp as base, xerial 32 KiB blocks,
    # zstd level 3): identical bytes when the codec is deterministic.
    recs = _compressible(200)
    assert build_batch(recs, compression=codec, partition_leader_epoch=0) == _kp_build(recs, codec)


# ---------------------------------------------------------------------------- aiokafka

@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_cross_check(codec):
    ar = require_module("aiokafka.record.default_records")
    recs = _compressible(300)
    b = ar.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 22)
    for i, (k, v, hs, ts) in enumerate(recs):
        assert b.append(i, ts, k, v, hs) is not None
    data = bytes(b.build())
    assert parse_header(data).compression == codec
    assert verify_crc(data)
    assert _as_tuples(decode_records(data)) == recs

    mine = build_batch(recs, compression=codec, base_offset=55)
    theirs = ar.DefaultRecordBatch(mine)
    assert theirs.validate_crc()
    got = [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in theirs]
    assert got == [(55 + i, k, v, hs, ts) for i, (k, v, hs, ts) in enumerate(recs)]


# ---------------------------------------------------------------------------- headers, CRC

def test_iter_batches_walks_a_blob():
    a = build_batch([(b"a", b"1", [], 1)], base_offset=0)
    b = build_batch([(b"b", b"2", [], 2)] * 3, base_offset=1, compression=3)
    c = build_batch([], base_offset=4)
    blob = a + b + c
    hs = list(iter_batches(blob))
    assert all(isinstance(h, BatchHeader) for h in hs)
    assert [(h.offset, h.size) for h in hs] == [(0, len(a)), (len(a), len(b)), (len(a) + len(b), len(c))]
    assert [blob[h.offset : h.offset + h.size] for h in hs] == [a, b, c]
    assert [h.record_count for h in hs] == [1, 3, 0]
    assert max_record_size(blob) == max(len(a), len(b), len(c))
    assert max_record_size(b) == len(b)
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(memoryview(blob)))[1].compression == 3
    with pytest.raises(CorruptRecord):
        list(iter_batches(blob + a[:-1]))


def test_crc_detects_any_flipped_byte():
    batch = build_batch(_compressible(20), compression=1)
    assert verify_crc(batch)
    for pos in range(21, len(batch)):
        flipped = bytearray(batch)
        flipped[pos] ^= 0x01
        assert not verify_crc(bytes(flipped)), pos
    for pos in range(17, 21):  # the stored CRC itself
        flipped = bytearray(batch)
        flipped[pos] ^= 0x80
        assert not verify_crc(bytes(flipped))
    # base offset and partition leader epoch are outside the CRC.
    flipped = bytearray(batch)
    flipped[3] ^= 0xFF
    flipped[13] ^= 0xFF
    assert verify_crc(bytes(flipped))
    assert not verify_crc(batch[:-1]) and not verify_crc(b"") and not verify_crc(batch[:HEADER_SIZE])


@given(st.integers(0, (1 << 63) - 1), st.sampled_from(CODECS))
@FAST
def test_with_base_offset_keeps_crc(base_offset, codec):
    batch = build_batch(_compressible(5), compression=codec, base_offset=3)
    moved = with_base_offset(batch, base_offset)
    assert verify_crc(moved) and len(moved) == len(batch) and moved[8:] == batch[8:]
    assert parse_header(moved).base_offset == base_offset
    assert [r.offset for r in decode_records(moved)] == [base_offset + i for i in range(5)]
    assert with_base_offset(memoryview(batch), 9)[:8] == struct.pack(">q", 9)


# ---------------------------------------------------------------------------- corruption

@pytest.mark.parametrize("codec", CODECS)
def test_truncated_batches_raise(codec):
    batch = build_batch(_compressible(30), compression=codec)
    for cut in list(range(0, HEADER_SIZE + 2)) + list(range(HEADER_SIZE + 2, len(batch), 7)):
        with pytest.raises(CorruptRecord):
            list(iter_batches(batch[:cut])) if cut else parse_header(b"")
        with pytest.raises(CorruptRecord):
            decode_records(batch[:cut])


def _rewrap(batch: bytes, payload: bytes, *, count: int | None = None) -> bytes:
    """Same header, another payload: fixes length (and count), so only the body is wrong."""
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(payload))
    if count is not None:
        struct.pack_into(">i", head, 57, count)
    return bytes(head) + payload


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_truncated_compressed_payload_raises(codec):
    batch = build_batch(_compressible(200), compression=codec)
    payload = batch[HEADER_SIZE:]
    for cut in range(0, len(payload), max(1, len(payload) // 60)):
        with pytest.raises(CorruptRecord):
            decode_records(_rewrap(batch, payload[:cut]))


def test_record_level_corruption_raises():
    good = build_batch([(b"k", b"v", [("h", b"x")], 1)] * 3)
    payload = good[HEADER_SIZE:]
    cases = [
        _rewrap(good, payload, count=4),  # fewer records than announced
        _rewrap(good, payload, count=2),  # trailing bytes
        _rewrap(good, payload, count=-1),
        _rewrap(good, payload + b"\x00"),
        _rewrap(good, b"\x03" + payload[1:]),  # record length shorter than its fields
        _rewrap(good, b"\xff" * 11 + payload),  # over-long varint
        _rewrap(good, payload.replace(b"\x02h", b"\x02\xff")),  # header key not UTF-8
    ]
    for bad in cases:
        with pytest.raises(CorruptRecord):
            decode_records(bad)
    for attr_codec in (5, 7):  # compression codecs that don't exist
        bad = bytearray(good)
        bad[22] |= attr_codec
        with pytest.raises(CorruptRecord):
            parse_header(bytes(bad))
    future = bytearray(good)
    future[16] = 3
    with pytest.raises(CorruptRecord, match="magic"):
        list(iter_batches(bytes(future)))


def test_legacy_message_sets_are_walked_not_decoded():
    # Produce v3+ must carry magic 2; iter_batches yields v0/v1 entries so the broker can
    # refuse them with Kafka's error rather than CORRUPT_MESSAGE.
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    for magic in (0, 1):
        b = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
        b.append(0, 1000 if magic else None, b"k", b"v")
        b.append(1, 1001 if magic else None, None, b"w")
        legacy = bytes(b.build())
        v2 = build_batch([(b"k", b"v", [], 5)])
        hs = list(iter_batches(legacy + v2))
        assert [h.magic for h in hs] == [magic, magic, 2]
        assert sum(h.size for h in hs) == len(legacy + v2)
        assert hs[-1].offset == len(legacy)
        assert not verify_crc(legacy)
        with pytest.raises(CorruptRecord, match="magic"):
            decode_records(legacy)
        with pytest.raises(CorruptRecord):
            list(iter_batches(legacy[:-1]))


def _only_corrupt_record(data: bytes) -> None:
    for fn in (lambda d: list(iter_batches(d)), decode_records, max_record_size, parse_header,
               lambda d: with_base_offset(d, 1)):
        try:
            fn(data)
        except CorruptRecord:
            pass
    assert verify_crc(data) in (True, False)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data):
    _only_corrupt_record(data)


_SEEDS = {c: build_batch(_compressible(8), compression=c, base_offset=77) for c in CODECS}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4))
def test_fuzz_mutated_valid_batches(codec, flips):
    data = bytearray(_SEEDS[codec])
    for pos, mask in flips:
        data[pos % len(data)] ^= mask
    _only_corrupt_record(bytes(data))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=300), st.integers(-2, 40), st.booleans())
def test_fuzz_random_record_bodies(codec, body, count, compress_body):
    # A valid header around a random body, raw or validly compressed: exercises the
    # decompressors on garbage and the record parser on garbage.
    if compress_body and codec:
        body = compress(codec, body)
    _only_corrupt_record(_rewrap(_SEEDS[codec], body, count=count))


# ---------------------------------------------------------------------------- compression

BOMB = b"\x00" * (8 << 20)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_decompression_cap(codec):
    packed = compress(codec, BOMB)
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, packed, max_size=1 << 20)
    assert len(decompress(codec, packed, max_size=len(BOMB))) == len(BOMB)
    with pytest.raises(DecompressedTooLarge):
        decompress(codec, packed, max_size=len(BOMB) - 1)
    batch = build_batch([(None, BOMB, [], 0)], compression=codec)
    if codec:  # the cap is about decompression: an uncompressed batch is already in memory
        with pytest.raises(DecompressedTooLarge):
            decode_records(batch, max_size=1 << 20)
    assert decode_records(batch)[0].value == BOMB


def test_zstd_bomb_without_content_size():
    co = zstandard.ZstdCompressor().compressobj()
    packed = co.compress(b"\x00" * (64 << 20)) + co.flush()
    assert zstandard.frame_content_size(packed) == -1
    with pytest.raises(DecompressedTooLarge):
        decompress(4, packed, max_size=1 << 20)


PAYLOAD = b"".join(b"record %d payload %s;" % (i, b"ab" * (i % 17)) for i in range(3000))


def test_snappy_variants():
    # librdkafka / kafka-python (xerial_compatible=False) send raw snappy.
    assert decompress(2, bytes(cramjam.snappy.compress_raw(PAYLOAD))) == PAYLOAD
    # Xerial framing as snappy-java writes it, multi-block; and with little-endian
    # version/compat fields as some producers (redpanda) write them.
    ours = compress(2, PAYLOAD)
    assert ours.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(2, ours) == PAYLOAD
    le = ours[:8] + struct.pack("<ii", 1, 1) + ours[16:]
    assert decompress(2, le) == PAYLOAD
    assert decompress(2, ours[:16]) == b""  # a framed stream with no blocks
    # Independent decoders read our framing.
    from kafka.codec import snappy_decode

    assert snappy_decode(ours) == PAYLOAD
    with pytest.raises(CorruptRecord):
        decompress(2, ours[:-3])
    with pytest.raises(CorruptRecord):
        decompress(2, b"\x82SNAPPY\x00" + b"\x00" * 8 + b"\x7f\xff\xff\xff")


def test_lz4_variants():
    ours = compress(3, PAYLOAD)
    flg = ours[4]
    assert flg & 0x20, "block independence: the Java client refuses linked blocks"
    assert not flg & 0x08, "no content size, as the Java client writes"
    assert bytes(cramjam.lz4.decompress(ours)) == PAYLOAD
    for kw in ({}, {"block_linked": True, "content_checksum": True, "store_size": True},
               {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "block_checksum": True}):
        assert decompress(3, lz4.frame.compress(PAYLOAD, **kw)) == PAYLOAD
    two = lz4.frame.compress(b"one") + lz4.frame.compress(b"two")
    assert decompress(3, two) == b"onetwo"
    with pytest.raises(CorruptRecord):
        decompress(3, ours[:-1])


def test_zstd_variants():
    co = zstandard.ZstdCompressor().compressobj()
    streamed = co.compress(PAYLOAD) + co.flush()
    assert zstandard.frame_content_size(streamed) == -1
    assert decompress(4, streamed) == PAYLOAD
    sized = zstandard.ZstdCompressor(level=19).compress(PAYLOAD)
    assert decompress(4, sized + streamed) == PAYLOAD * 2
    assert decompress(4, streamed + sized) == PAYLOAD * 2
    for cut in (1, 7, len(streamed) // 2, len(streamed) - 1):
        with pytest.raises(CorruptRecord):
            decompress(4, streamed[:cut])
    from kafka.codec import zstd_decode

    assert zstd_decode(compress(4, PAYLOAD)) == PAYLOAD


def test_gzip_variants():
    ours = compress(1, PAYLOAD)
    assert ours[:2] == b"\x1f\x8b"
    assert gzip.decompress(ours) == PAYLOAD
    assert decompress(1, gzip.compress(PAYLOAD[:100]) + gzip.compress(PAYLOAD[100:])) == PAYLOAD
    assert decompress(1, zlib.compress(PAYLOAD)) == PAYLOAD
    assert decompress(1, ours + b"\x00\x00") == PAYLOAD
    with pytest.raises(CorruptRecord):
        decompress(1, ours[:-4])
    with pytest.raises(CorruptRecord):
        decompress(1, ours + b"junk")


def test_unknown_codec():
    with pytest.raises(CorruptRecord):
        decompress(6, b"x")
    with pytest.raises(ValueError):
        compress(6, b"x")
    with pytest.raises(ValueError):
        build_batch([], compression=5)
    assert compression.CODEC_NAMES[4] == "zstd"


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_scan_records_and_filtered_batch(codec: int) -> None:
    """The cleaner's scan finds each record's offset, timestamp, key and null value; the
    filtered batch keeps the header and the kept records' bytes, with a valid CRC."""
    from tmqgate.protocol.records import filtered_batch, scan_records, verify_crc

    records = [(b"k%d" % i if i != 2 else None, None if i == 3 else b"v" * (i * 70), [("h", b"x")],
                1_700_000_000_000 + i * 1000) for i in range(6)]
    batch = build_batch(records, base_offset=40, compression=codec, producer_id=9, producer_epoch=3,
                        base_sequence=17, is_transactional=True)
    buf, refs = scan_records(batch)
    assert [(r.offset, r.key, r.tombstone, r.timestamp) for r in refs] == [
        (40 + i, k, v is None, ts) for i, (k, v, _, ts) in enumerate(records)]
    kept = [refs[1], refs[3]]
    out = filtered_batch(batch, buf, kept)
    h, old = parse_header(out), parse_header(batch)
    assert verify_crc(out)
    assert (h.base_offset, h.last_offset_delta, h.base_timestamp, h.producer_id, h.producer_epoch,
            h.base_sequence, h.attributes, h.record_count) == (
        40, 5, old.base_timestamp, 9, 3, 17, old.attributes, 2)
    assert h.max_timestamp == 1_700_000_003_000
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in decode_records(out)] == [
        (41, b"k1", b"v" * 70, [("h", b"x")], 1_700_000_001_000),
        (43, b"k3", None, [("h", b"x")], 1_700_000_003_000)]
