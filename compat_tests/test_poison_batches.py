"""Poison batches (issue 11, findings 1 and 2): a batch whose CRC is right but whose records are
not is refused, as Apache Kafka's LogValidator refuses it, and never reaches a consumer.

Each batch here has a correct CRC-32C (computed over whatever bytes it carries), so only a
broker that parses the records can tell it is bad.  After every refusal a good batch is
produced and read back: the partition's offsets continue as if the poison never came.

What Kafka 4.x answers, found by running this file against the reference broker: see
``POISON`` (error code, and the record index in ``record_errors`` where Kafka gives one).
"""

from __future__ import annotations

import gzip
import os
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from crc32c import crc32c

from tmqgate.protocol.compression import GZIP, ZSTD, compress
from tmqgate.protocol.records import build_batch

from .conftest import Broker
from .helpers import ConfluentDriver, unique_topic
from .raw import RoutedConn, fetched_values, one_record_batch
from .tdengine_helpers import TdBroker, td_broker_fixture, unique

UNKNOWN_SERVER_ERROR = -1
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
TD_CAP = 4_000_000


def raw_batch(payload: bytes, record_count: int, *, codec: int = 0, last_offset_delta: int | None = None,
              timestamp: int | None = None) -> bytes:
    """A v2 batch carrying ``payload`` as its records section, with a CRC that matches it."""
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    lod = record_count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", codec, lod, ts, ts, -1, -1, -1, record_count) + payload
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(tail), -1, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail


def records_of(batch: bytes) -> bytes:
    """The (uncompressed) records section of a batch built by ``build_batch``."""
    return batch[61:]


def _three_records() -> bytes:
    ts = int(time.time() * 1000)
    return records_of(build_batch([(None, f"v{i}".encode(), [], ts) for i in range(3)]))


def _truncated_record() -> bytes:
    ts = int(time.time() * 1000)
    return records_of(build_batch([(None, b"first", [], ts), (None, b"second value", [], ts)]))[:-4]


def _bad_header_count() -> bytes:
    # One record whose header count says 5 but which carries none.
    ts = int(time.time() * 1000)
    rec = records_of(build_batch([(None, b"x", [], ts)]))
    assert rec[-1] == 0  # header count 0 is the record's last byte
    body = rec[1:-1] + b"\x0a"  # zigzag(5)
    return bytes([len(body) << 1]) + body


def _second_record_bad() -> bytes:
    # Two records, the second with a negative key length other than -1.
    ts = int(time.time() * 1000)
    good = records_of(build_batch([(None, b"ok", [], ts)]))
    bad_body = bytes([0, 0, 2, 5, 2]) + b"ab" + b"\x00"  # attrs, ts delta 0, offset delta 1, key len -3
    return good + bytes([len(bad_body) << 1]) + bad_body


# name: (the batch, Kafka 4.3.1's error code, the record index tmqgate names in record_errors).
# tmqgate answers INVALID_RECORD (87) to all of them, with an error_message and, where one record
# is at fault, its index.  Kafka answers INVALID_RECORD with neither, except where a payload does
# not decompress or a varint is endless (0xff filler): there its LogValidator fails with an
# unexpected exception and answers UNKNOWN_SERVER_ERROR (-1).  Both refuse the batch for good
# (neither code is retriable to the Java client or librdkafka); tmqgate says why.
POISON = {
    "gzip-random-bytes": (lambda: raw_batch(os.urandom(200), 1, codec=GZIP), UNKNOWN_SERVER_ERROR, None),
    "gzip-garbage-after-header": (
        lambda: raw_batch(gzip.compress(b"")[:10] + os.urandom(100), 1, codec=GZIP), UNKNOWN_SERVER_ERROR, None),
    "zstd-random-bytes": (lambda: raw_batch(os.urandom(200), 1, codec=ZSTD), UNKNOWN_SERVER_ERROR, None),
    "ff-filler": (lambda: raw_batch(b"\xff" * 200, 1), UNKNOWN_SERVER_ERROR, 0),
    "count-1-holds-3": (lambda: raw_batch(_three_records(), 1), INVALID_RECORD, None),
    "count-3-holds-1": (lambda: raw_batch(records_of(one_record_batch(b"only one")), 3), INVALID_RECORD, 1),
    "truncated-record": (lambda: raw_batch(_truncated_record(), 2), INVALID_RECORD, 1),
    "bad-header-count": (lambda: raw_batch(_bad_header_count(), 1), INVALID_RECORD, 0),
    "second-record-bad-key-length": (lambda: raw_batch(_second_record_bad(), 2), INVALID_RECORD, 1),
    "gzip-records-truncated": (
        lambda: raw_batch(compress(GZIP, _truncated_record()), 2, codec=GZIP), INVALID_RECORD, 1),
}


