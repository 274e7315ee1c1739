"""Headers, frames, defaults, tagged fields, error handling and robustness of protocol/."""

from __future__ import annotations

import os
import struct

import kafka.protocol.metadata  # noqa: F401
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from test_protocol_strategies import ALL_APIS, message_strategy

from tmqgate.protocol.codec import DecodeError, EncodeError, KArray, KPrim, KString, codec_for
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.messages import (
    InvalidRequest,
    Request,
    UnknownApi,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_parts,
    request_header_version,
    response_header_version,
)
from tmqgate.protocol.schemas import SCHEMAS, snake_case

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))

# --------------------------------------------------------------------------------------------
# schemas
# --------------------------------------------------------------------------------------------


def test_schema_inventory() -> None:
    assert SCHEMAS[0].name == "Produce" and SCHEMAS[1].name == "Fetch"
    assert (SCHEMAS[18].min_version, SCHEMAS[18].max_version, SCHEMAS[18].flexible_min) == (0, 4, 3)
    # KIP-848 APIs come from our own resources
    assert (SCHEMAS[68].name, SCHEMAS[68].max_version, SCHEMAS[68].flexible_min) == ("ConsumerGroupHeartbeat", 1, 0)
    assert (SCHEMAS[69].name, SCHEMAS[69].max_version, SCHEMAS[69].flexible_min) == ("ConsumerGroupDescribe", 1, 0)


@pytest.mark.parametrize("name,key", [
    ("ThrottleTimeMs", "throttle_time_ms"), ("TopicId", "topic_id"), ("ApiKey", "api_key"),
    ("IsrNodes", "isr_nodes"), ("ErrorCode", "error_code"), ("ClusterID", "cluster_id"),
])
def test_snake_case(name: str, key: str) -> None:
    assert snake_case(name) == key


def test_error_codes() -> None:
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.OFFSET_OUT_OF_RANGE == 1 and ErrorCode.CORRUPT_MESSAGE == 2
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3 and ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.UNSUPPORTED_VERSION == 35 and ErrorCode.INVALID_REQUEST == 42
    assert ErrorCode.FENCED_MEMBER_EPOCH == 110 and ErrorCode.TRANSACTION_ABORTABLE == 120
    assert set(range(-1, 121)) <= {int(e) for e in ErrorCode}


# --------------------------------------------------------------------------------------------
# headers (golden bytes and kafka-python's header encoder)
# --------------------------------------------------------------------------------------------


def test_api_versions_v3_request_uses_header_v2() -> None:
    frame = encode_request(18, 3, 7, "cli", {"client_software_name": "x", "client_software_version": "1"})
    assert frame == bytes.fromhex(
        "00000013" "0012" "0003" "00000007" "0003636c69" "00"  # header v2: classic client_id + tags
        "0278" "0231" "00")
    assert request_header_version(18, 3) == 2 and request_header_version(18, 2) == 1


def test_api_versions_response_always_header_v0() -> None:
    assert response_header_version(18, 3) == 0
    frame = encode_response(18, 3, 7, {})
    assert frame == bytes.fromhex("0000000c" "00000007" "0000" "01" "00000000" "00")
    assert decode_response(18, 3, frame[4:]) == (7, codec_for(18, 3, "response").decode(frame[8:]))
    # an UNSUPPORTED_VERSION answer comes back in v0 whatever version was asked (KIP-511)
    v0 = encode_response(18, 0, 8, {"error_code": 35, "api_keys": [{"api_key": 18, "max_version": 3}]})
    corr, body = decode_response(18, 4, v0[4:])
    assert corr == 8 and body == {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]}


def test_metadata_response_header_versions() -> None:
    assert response_header_version(3, 8) == 0 and response_header_version(3, 9) == 1
    v8 = encode_response(3, 8, 5, {})
    v9 = encode_response(3, 9, 5, {})
    assert v8[4:8] == b"\0\0\0\5" and v8[8:] == codec_for(3, 8, "response").encode({})
    assert v9[4:9] == b"\0\0\0\5\0" and v9[9:] == codec_for(3, 9, "response").encode({})
    assert struct.unpack(">i", v9[:4])[0] == len(v9) - 4


