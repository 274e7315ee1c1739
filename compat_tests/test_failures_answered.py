"""Every failure is an answer: requests the broker cannot serve get Kafka's error response for
that API and version, never a closed connection or a wait to the end of a long poll.

What Kafka 4.x does, found by running these against the reference broker:
- Metadata v10/v11 naming a topic by a null name, or by a topic id: INVALID_REQUEST (42) on
  each topic entry (name ""), the connection stays open;
- a Fetch parked on an empty topic that is deleted meanwhile is answered at once, the
  partition's error UNKNOWN_TOPIC_OR_PARTITION (3), by name (v12) and by id (v16) alike.
tmqgate only: DeleteTopics of a database topic (a SQL database) is refused per topic,
INVALID_REQUEST with a message naming DROP DATABASE; SIGTERM with open connections logs no
traceback.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tmqgate.protocol.bodies import ZERO_UUID

from .brokers import TmqgateProcess
from .conftest import Broker
from .helpers import ConfluentDriver, unique_topic, wait_until
from .raw import FETCH_V, RawConn, RoutedConn, leader_address, one_record_batch
from .tdengine_helpers import TdBroker, td_broker_fixture

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
METADATA = 3
FETCH = 1
DELETE_TOPICS = 20
LONG_WAIT_MS = 60_000  # the Fetch's max wait: an answer must come long before it
ANSWER_WITHIN = 20.0  # seconds the test waits for that answer


def _metadata(c: RawConn, version: int, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return c.request(METADATA, version, {"topics": topics, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_v11_null_topic_name_is_invalid_request(broker: Broker, version: int) -> None:
    """Before: an EncodeError closed the connection. Kafka: INVALID_REQUEST per topic entry."""
    with RawConn(broker.bootstrap) as c:
        body = _metadata(c, version, [{"name": None, "topic_id": ZERO_UUID}])
        assert [(t["name"], t["error_code"], t["partitions"]) for t in body["topics"]] == [("", INVALID_REQUEST, [])]
        tid = uuid.uuid4().bytes
        body = _metadata(c, version, [{"name": "some-topic", "topic_id": tid}])
        assert [(t["error_code"], t["topic_id"]) for t in body["topics"]] == [(INVALID_REQUEST, tid)]
        # the connection lives on
        body = _metadata(c, version, [{"name": unique_topic("absent"), "topic_id": ZERO_UUID}])
        assert [t["error_code"] for t in body["topics"]] == [UNKNOWN_TOPIC_OR_PARTITION]


def test_metadata_v12_null_name_is_a_topic_id_lookup(broker: Broker) -> None:
    """v12 serves topic ids: a null name with an unknown id is UNKNOWN_TOPIC_ID (unchanged)."""
    with RawConn(broker.bootstrap) as c:
        tid = uuid.uuid4().bytes
        body = _metadata(c, 12, [{"name": None, "topic_id": tid}])
        assert [(t["error_code"], t["topic_id"]) for t in body["topics"]] == [(UNKNOWN_TOPIC_ID, tid)]


def _parked_fetch(c: RawConn, version: int, topic: str, topic_id: bytes, offset: int = 1) -> int:
    """Send a Fetch of partition 0 at its end `offset`: nothing to read, so it parks."""
    return c.send_request(FETCH, version, {
        "replica_id": -1, "max_wait_ms": LONG_WAIT_MS, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })


def _topic_id(c: RawConn, topic: str) -> bytes:
    [t] = _metadata(c, 12, [{"name": topic, "topic_id": ZERO_UUID}])["topics"]
    assert t["error_code"] == 0, t
    return bytes(t["topic_id"])


@pytest.mark.parametrize("version", [FETCH_V, 16])
def test_fetch_waiting_on_a_deleted_topic_is_answered_at_once(broker: Broker, version: int) -> None:
    """Before: held for the whole max wait, then UnknownDatabase closed the connection."""
    topic = unique_topic("deleted-while-fetching")
    admin = ConfluentDriver(broker.bootstrap)
    admin.create_topic(topic, 1)
    with RawConn(leader_address(broker.bootstrap, topic, 0), timeout=ANSWER_WITHIN) as c:  # parked at the leader
        assert c.produce(topic, 0, one_record_batch(b"only"))["error_code"] == 0
        tid = _topic_id(c, topic)
        corr = _parked_fetch(c, version, topic, tid)
        with pytest.raises(TimeoutError):  # parked: nothing to read at offset 1
            c.recv_frame(timeout=1.0)
        admin.delete_topic(topic)
        body = c.recv_response(FETCH, version, corr)  # within ANSWER_WITHIN s, not LONG_WAIT_MS
        # by id too: Kafka knew the id when the Fetch came (a never-known id is UNKNOWN_TOPIC_ID)
        assert body["error_code"] == 0
        [t] = body["responses"]
        assert [(p["partition_index"], p["error_code"]) for p in t["partitions"]] == [
            (0, UNKNOWN_TOPIC_OR_PARTITION)]
        # the connection lives on
        assert c.api_versions()


# ----------------------------------------------------------------- tmqgate's own broker


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory, target: str) -> Iterator[TdBroker]:
    if target != "tmqgate":
        pytest.skip("tmqgate-only")
    yield from td_broker_fixture(tmp_path_factory, "failures-answered")


@pytest.mark.tmqgate_only
def test_delete_topics_of_a_database_topic_is_refused_per_topic(td: TdBroker) -> None:
    """Before: TopicError escaped the handler, the connection closed (kafka-topics retried 60 s)."""
    db = f"db_{uuid.uuid4().hex[:8]}"
    td.sql(f"CREATE DATABASE {db} VGROUPS 2")
    plain = unique_topic("deletable")
    ConfluentDriver(td.bootstrap).create_topic(plain, 1)
    with RawConn(td.bootstrap) as c:
        for version in (5, 6):
            names = [db] if version < 6 else None
            topics = None if version < 6 else [{"name": db, "topic_id": ZERO_UUID}]
            body = c.request(DELETE_TOPICS, version, {"topic_names": names or [], "topics": topics or [],
                                                      "timeout_ms": 30000})
            [r] = body["responses"]
            assert (r["name"], r["error_code"]) == (db, INVALID_REQUEST)
            assert "DROP DATABASE" in r["error_message"]
        # a plain topic in the same request is still deleted
        body = c.request(DELETE_TOPICS, 6, {"topics": [{"name": db, "topic_id": ZERO_UUID},
                                                       {"name": plain, "topic_id": ZERO_UUID}],
                                            "timeout_ms": 30000})
        assert [(r["name"], r["error_code"]) for r in body["responses"]] == [(db, INVALID_REQUEST), (plain, 0)]
        assert [t["error_code"] for t in _metadata(c, 12, [{"name": db, "topic_id": ZERO_UUID}])["topics"]] == [0]


@pytest.mark.tmqgate_only
def test_fetch_waiting_on_a_dropped_database_is_answered_at_once(td: TdBroker) -> None:
    """DROP DATABASE over HTTP wakes a Fetch parked on the database topic."""
    db = f"db_{uuid.uuid4().hex[:8]}"
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    with RawConn(td.bootstrap, timeout=ANSWER_WITHIN) as c:
        corr = _parked_fetch(c, FETCH_V, db, ZERO_UUID, offset=0)
        with pytest.raises(TimeoutError):
            c.recv_frame(timeout=1.0)
        td.sql(f"DROP DATABASE {db}")
        body = c.recv_response(FETCH, FETCH_V, corr)
        [t] = body["responses"]
        assert [p["error_code"] for p in t["partitions"]] == [UNKNOWN_TOPIC_OR_PARTITION]


@pytest.mark.tmqgate_only
def test_sigterm_with_open_connections_logs_no_traceback(tmp_path: Path, target: str) -> None:
    """Before: one CancelledError traceback per open connection."""
    if target != "tmqgate":
        pytest.skip("tmqgate-only")
    proc = TmqgateProcess(tmp_path / "sigterm")
    proc.start()
    conns = []
    try:
        for _ in range(3):
            c = RawConn(proc.bootstrap)
            assert c.api_versions()
            conns.append(c)
        # and one with half a frame in flight
        s = socket.create_connection(("127.0.0.1", proc.port))
        s.sendall(struct.pack(">i", 100) + b"\x00\x12")
        proc.stop()
        assert proc.proc is not None and proc.proc.returncode == 0
    finally:
        for c in conns:
            c.close()
        proc.kill()
    log = proc.log_path.read_text()
    assert "shutting down" in log
    assert "Traceback" not in log and "CancelledError" not in log, log


OFFSET_COMMIT = 8


COORDINATOR_NOT_READY = {14, 15, 16}  # load in progress, not available, not coordinator


def _commit(c: RawConn | RoutedConn, group: str, topic: str, partitions: list[int]) -> list[tuple[int, int]]:
    """A standalone (generation -1) OffsetCommit v8 of offset 1: sorted (partition, error) pairs;
    retried while Kafka's coordinator is not ready (its offsets topic is made on first use)."""
    def commit() -> list[tuple[int, int]]:
        # FindCoordinator first: Kafka makes its offsets topic (and so a coordinator) on it
        c.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        body = c.request(OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p in partitions]}]})
        return sorted((p["partition_index"], p["error_code"]) for t in body["topics"] for p in t["partitions"])

    return wait_until(commit, 30, 0.5, f"the coordinator of {group}",
                      ok=lambda got: not COORDINATOR_NOT_READY & {e for _, e in got})


