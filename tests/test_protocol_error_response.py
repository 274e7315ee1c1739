"""protocol.error_response: the error answer to every request the broker serves, every version.

For each (API, version) in the broker's table, hypothesis builds request bodies from the
schemas; the error answer must encode as that API's response (so a client can read it),
carry the error where Kafka puts it (top level, or every entry the request named) and no
other code. The shapes of the APIs Kafka answers specially are checked exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_protocol_strategies import message_strategy

from tmqgate.broker.apis import ApiKey
from tmqgate.broker.handlers import API_TABLE
from tmqgate.protocol.codec import codec_for
from tmqgate.protocol.error_response import error_response
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.schemas import SCHEMAS

# Every served API at every served version, and ApiKey's others at every schema version.
_RANGES = {int(k): (SCHEMAS[k].min_version, SCHEMAS[k].max_version) for k in ApiKey}
_RANGES.update({k: (e.min_version, e.max_version) for k, e in API_TABLE.items()})
SERVED = [(key, v) for key in sorted(_RANGES) for v in range(_RANGES[key][0], _RANGES[key][1] + 1)]
FAST = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
CODE = int(ErrorCode.UNKNOWN_SERVER_ERROR)


def _codes(value: Any) -> list[int]:
    """Every error_code (AddPartitionsToTxn v0-3: partition_error_code) in a decoded body, depth first."""
    if isinstance(value, dict):
        out = [value[k] for k in ("error_code", "partition_error_code") if k in value]
        for k, v in value.items():
            if k not in ("error_code", "partition_error_code"):
                out += _codes(v)
        return out
    if isinstance(value, list):
        return [c for item in value for c in _codes(item)]
    return []


def _top_level(key: int, v: int) -> bool:
    return key != ApiKey.METADATA and any(
        f.key == "error_code" and f.present(v) for f in SCHEMAS[key].response.fields)


def test_every_served_api_is_covered() -> None:
    assert {k for k, _ in SERVED} >= set(API_TABLE) | {int(k) for k in ApiKey}
    assert len(SERVED) > 150


@pytest.mark.parametrize(("key", "v"), SERVED, ids=[f"{ApiKey(k).name}-v{v}" for k, v in SERVED])
@FAST
@given(data=st.data())
def test_error_response_encodes_and_carries_the_error(key: int, v: int, data: st.DataObject) -> None:
    request = data.draw(message_strategy(key, v, "request", unknown_tags=False))
    codec = codec_for(key, v, "request")
    request = codec.decode(codec.encode(request))  # what a handler sees: every field filled
    body = error_response(key, v, request, CODE)
    if key == ApiKey.PRODUCE and request["acks"] == 0:
        assert body is None  # Kafka closes the connection: the producer reads no answer
        return
    assert body is not None
    response = codec_for(key, v, "response")
    decoded = response.decode(response.encode(body))
    if key == ApiKey.METADATA:  # Kafka leaves v13's top-level code 0, the topics carry it
        assert decoded.pop("error_code", 0) == 0
    codes = _codes(decoded)
    assert set(codes) <= {CODE}, codes
    if _top_level(key, v):
        assert decoded["error_code"] == CODE
    elif key != ApiKey.DESCRIBE_LOG_DIRS and _named(request):
        assert codes, (request, decoded)


def _named(request: dict[str, Any]) -> bool:
    """Whether the request names an entry: an element of a top-level array that is a bare name
    or index, or a struct whose arrays (if it has any) name one in turn. (A weaker test than the
    rule itself: a topic with an empty partition list and no other array counts as unnamed.)"""
    def entry(x: Any) -> bool:
        if not isinstance(x, dict):
            return True
        inner = [val for val in x.values() if isinstance(val, list)]
        return not inner or any(entry(y) for val in inner for y in val)

    return any(entry(x) for k, val in request.items()
               if isinstance(val, list) and k != "forgotten_topics_data" for x in val)


def test_produce_per_partition() -> None:
    req = {"acks": -1, "topic_data": [{"name": "t", "partition_data": [{"index": 0}, {"index": 3}]}]}
    body = error_response(ApiKey.PRODUCE, 9, req, CODE)
    assert body == {"responses": [{"name": "t", "partition_responses": [
        {"index": i, "error_code": CODE, "error_message": None, "base_offset": -1,
         "log_append_time_ms": -1, "log_start_offset": -1} for i in (0, 3)]}]}
    assert error_response(ApiKey.PRODUCE, 9, {**req, "acks": 0}, CODE) is None


def test_fetch_below_v13_sets_top_and_partitions_then_only_top() -> None:
    req = {"session_id": 7, "topics": [{"topic": "t", "topic_id": bytes(16), "partitions": [{"partition": 2}]}],
           "forgotten_topics_data": [{"topic": "x", "partitions": [1]}]}
    body = error_response(ApiKey.FETCH, 12, req, CODE)
    assert body is not None
    assert body["error_code"] == CODE and body["session_id"] == 7
    [t] = body["responses"]
    assert t["topic"] == "t"
    [p] = t["partitions"]
    assert (p["partition_index"], p["error_code"], p["high_watermark"], p["records"]) == (2, CODE, -1, b"")
    body = error_response(ApiKey.FETCH, 13, req, CODE)
    assert body is not None and body["error_code"] == CODE and "responses" not in body


def test_metadata_topics_carry_the_error_null_name_as_empty() -> None:
    tid = bytes(range(16))
    for v in (10, 11, 12, 13):
        body = error_response(ApiKey.METADATA, v, {"topics": [{"name": None, "topic_id": tid}]}, CODE)
        assert body is not None and "error_code" not in body
        [t] = body["topics"]
        name = "" if v < 12 else None  # null where the response can carry it (v12+)
        assert (t["name"], t["topic_id"], t["error_code"]) == (name, tid, CODE)
        codec_for(ApiKey.METADATA, v, "response").encode(body)
    assert error_response(ApiKey.METADATA, 12, {"topics": None}, CODE) == {"topics": []}


def test_groups_by_name_and_coordinator_keys() -> None:
    assert error_response(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["a", "b"]}, CODE) == {
        "groups": [{"group_id": "a", "error_code": CODE}, {"group_id": "b", "error_code": CODE}]}
    assert error_response(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["a"]}, CODE) == {
        "results": [{"group_id": "a", "error_code": CODE}]}
    body = error_response(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]}, CODE)
    assert body == {"coordinators": [{"key": "g", "node_id": -1, "port": -1, "error_code": CODE,
                                      "error_message": None}]}
    assert error_response(ApiKey.FIND_COORDINATOR, 3, {"key": "g"}, CODE) == {
        "error_code": CODE, "error_message": None, "node_id": -1, "port": -1}
    assert error_response(ApiKey.JOIN_GROUP, 7, {"group_id": "g"}, CODE) == {"error_code": CODE,
                                                                            "generation_id": -1}


def test_offset_fetch_by_version() -> None:
    topics = [{"name": "t", "partition_indexes": [1, 2]}]
    body = error_response(ApiKey.OFFSET_FETCH, 1, {"group_id": "g", "topics": topics}, CODE)
    assert body == {"topics": [{"name": "t", "partitions": [
        {"partition_index": i, "committed_offset": -1, "error_code": CODE} for i in (1, 2)]}]}
    assert error_response(ApiKey.OFFSET_FETCH, 5, {"group_id": "g", "topics": topics}, CODE) == {
        "error_code": CODE}
    body = error_response(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "g", "topics": topics}]}, CODE)
    assert body == {"groups": [{"group_id": "g", "error_code": CODE}]}


def test_delete_topics_by_name_and_by_id_with_message() -> None:
    assert error_response(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["a"]}, 42, "no") == {
        "responses": [{"name": "a", "error_code": 42, "error_message": "no"}]}
    tid = bytes(range(16))
    assert error_response(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": tid}]}, 42) == {
        "responses": [{"name": None, "topic_id": tid, "error_code": 42, "error_message": None}]}