@pytest.mark.parametrize("cls,api_key,v", [
    (ApiVersionsRequest, 18, 0), (ApiVersionsRequest, 18, 3), (ApiVersionsRequest, 18, 4),
    (MetadataRequest, 3, 8), (MetadataRequest, 3, 9), (MetadataRequest, 3, 12),
])
def test_request_frames_match_kafka_python(cls: type, api_key: int, v: int) -> None:
    # Metadata.topics is nullable without a default: null for us (architecture rule), [] for
    # kafka-python, so it is given explicitly
    body = {"topics": []} if api_key == 3 else {}
    req = cls[v](**body)
    req.with_header(correlation_id=99, client_id="kp-client")
    kp = req.encode(header=True, framed=True)
    ours = encode_request(api_key, v, 99, "kp-client", body)
    assert ours == kp
    r = decode_request(kp[4:])
    assert (r.api_key, r.api_version, r.correlation_id, r.client_id) == (api_key, v, 99, "kp-client")


@pytest.mark.parametrize("cls,api_key,v", [
    (ApiVersionsResponse, 18, 3), (MetadataResponse, 3, 8), (MetadataResponse, 3, 9), (MetadataResponse, 3, 13),
])
def test_response_frames_match_kafka_python(cls: type, api_key: int, v: int) -> None:
    resp = cls[v]()
    resp.with_header(correlation_id=1234)
    assert encode_response(api_key, v, 1234, {}) == resp.encode(header=True, framed=True)


def test_request_header_tags_and_null_client_id() -> None:
    frame = encode_request(3, 12, 1, None, {}, header_tags={3: b"abc", 1: b""})
    r = decode_request(frame[4:])
    assert r.client_id is None and r.header_tags == {1: b"", 3: b"abc"}
    assert encode_request(3, 12, 1, None, {}, header_tags=r.header_tags) == frame


# --------------------------------------------------------------------------------------------
# decode_request error handling
# --------------------------------------------------------------------------------------------


def test_decode_request_errors() -> None:
    with pytest.raises(InvalidRequest):
        decode_request(b"\x00\x03\x00")
    with pytest.raises(UnknownApi) as e:
        decode_request(struct.pack(">hhi", 999, 0, 42) + b"\xff\xff")
    assert e.value.correlation_id == 42
    with pytest.raises(UnsupportedVersion) as u:
        decode_request(struct.pack(">hhi", 18, 77, 43) + b"\x00\x01x")
    assert (u.value.api_key, u.value.api_version, u.value.correlation_id) == (18, 77, 43)
    with pytest.raises(UnsupportedVersion):
        decode_request(struct.pack(">hhi", 0, 2, 1))  # Produce < v3 is gone (KIP-896)
    good = encode_request(0, 9, 5, "c", {"topic_data": [{"name": "t"}]})[4:]
    for cut in range(8, len(good)):
        with pytest.raises(InvalidRequest) as t:
            decode_request(good[:cut])
        assert t.value.correlation_id == 5
    # Kafka ignores trailing bytes after the body; so do we
    assert decode_request(good + b"junk").body == decode_request(good).body
    bad_utf8 = struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe" + b"\xff\xff\xff\xff"
    with pytest.raises(InvalidRequest):
        decode_request(bad_utf8)


_ALLOWED = (InvalidRequest, UnknownApi, UnsupportedVersion)


@FUZZ
@given(st.binary(max_size=300))
def test_decode_request_garbage(data: bytes) -> None:
    try:
        assert isinstance(decode_request(data), Request)
    except _ALLOWED:
        pass


@FUZZ
@given(st.sampled_from(ALL_APIS), st.data(), st.binary(max_size=200))
def test_decode_request_valid_header_garbage_body(api_key: int, data: st.DataObject, body: bytes) -> None:
    s = SCHEMAS[api_key]
    v = data.draw(st.integers(s.min_version, s.max_version))
    head = struct.pack(">hhi", api_key, v, 1) + b"\x00\x01c" + (b"\x00" if s.flexible(v) else b"")
    try:
        decode_request(head + body)
    except _ALLOWED:
        pass