def test_offset_commit_to_a_deleted_or_unknown_topic(broker: Broker) -> None:
    """Kafka's KafkaApis refuses commits to topics and partitions it does not have."""
    topic = unique_topic("commit-deleted")
    admin = ConfluentDriver(broker.bootstrap)
    admin.create_topic(topic, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with RoutedConn(broker.bootstrap) as c:  # commits to the group's coordinator
        assert _commit(c, group, topic, [0, 5]) == [(0, 0), (5, UNKNOWN_TOPIC_OR_PARTITION)]
        admin.delete_topic(topic)
        admin.wait_topic_gone(topic)
        assert _commit(c, group, topic, [0]) == [(0, UNKNOWN_TOPIC_OR_PARTITION)]
        assert _commit(c, group, unique_topic("never"), [0, 1]) == [
            (0, UNKNOWN_TOPIC_OR_PARTITION), (1, UNKNOWN_TOPIC_OR_PARTITION)]


@pytest.mark.tmqgate_only
def test_kafka_topics_delete_of_a_database_topic_ends_with_the_error(td: TdBroker) -> None:
    """Before: kafka-topics --delete retried for 60 s against closed connections."""
    from .cli_helpers import require_tools, run

    require_tools()
    db = f"db_{uuid.uuid4().hex[:8]}"
    td.sql(f"CREATE DATABASE {db} VGROUPS 2")
    r = run("kafka-topics", "--bootstrap-server", td.bootstrap, "--delete", "--topic", db,
            check=False, timeout=40)  # under the admin client's 60 s retry budget
    assert r.returncode == 1, r.describe()
    assert f"'{db}' is a database; drop it with DROP DATABASE" in r.stdout, r.describe()