def assert_refused(broker: Broker, p: dict, kafka_code: int, index: int | None) -> None:
    """The partition response to a poison batch, as each broker gives it."""
    assert p["base_offset"] == -1, p
    if broker.target == "kafka":
        assert (p["error_code"], p["record_errors"]) == (kafka_code, []), p
        return
    assert p["error_code"] == INVALID_RECORD, p
    assert p["error_message"], p
    if index is None:
        assert p["record_errors"] == [], p
    else:
        assert [e["batch_index"] for e in p["record_errors"]] == [index], p
        assert p["record_errors"][0]["batch_index_error_message"] == p["error_message"], p


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    name = unique_topic("poison")
    ConfluentDriver(broker.bootstrap).create_topic(name, 1)
    return name


@pytest.fixture
def conn(broker: Broker) -> Iterator[RoutedConn]:
    with RoutedConn(broker.bootstrap, client_id="compat-poison") as c:
        yield c


def _produce_good(c: RoutedConn, topic: str) -> tuple[int, bytes]:
    value = uuid.uuid4().bytes
    p = c.produce(topic, 0, one_record_batch(value))
    assert p["error_code"] == 0, p
    return p["base_offset"], value


@pytest.mark.parametrize("name", sorted(POISON))
def test_poison_batch_refused(broker: Broker, conn: RoutedConn, topic: str, name: str) -> None:
    make, kafka_code, index = POISON[name]
    before, v1 = _produce_good(conn, topic)
    assert_refused(broker, conn.produce(topic, 0, make()), kafka_code, index)
    after, v2 = _produce_good(conn, topic)
    assert after == before + 1  # the poison took no offset
    f = conn.fetch(topic, 0, before)
    assert f["error_code"] == 0, f
    assert fetched_values(f)[:2] == [(before, v1), (after, v2)]


def test_poison_then_consumer_reads_on(broker: Broker) -> None:
    """A stock consumer reading a partition where poison was refused sees only the good records."""
    name = unique_topic("poison-read")
    d = ConfluentDriver(broker.bootstrap)
    d.create_topic(name, 1)
    values = []
    with RoutedConn(broker.bootstrap) as c:
        for make, kafka_code, index in POISON.values():
            off, v = _produce_good(c, name)
            values.append((off, v))
            assert_refused(broker, c.produce(name, 0, make()), kafka_code, index)
    assert [o for o, _ in values] == list(range(len(values)))
    got = d.consume(name, {0: len(values)}, timeout=60)
    assert [(r.offset, r.value) for r in got] == values


def test_timestamp_of_a_middle_record_is_checked(conn: RoutedConn, topic: str) -> None:
    """Record 1 of 3 stamped two days ahead while the batch header's timestamps are now: the
    broker checks each record's timestamp (message.timestamp.after.max.ms, default one hour),
    not just the header's, and names the record in record_errors."""
    now = int(time.time() * 1000)
    body = records_of(build_batch([(None, b"a", [], now), (None, b"b", [], now + 2 * 86_400_000),
                                   (None, b"c", [], now)]))
    before, _ = _produce_good(conn, topic)
    p = conn.produce(topic, 0, raw_batch(body, 3, timestamp=now))
    assert (p["error_code"], p["base_offset"]) == (INVALID_TIMESTAMP, -1), p
    assert [e["batch_index"] for e in p["record_errors"]] == [1], p
    assert _produce_good(conn, topic)[0] == before + 1


# --------------------------------------------------------------------------- bombs (finding 2)

def _zstd_bomb(size: int) -> bytes:
    """One record of ``size`` zero bytes, zstd-compressed as a stream (no content size)."""
    import zstandard

    value = b"\x00" * size
    records = records_of(build_batch([(None, value, [], int(time.time() * 1000))]))
    co = zstandard.ZstdCompressor().compressobj()
    return co.compress(records) + co.flush()