@FUZZ
@given(st.sampled_from(ALL_APIS), st.data())
def test_decode_request_mutated_frames(api_key: int, data: st.DataObject) -> None:
    s = SCHEMAS[api_key]
    v = data.draw(st.integers(s.min_version, s.max_version))
    msg = data.draw(message_strategy(api_key, v, "request"))
    frame = bytearray(encode_request(api_key, v, 1, "c", msg)[4:])
    assert decode_request(bytes(frame)).body == codec_for(api_key, v, "request").decode(
        codec_for(api_key, v, "request").encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    try:
        decode_request(bytes(frame[:cut]))
    except _ALLOWED:
        pass


def test_huge_array_count_is_rejected_cheaply() -> None:
    # DescribeGroups v0: an array of 2**31-1 strings in a 20-byte request
    frame = struct.pack(">hhih", 15, 0, 1, -1) + struct.pack(">i", 2**31 - 1) + b"\x00\x01a"
    with pytest.raises(InvalidRequest):
        decode_request(frame)
    frame = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", 2**31 - 1)  # Metadata topics
    with pytest.raises(InvalidRequest):
        decode_request(frame)


def test_overlong_varint_rejected() -> None:
    c = codec_for(18, 3, "request")
    with pytest.raises(DecodeError):
        c.decode(b"\xff\xff\xff\xff\xff\x01")


# --------------------------------------------------------------------------------------------
# defaults, nulls, tagged fields
# --------------------------------------------------------------------------------------------


def test_defaults_on_encode() -> None:
    hb = codec_for(68, 1, "request").decode(codec_for(68, 1, "request").encode({"group_id": "g"}))
    assert hb == {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
                  "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
                  "server_assignor": None, "topic_partitions": None}
    fetch = codec_for(1, 12, "request").decode(codec_for(1, 12, "request").encode({}))
    assert fetch["max_bytes"] == 0x7FFFFFFF and fetch["replica_id"] == -1 and fetch["isolation_level"] == 0
    md = codec_for(3, 12, "response").decode(codec_for(3, 12, "response").encode({"topics": [{}]}))
    t = md["topics"][0]
    assert t["topic_id"] == bytes(16) and t["name"] is None and t["topic_authorized_operations"] == -(2**31)
    assert md["cluster_id"] is None and md["controller_id"] == -1


def test_nullable_struct_kip893() -> None:
    c = codec_for(75, 0, "request")
    assert c.decode(c.encode({}))["cursor"] is None
    wire = c.encode({"cursor": {"topic_name": "t", "partition_index": 3}})
    assert c.decode(wire)["cursor"] == {"topic_name": "t", "partition_index": 3}
    assert wire.endswith(b"\x01\x02t\x00\x00\x00\x03\x00\x00")


def test_tagged_fields_known_and_unknown_sorted() -> None:
    c = codec_for(1, 12, "response")
    msg = {"responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "records": b"r",
        "diverging_epoch": {"epoch": 4, "end_offset": 10},
        "_unknown_tags": {7: b"seven", 5: b""}}]}],
        "_unknown_tags": {99: b"top"}}
    wire = c.encode(msg)
    d = c.decode(wire)
    p = d["responses"][0]["partitions"][0]
    assert p["diverging_epoch"] == {"epoch": 4, "end_offset": 10}
    assert p["_unknown_tags"] == {7: b"seven", 5: b""} and d["_unknown_tags"] == {99: b"top"}
    assert p["current_leader"] == {"leader_id": -1, "leader_epoch": -1}  # absent tag → default
    assert c.encode(d) == wire
    # tags appear in ascending order: 0 (diverging_epoch), 5, 7
    tail = wire[wire.index(b"\x02r") + 2:]
    assert tail[0] == 3 and tail[1] == 0 and b"\x05\x00\x07\x05seven" in tail
    with pytest.raises(EncodeError):  # an unknown tag may not reuse a known field's tag
        c.encode({"responses": [{"partitions": [{"_unknown_tags": {2: b""}}]}]})


def test_default_tagged_values_are_omitted() -> None:
    c = codec_for(1, 12, "response")
    plain = c.encode({"responses": [{"partitions": [{}]}]})
    same = c.encode({"responses": [{"partitions": [{"diverging_epoch": {"epoch": -1}, "snapshot_id": {}}]}]})
    assert plain == same


def test_encode_errors() -> None:
    c = codec_for(3, 12, "request")
    with pytest.raises(EncodeError):
        c.encode({"topics": [{"topic_id": b"short"}]})
    with pytest.raises(EncodeError):
        codec_for(12, 0, "request").encode({"group_id": None})
    with pytest.raises(EncodeError):
        codec_for(12, 0, "request").encode({"generation_id": 2**31})
    with pytest.raises(EncodeError):
        codec_for(12, 0, "request").encode({"group_id": "x" * 40000})
    with pytest.raises(EncodeError):
        codec_for(0, 9, "request").encode({"topic_data": None})


def test_bool_nonzero_is_true() -> None:
    c = codec_for(3, 4, "request")  # topics(null) + allow_auto_topic_creation
    assert c.decode(b"\xff\xff\xff\xff\x05")["allow_auto_topic_creation"] is True


