"""Share groups' refusals over the wire (raw requests), as Apache Kafka 4.3.1 answers them:
share session epochs (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH), acknowledgements
of records not held (INVALID_RECORD_STATE) or malformed (INVALID_REQUEST), unknown topics, and
ShareGroupHeartbeat's first-request rules. Each refusal leaves the connection serving."""

from __future__ import annotations

from typing import Any

from .group_helpers import create_topic, unique_name
from .helpers import wait_until
from .raw import RawConn, coordinator_address, serving_leader

NONE, UNKNOWN_TOPIC_ID, INVALID_RECORD_STATE = 0, 100, 121
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 122, 123
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 42, 25, 110


def _topic_id(c: RawConn, topic: str) -> bytes:
    md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False})
    return bytes(md["topics"][0]["topic_id"])


def _codes(answer: dict[str, Any]) -> tuple[int, list[tuple[int, int]]]:
    """(top-level error, [(partition, error)])."""
    return answer["error_code"], [(p["partition_index"], p["error_code"])
                                  for t in answer.get("responses") or [] for p in t["partitions"]]


def test_share_session_and_acknowledgement_refusals(broker: Any) -> None:
    topic, group = unique_name("share-err"), unique_name("share-err-group")
    create_topic(broker.bootstrap, topic, 1)
    with RawConn(serving_leader(broker.bootstrap, topic)) as c:  # share sessions live at the leader
        tid = _topic_id(c, topic)
        # the group has a coordinator (several tmqgate brokers place their group state a moment
        # after start, and keep share-partition states with it). Not FindCoordinator key type
        # SHARE: on Kafka that first ask makes the state topic, whose partitions may still be
        # loading when the fetch below initialises the share-partition (CI r51: the ack then met
        # UNKNOWN_TOPIC_OR_PARTITION); left to Kafka's own persister, its lookups wait for them.
        coordinator_address(broker.bootstrap, group)

        def fetch(epoch: int, member: str = "m-1", acks: list[Any] | None = None, topics: bool = True) -> Any:
            return c.request(78, 1, {
                "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                             "acknowledgement_batches": acks or []}]}]
                if topics else [], "forgotten_topics_data": []})

        def ack(epoch: int, batches: list[Any], topic_id: bytes = tid) -> Any:
            return c.request(79, 1, {"group_id": group, "member_id": "m-1", "share_session_epoch": epoch,
                                     "topics": [{"topic_id": topic_id, "partitions": [
                                         {"partition_index": 0, "acknowledgement_batches": batches}]}]})

        one = [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]
        assert _codes(fetch(5)) == (SHARE_SESSION_NOT_FOUND, [])
        assert _codes(ack(0, [])) == (INVALID_SHARE_SESSION_EPOCH, [])  # acknowledging opens no session
        assert _codes(ack(3, [])) == (SHARE_SESSION_NOT_FOUND, [])
        refused = fetch(0, acks=one)  # the first fetch of a session may not acknowledge
        assert (_codes(refused), refused["error_message"]) == ((INVALID_REQUEST, []), None)
        assert _codes(fetch(0))[0] == NONE
        assert _codes(fetch(5)) == (INVALID_SHARE_SESSION_EPOCH, [])  # the next epoch is 1
        assert _codes(ack(1, one)) == (NONE, [(0, INVALID_RECORD_STATE)])  # nothing acquired
        assert _codes(ack(2, [{**one[0], "acknowledge_types": [9]}])) == (NONE, [(0, INVALID_REQUEST)])
        assert _codes(ack(3, [{"first_offset": 5, "last_offset": 2, "acknowledge_types": [1]}])) == \
            (NONE, [(0, INVALID_REQUEST)])
        assert _codes(ack(4, one, topic_id=b"\x01" * 16)) == (NONE, [(0, UNKNOWN_TOPIC_ID)])
        assert _codes(fetch(0, member="")) == (INVALID_REQUEST, [])
        assert _codes(fetch(-1, topics=False)) == (NONE, [])  # closes the session
        assert _codes(fetch(6)) == (SHARE_SESSION_NOT_FOUND, [])


def test_share_group_heartbeat_first_request_rules(broker: Any) -> None:
    topic, group = unique_name("share-hb"), unique_name("share-hb-group")
    create_topic(broker.bootstrap, topic, 1)
    with RawConn(coordinator_address(broker.bootstrap, group)) as c:
        def beat(member: str, epoch: int, topics: list[str] | None) -> tuple[int, str | None]:
            answer = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                       "rack_id": None, "subscribed_topic_names": topics})
            return answer["error_code"], answer["error_message"]

        # the group made by a first member (the coordinator may still be loading its partition)
        wait_until(lambda: beat("first", 0, [topic]), 60, 0.5, "a first member joined",
                   ok=lambda answer: answer[0] == NONE)
        assert beat("", 0, [topic]) == (INVALID_REQUEST, None)
        assert beat("mm", 0, None) == (INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
        assert beat("zz", 3, None)[0] == UNKNOWN_MEMBER_ID  # not a member: it must join (epoch 0)
        assert beat("first", 7, None)[0] == FENCED_MEMBER_EPOCH
        assert beat("mm", 0, [topic])[0] == NONE


def test_find_coordinator_of_a_share_partition(broker: Any) -> None:
    """FindCoordinator key type SHARE (2), what brokers ask for a share-partition's
    coordinator: "group:topic id:partition" names one (Kafka makes its state topic on the
    first ask: COORDINATOR_NOT_AVAILABLE until then); a key of another shape is refused
    INVALID_REQUEST, with an empty message as Kafka's."""
    key = f"{unique_name('share-find')}:AAAAAAAAAAAAAAAAAAAAAA:0"

    def find(*keys: str) -> list[dict[str, Any]]:
        with RawConn(broker.bootstrap) as conn:
            return conn.request(10, 6, {"key_type": 2, "coordinator_keys": list(keys)})["coordinators"]

    [found] = wait_until(lambda: find(key), 60, 0.5, "the share-partition's coordinator",
                         ok=lambda a: a[0]["error_code"] != 15)
    assert (found["key"], found["error_code"]) == (key, 0) and found["node_id"] >= 0, found
    refused = find("no-colons", "g:not-a-uuid:0", "g:AAAAAAAAAAAAAAAAAAAAAA:x")
    assert [(a["key"], a["error_code"], a["node_id"], a["error_message"]) for a in refused] == [
        ("no-colons", 42, -1, ""), ("g:not-a-uuid:0", 42, -1, ""), ("g:AAAAAAAAAAAAAAAAAAAAAA:x", 42, -1, "")], refused