def test_compressed_batch_within_max_message_bytes_is_accepted(broker: Broker) -> None:
    """max.message.bytes bounds a batch as sent, after compression (issue 26, point 1): 3,000
    records of 1 KiB in one zstd batch of ~94 KB, 3 MB once inflated, to a topic at the
    default max.message.bytes are accepted and served back, by both brokers (tmqgate answered
    MESSAGE_TOO_LARGE). The same records uncompressed are one batch over the bound: refused."""
    name = unique_topic("inflate")
    ConfluentDriver(broker.bootstrap).create_topic(name, 1)
    ts = int(time.time() * 1000)
    values = [(f"{i:08d}" * 128).encode() for i in range(3000)]
    rows = [(f"k{i}".encode(), v, [], ts) for i, v in enumerate(values)]
    packed = build_batch(rows, compression=ZSTD)
    assert len(packed) < 100_000 and len(records_of(build_batch(rows))) > 3_000_000
    with RoutedConn(broker.bootstrap) as c:
        p = c.produce(name, 0, build_batch(rows))
        assert (p["error_code"], p["base_offset"]) == (MESSAGE_TOO_LARGE, -1), p
        p = c.produce(name, 0, packed)
        assert (p["error_code"], p["base_offset"]) == (0, 0), p
    got = ConfluentDriver(broker.bootstrap).consume(name, {0: len(values)})
    assert [(r.offset, r.key, r.value) for r in got] == [(i, f"k{i}".encode(), v) for i, v in enumerate(values)]


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    """A tmqgate of this module's own, its broker-wide decompression cap at 4 MB."""
    yield from td_broker_fixture(tmp_path_factory, "poison-td", {"max_decompressed_batch_bytes": TD_CAP})


@pytest.mark.tmqgate_only
def test_database_topic_bombs_and_garbage_are_answered(td: TdBroker) -> None:
    """Schemaless ingestion into a database topic: a gzip bomb and garbage gzip get an answer
    on the same connection (before: an uncaught exception closed it), and line protocol sent
    afterwards is written."""
    db = unique("poisondb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    ts = int(time.time() * 1000)
    line = f"m,t=a v=1i64 {ts}".encode()
    header = [("tmq.precision", b"ms")]
    bomb_records = records_of(build_batch([(None, line + b" " * (64 << 20), header, ts)]))
    bomb = compress(GZIP, bomb_records)
    assert len(bomb) < 200_000
    with RoutedConn(td.bootstrap) as c:
        p = c.produce(db, 0, raw_batch(bomb, 1, codec=GZIP))
        # the broker's cap bounds it (max.message.bytes bounds only the compressed batch)
        assert (p["error_code"], p["base_offset"]) == (MESSAGE_TOO_LARGE, -1), p
        assert f"max_decompressed_batch_bytes {TD_CAP}" in p["error_message"], p
        p = c.produce(db, 0, raw_batch(os.urandom(500), 1, codec=GZIP))
        assert (p["error_code"], p["base_offset"], p["record_errors"]) == (INVALID_RECORD, -1, []), p
        assert "decompress" in p["error_message"], p
        p = c.produce(db, 0, build_batch([(None, line, header, ts)], compression=GZIP))
        assert p["error_code"] == 0, p
    assert [s["stable_name"] for s in td.rows(f"SHOW {db}.STABLES")] == ["m"]


@pytest.mark.tmqgate_only
def test_broker_cap_bounds_decompression_below_max_message_bytes(td: TdBroker) -> None:
    """max_decompressed_batch_bytes (4 MB here) refuses a batch inflating past it even where
    the topic's max.message.bytes (100 MB) would allow it."""
    name = unique_topic("cap")
    ConfluentDriver(td.bootstrap).create_topic(name, 1, {"max.message.bytes": str(100_000_000)})
    with RoutedConn(td.bootstrap) as c:
        p = c.produce(name, 0, raw_batch(_zstd_bomb(TD_CAP + 1), 1, codec=ZSTD))
        assert (p["error_code"], p["base_offset"]) == (MESSAGE_TOO_LARGE, -1), p
        assert f"max_decompressed_batch_bytes {TD_CAP}" in p["error_message"], p
        p = c.produce(name, 0, raw_batch(_zstd_bomb(TD_CAP - 1000), 1, codec=ZSTD))
        assert (p["error_code"], p["base_offset"]) == (0, 0), p