# --------------------------------------------------------------------------------------------
# records pass-through
# --------------------------------------------------------------------------------------------


def _fetch(rec: bytes) -> dict:
    return {"responses": [{"topic": "t", "partitions": [
        {"partition_index": i, "records": rec} for i in range(3)] + [{"partition_index": 9, "records": None}]}]}


def test_records_pass_through() -> None:
    rec = os.urandom(100_000)
    frame = encode_response(1, 12, 3, _fetch(rec))
    corr, body = decode_response(1, 12, frame[4:])
    parts = body["responses"][0]["partitions"]
    assert corr == 3 and all(p["records"] == rec and type(p["records"]) is bytes for p in parts[:3])
    assert parts[3]["records"] is None
    _, view = decode_response(1, 12, frame[4:], records_view=True)
    r0 = view["responses"][0]["partitions"][0]["records"]
    assert isinstance(r0, memoryview) and r0 == rec and r0.obj is frame[4:] or bytes(r0) == rec
    chunks = encode_response_parts(1, 12, 3, _fetch(rec))
    assert b"".join(chunks) == frame
    assert sum(1 for ch in chunks if ch is rec) == 3  # no copies of the record data
    # small records are inlined
    assert len(encode_response_parts(1, 12, 3, _fetch(b"tiny"))) == 1


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
def test_records_list_encodes_as_joined(version: int) -> None:
    """A records field given as a list of parts (Fetch's stored batches, unjoined) encodes
    byte for byte as their concatenation, with the length prefix of the sum, in every form."""
    big = [os.urandom(n) for n in (5000, 16384, 4096, 70_000)]
    mixed = [os.urandom(100), big[0], b"", os.urandom(4095), big[1], os.urandom(1)]
    # [65 + 64 bytes]: the compact length prefix n + 1 = 130 is a two-byte uvarint
    for records in (big, mixed, [b"x" * 65, b"y" * 64], [b"tiny"], [], [big[3]]):
        def body(rec: object) -> dict:
            return {"responses": [{"topic": "t", "topic_id": b"\x01" * 16, "partitions": [
                {"partition_index": 0, "records": rec}, {"partition_index": 1, "records": None},
                {"partition_index": 2, "records": b"z" * 5000}]}]}

        joined = encode_response(1, version, 7, body(b"".join(records)))
        assert encode_response(1, version, 7, body(records)) == joined
        chunks = encode_response_parts(1, version, 7, body(records))
        assert b"".join(chunks) == joined
        # parts of threshold size or more travel as the caller's objects, smaller ones are inlined
        big_ids = {id(r) for r in records if len(r) >= 4096}
        assert {id(ch) for ch in chunks if id(ch) in big_ids} == big_ids
        corr, decoded = decode_response(1, version, joined[4:])
        assert corr == 7 and decoded["responses"][0]["partitions"][0]["records"] == b"".join(records)


def test_produce_request_records() -> None:
    rec = os.urandom(64 * 1024)
    body = {"acks": -1, "timeout_ms": 100, "topic_data": [
        {"name": "t", "partition_data": [{"index": i, "records": rec} for i in range(4)]}]}
    r = decode_request(encode_request(0, 9, 1, "p", body)[4:])
    assert r.body["transactional_id"] is None
    assert [p["records"] for p in r.body["topic_data"][0]["partition_data"]] == [rec] * 4


# --------------------------------------------------------------------------------------------
# construct integration
# --------------------------------------------------------------------------------------------


def test_constructs_usable_directly() -> None:
    s = KString(compact=True, nullable=True)
    assert s.parse(b"\x00") is None and s.build("ab") == b"\x03ab"
    assert s.compile().parse(b"\x03ab") == "ab"
    a = KArray(KPrim("int32"), compact=False, nullable=False)
    assert a.build([1, -1]) == b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff"
    assert a.parse(a.build([5, 6, 7])) == [5, 6, 7]
    assert KPrim("int64").sizeof() == 8


def test_codec_compiled_and_uncompiled_agree() -> None:
    c = codec_for(3, 12, "response")
    msg = {"brokers": [{"node_id": 1, "host": "h", "port": 9092}], "topics": [{"name": "t", "partitions": [{}]}]}
    wire = c.encode(msg)
    assert c.compiled.build(msg) == wire and c.construct.build(msg) == wire
    assert c.compiled.parse(wire) == c.decode(wire) == c.construct.parse(wire)
    assert codec_for(3, 12, "response") is c  # cached
