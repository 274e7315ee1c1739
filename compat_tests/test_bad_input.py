"""Bad input over raw sockets: the broker answers (or hangs up) exactly as Apache Kafka does,
and a well-behaved client connected at the same time keeps being served.

What Kafka 4.x does, found by running these against the reference broker:
- closes the connection, no response: size prefix > socket.request.max.bytes (104857600),
  negative or zero size, a frame shorter than its request header, a truncated header or
  body, an unknown api key, an unsupported version of any API but ApiVersions;
- ApiVersions of an unsupported version: a v0 response, error UNSUPPORTED_VERSION (35), whose
  api_keys carry the ApiVersions range; the connection stays open;
- Produce: bad CRC -> CORRUPT_MESSAGE (2); batch larger than the topic's max.message.bytes ->
  MESSAGE_TOO_LARGE (10) (a batch of exactly max.message.bytes is accepted); truncated batch
  -> INVALID_RECORD (87); unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION (3);
- Fetch / ListOffsets on an unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION (3);
  Fetch v13+ by an unknown topic id -> UNKNOWN_TOPIC_ID (100); connection stays open.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator

import pytest

from .conftest import Broker
from .helpers import ConfluentDriver, unique_topic
from .raw import FETCH_V, RawConn, fetched_values, one_record_batch, serving_leader

MAX_MESSAGE_BYTES = 1024
CLOSE_WAIT = 5.0  # seconds we give the broker to hang up

CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    """One partition, max.message.bytes small enough to hit with a hand-built batch."""
    name = unique_topic("bad-input")
    ConfluentDriver(broker.bootstrap).create_topic(name, 1, {"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    return name


@pytest.fixture(scope="module")
def leader(broker: Broker, topic: str) -> str:
    """The topic's leader (of several brokers, the one its Produce and Fetch go to)."""
    return serving_leader(broker.bootstrap, topic)


@pytest.fixture
def good(leader: str, topic: str) -> Iterator[RawConn]:
    """A well-behaved client, connected (and served once) before the bad input arrives."""
    with RawConn(leader, client_id="compat-good") as c:
        assert_served(c, topic)
        yield c
        assert_served(c, topic)  # ... and still served after it


def assert_served(c: RawConn, topic: str) -> None:
    """Produce a unique value and fetch it back at the offset Produce returned."""
    value = uuid.uuid4().bytes
    p = c.produce(topic, 0, one_record_batch(value))
    assert p["error_code"] == 0, p
    f = c.fetch(topic, 0, p["base_offset"])
    assert f["error_code"] == 0, f
    assert (p["base_offset"], value) in fetched_values(f)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, corr: int = 7, client_id: bytes = b"compat-bad", tags: bool = False) -> bytes:
    h = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    return h + (b"\x00" if tags else b"")


CLOSE_CASES = {
    "size-over-request-max": struct.pack(">i", 104_857_600 + 1) + b"\x00" * 16,
    "size-negative": struct.pack(">i", -1) + b"\x00" * 16,
    "size-zero": struct.pack(">i", 0),
    "shorter-than-header": _frame(b"\x00\x03\x00"),
    "client-id-truncated": _frame(struct.pack(">hhih", 3, 1, 7, 10) + b"ab"),
    "metadata-v1-body-truncated": _frame(_header(3, 1) + b"\x00\x00"),
    "metadata-v12-body-truncated": _frame(_header(3, 12, tags=True) + b"\x00"),
    "unknown-api-key-9999": _frame(_header(9999, 0)),
    "unknown-api-key-negative": _frame(_header(-1, 0)),
    "metadata-unsupported-v99": _frame(_header(3, 99) + b"\x00" * 8),
    "produce-below-min-v2": _frame(_header(0, 2) + b"\x00" * 16),
    "fetch-unsupported-v99": _frame(_header(1, 99, tags=True) + b"\x00" * 32),
}


@pytest.mark.parametrize("data", list(CLOSE_CASES.values()), ids=list(CLOSE_CASES))
def test_connection_closed(broker: Broker, good: RawConn, data: bytes) -> None:
    """Input Kafka cannot parse: it closes that connection without a response."""
    with RawConn(broker.bootstrap) as bad:
        bad.send_bytes(data)
        assert bad.closed_within(CLOSE_WAIT), "Kafka closes the connection here"


def test_api_versions_unsupported_version(broker: Broker, good: RawConn) -> None:
    """A too-new ApiVersions gets a v0 UNSUPPORTED_VERSION answer naming the usable range."""
    from tmqgate.protocol.messages import decode_response

    with RawConn(broker.bootstrap) as c:
        supported = c.api_versions()
        for version in (127, supported[18][1] + 1):
            c.send_bytes(_frame(_header(18, version, corr=4242, tags=True)))
            frame = c.recv_frame()
            # a v0 response: correlation id, error code, api_keys (int32 count), nothing else
            assert frame[:6] == struct.pack(">ih", 4242, UNSUPPORTED_VERSION), frame[:6].hex()
            corr, body = decode_response(18, 0, frame)
            assert body["error_code"] == UNSUPPORTED_VERSION
            ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
            assert ranges.get(18) == supported[18], ranges
        # still open and served
        assert c.api_versions() == supported


def test_partial_frame_does_not_block_others(leader: str, good: RawConn, topic: str) -> None:
    """Half a frame parks only its own connection; the rest arrives later and is answered."""
    from tmqgate.protocol.messages import decode_response, encode_request

    frame = encode_request(18, 3, 99, "compat-slow", {"client_software_name": "slow",
                                                     "client_software_version": "1"})
    with RawConn(leader) as slow:
        slow.send_bytes(frame[:7])
        assert_served(good, topic)
        with pytest.raises(TimeoutError):
            slow.recv_frame(timeout=0.5)
        slow.send_bytes(frame[7:])
        corr, body = decode_response(18, 3, slow.recv_frame())
        assert (corr, body["error_code"]) == (99, 0)


def _corrupt_crc(batch: bytes) -> bytes:
    b = bytearray(batch)
    b[-1] ^= 0xFF  # last byte of the last record: covered by the CRC
    return bytes(b)


def _batch_of_size(n: int) -> bytes:
    """A one-record batch of exactly n bytes (the varints grow with the padding)."""
    pad = n - len(one_record_batch(b"x"))
    batch = one_record_batch(b"x", size_pad=pad)
    for _ in range(8):
        if len(batch) == n:
            return batch
        pad -= len(batch) - n
        batch = one_record_batch(b"x", size_pad=pad)
    raise AssertionError(f"cannot build a batch of exactly {n} bytes")


def test_produce_bad_crc(leader: str, good: RawConn, topic: str) -> None:
    with RawConn(leader) as c:
        before = c.list_offsets(topic, 0, -1)["offset"]
        assert c.produce(topic, 0, _corrupt_crc(one_record_batch(b"bad crc")))["error_code"] == CORRUPT_MESSAGE
        from tmqgate.protocol.records import build_batch

        gz = _corrupt_crc(build_batch([(b"k", b"v" * 500)], compression=1))
        assert c.produce(topic, 0, gz)["error_code"] == CORRUPT_MESSAGE
        assert c.list_offsets(topic, 0, -1)["offset"] == before, "nothing appended"
        c.api_versions()  # connection stays open


def test_produce_message_too_large(leader: str, good: RawConn, topic: str) -> None:
    with RawConn(leader) as c:
        assert c.produce(topic, 0, _batch_of_size(MAX_MESSAGE_BYTES + 1))["error_code"] == MESSAGE_TOO_LARGE
        assert c.produce(topic, 0, _batch_of_size(4 * MAX_MESSAGE_BYTES))["error_code"] == MESSAGE_TOO_LARGE
        before = c.list_offsets(topic, 0, -1)["offset"]
        ok = c.produce(topic, 0, _batch_of_size(MAX_MESSAGE_BYTES))
        assert (ok["error_code"], ok["base_offset"]) == (0, before), "a batch of exactly the limit fits"
        c.api_versions()


def test_produce_truncated_batch(leader: str, good: RawConn, topic: str) -> None:
    batch = one_record_batch(b"truncated")
    with RawConn(leader) as c:
        for cut in (batch[:30], batch[:-3], b""):
            assert c.produce(topic, 0, cut)["error_code"] == INVALID_RECORD, cut.hex()
        c.api_versions()


def _not_created(c: RawConn, name: str) -> None:
    """Metadata without auto-creation: the name is still unknown."""
    body = c.request(3, 12, {"topics": [{"name": name, "topic_id": b"\x00" * 16}],
                             "allow_auto_topic_creation": False,
                             "include_topic_authorized_operations": False})
    [t] = body["topics"]
    assert t["error_code"] == UNKNOWN_TOPIC_OR_PARTITION, t


def test_unknown_topic_or_partition(broker: Broker, good: RawConn, topic: str) -> None:
    """Produce, Fetch and ListOffsets to a topic or partition that does not exist."""
    missing = unique_topic("no-such-topic")
    with RawConn(broker.bootstrap) as c:
        for t, p in ((missing, 0), (topic, 1), (topic, 99)):
            r = c.produce(t, p, one_record_batch(b"nowhere"))
            assert (r["index"], r["error_code"], r["base_offset"]) == (p, UNKNOWN_TOPIC_OR_PARTITION, -1), r
            f = c.fetch(t, p, 0)
            assert (f["partition_index"], f["error_code"], f["high_watermark"]) == (
                p, UNKNOWN_TOPIC_OR_PARTITION, -1), f
            assert not f["records"]
            lo = c.list_offsets(t, p, -1)
            assert (lo["partition_index"], lo["error_code"], lo["offset"]) == (p, UNKNOWN_TOPIC_OR_PARTITION, -1), lo
        _not_created(c, missing)  # Produce/Fetch/ListOffsets never auto-create
        c.api_versions()


def test_fetch_unknown_topic_id(broker: Broker, good: RawConn) -> None:
    """Fetch v13+ names topics by id; an id nobody has -> UNKNOWN_TOPIC_ID."""
    version = max(13, FETCH_V)
    with RawConn(broker.bootstrap) as c:
        assert c.api_versions()[1][1] >= version
        tid = uuid.uuid4().bytes
        body = c.request(1, version, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic_id": tid, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        })
        assert body["error_code"] == 0
        [t] = body["responses"]
        assert t["topic_id"] == tid
        [p] = t["partitions"]
        assert (p["partition_index"], p["error_code"]) == (0, UNKNOWN_TOPIC_ID), p
        c.api_versions()
