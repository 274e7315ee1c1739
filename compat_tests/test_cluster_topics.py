"""Topics shared by three `tmqgate serve --cluster etcd://…` brokers (issue 16, step 1b): a
topic created on one broker exists on all three with one topic id and its partitions' leaders
spread over them; clients that bootstrap from one broker produce to and consume from every
leader; a non-leader answers NOT_LEADER_OR_FOLLOWER; a dead leader's partitions go offline
(LEADER_NOT_AVAILABLE) until it comes back with its data; a topic deleted on one broker is
gone from all.

On both targets (compat_tests/clusters.py): tmqgate with etcd, and the reference Kafka's KRaft
controller with three brokers.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .clusters import metadata, three_brokers
from .helpers import wait_until
from .raw import RawConn, one_record_batch

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, TOPIC_ALREADY_EXISTS = 6, 5, 36
UNKNOWN_LEADER_EPOCH = 75


@pytest.fixture(scope="module")
def cluster(pytestconfig: pytest.Config, target: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Any]]:
    """One cluster for the module's tests (each makes topics of its own; the one that kills a
    broker starts it again and waits until its partitions are back), and before each test
    every broker sees the other two. default.replication.factor 3 (the other tests name their
    replication factor)."""
    with three_brokers(pytestconfig, target, tmp_path_factory.mktemp("cluster-topics"),
                       settings={"default_replication_factor": 3}) as nodes:
        yield nodes


@pytest.fixture(autouse=True)
def _whole(cluster: dict[int, Any]) -> None:
    wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in cluster.values()], 40,
               0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3],
               retry_errors=True)


def _layout(bootstrap: str, topic: str) -> tuple[bytes, list[tuple[int, int, int, list[int]]]]:
    """(topic id, [(partition, error, leader, offline replicas)]) as one broker answers it."""
    [t] = metadata(bootstrap, [topic])["topics"]
    assert t["error_code"] == 0, t
    return t["topic_id"], sorted((p["partition_index"], p["error_code"], p["leader_id"], p["offline_replicas"])
                                 for p in t["partitions"])


def _produce(bootstrap: str, topic: str, count: int, tag: str) -> dict[int, list[bytes]]:
    """Idempotent acks=all sends, round-robin over 6 partitions; the values each partition got."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    sent: dict[int, list[bytes]] = {}
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            sent.setdefault(msg.partition(), []).append(msg.value())

    for i in range(count):
        producer.produce(topic, f"{tag}-{i}".encode(), partition=i % 6, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors
    return sent


def _consume_all(bootstrap: str, topic: str, expected: int, group: str) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[int, list[tuple[int, bytes]]] = {}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            if msg.error() is None:
                got.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(6)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {p: len(got.get(p, [])) for p in range(6)}
    finally:
        consumer.close()
    return got


def test_a_topic_made_on_one_broker_is_served_by_the_leaders_of_its_partitions(
        cluster: dict[int, Any]) -> None:
    b0, b1, b2 = (cluster[n].bootstrap for n in (0, 1, 2))
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b0})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    admin1 = AdminClient({"bootstrap.servers": b1})  # kept: a collected client fails its futures
    again = admin1.create_topics([NewTopic(topic, 3, 1)])[topic]
    with pytest.raises(Exception) as exists:  # noqa: PT011 - confluent's KafkaException
        again.result(30)
    assert exists.value.args[0].code() == TOPIC_ALREADY_EXISTS

    layouts = [wait_until(lambda b=b: _layout(b, topic), 30, 0.2, "the topic everywhere",
                          ok=lambda lay: len(lay[1]) == 6)
               for b in (b0, b1, b2)]
    assert len({topic_id for topic_id, _ in layouts}) == 1  # one topic id on every broker
    assert all(lay == layouts[0] for lay in layouts)
    leaders = [leader for _, error, leader, _ in layouts[0][1]]
    assert all(error == 0 for _, error, _, _ in layouts[0][1])
    assert Counter(leaders) == Counter({0: 2, 1: 2, 2: 2}), leaders  # spread evenly

    # Each partition is served by its leader alone.
    for partition, _, leader, _ in layouts[0][1]:
        other = cluster[(leader + 1) % 3].bootstrap
        with RawConn(other) as conn:
            assert conn.produce(topic, partition, one_record_batch(b"x"))["error_code"] == NOT_LEADER_OR_FOLLOWER
            assert conn.fetch(topic, partition, 0)["error_code"] == NOT_LEADER_OR_FOLLOWER

    sent = _produce(b0, topic, 600, "a")
    got = _consume_all(b2, topic, 600, "g1")
    assert {p: [v for _, v in rs] for p, rs in got.items()} == sent  # exactly, in order, once
    assert all([o for o, _ in rs] == list(range(len(rs))) for rs in got.values())

    # DeleteTopics on another broker: gone from all three.
    admin1.delete_topics([topic])[topic].result(30)
    for b in (b0, b1, b2):
        wait_until(lambda b=b: metadata(b, [topic])["topics"][0]["error_code"], 30, 0.2,
                   "the topic gone (UNKNOWN_TOPIC_OR_PARTITION)", ok=lambda code: code == 3)


def test_a_dead_leaders_partitions_go_offline_and_come_back_with_their_data(
        cluster: dict[int, Any]) -> None:
    b0 = cluster[0].bootstrap
    topic = f"offline-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b0})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
    wait_until(lambda: [len(_layout(p.bootstrap, topic)[1]) for p in cluster.values()], 30, 0.2,
               "the topic everywhere", ok=lambda s: s == [6, 6, 6], retry_errors=True)
    sent = _produce(b0, topic, 300, "a")
    controller = metadata(b0, [])["controller_id"]
    victim = next(n for n in (0, 1, 2) if n != controller and n != 0)  # neither the controller nor b0
    _, layout = _layout(b0, topic)
    theirs = sorted(p for p, _, leader, _ in layout if leader == victim)
    assert len(theirs) == 2

    cluster[victim].kill()
    seen = wait_until(lambda: _layout(b0, topic)[1], 30, 0.2, "its partitions offline",
                      ok=lambda lay: all(lay[p][1] == LEADER_NOT_AVAILABLE for p in theirs))
    for p, error, leader, offline in seen:
        if p in theirs:
            assert (leader, offline) == (-1, [victim])  # no other replica may lead it
        else:
            assert (error, offline) == (0, [])
    with RawConn(b0) as conn:
        assert conn.produce(topic, theirs[0], one_record_batch(b"x"))["error_code"] in (
            NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE)

    cluster[victim].start()  # back on its data dir: leads its partitions again
    wait_until(lambda: _layout(b0, topic)[1], 30, 0.2, "every partition online again",
               ok=lambda lay: all(e == 0 and not off for _, e, _, off in lay))
    assert [leader for _, _, leader, _ in _layout(b0, topic)[1]] == [leader for _, _, leader, _ in layout]
    more = _produce(b0, topic, 300, "b")
    got = _consume_all(cluster[2 if victim != 2 else 1].bootstrap, topic, 600, "g2")
    for p in range(6):
        values = [v for _, v in got.get(p, [])]
        if values != sent[p] + more[p]:
            _, lay = _layout(b0, topic)
            leader = lay[p][2]
            with RawConn(cluster[leader].bootstrap) as conn:
                raw = conn.fetch(topic, p, len(values))
                lo = conn.list_offsets(topic, p, -1)
            raise AssertionError((p, len(values), len(sent[p]), len(more[p]), leader, victim, raw["error_code"],
                                  raw["high_watermark"], len(raw.get("records") or b""), lo, got.keys(),
                                  {q: len(r) for q, r in got.items()}))


def test_partitions_added_on_one_broker_are_replicated_and_served_everywhere(cluster: dict[int, Any]) -> None:
    """CreatePartitions of a shared, replicated topic: `kafka-topics --alter --partitions` on one
    broker, an explicit assignment through the AdminClient on another; every broker lists the
    new partitions with their replicas, and an acks=all producer and a group consumer move
    records through all of them."""
    from confluent_kafka.admin import NewPartitions

    from . import cli_helpers as cli

    b0, b1, b2 = (cluster[n].bootstrap for n in (0, 1, 2))
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b0})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    # (a broker that does not know it yet answers UNKNOWN_TOPIC_OR_PARTITION)
    wait_until(lambda: [len(_layout(b, topic)[1]) for b in (b0, b1, b2)], 30, 0.2, "the topic everywhere",
               ok=lambda s: s == [2, 2, 2], retry_errors=True)
    cli.require_tools()
    cli.run("kafka-topics", "--bootstrap-server", b1, "--alter", "--topic", topic, "--partitions", "4")
    admin2 = AdminClient({"bootstrap.servers": b2})
    admin2.create_partitions([NewPartitions(topic, 6, replica_assignment=[[2, 0, 1], [1, 2, 0]])])[topic].result(30)

    def replicas(b: str) -> list[tuple[int, int, list[int], int]]:
        [t] = metadata(b, [topic])["topics"]
        return sorted((p["partition_index"], p["error_code"], sorted(p["replica_nodes"]), len(p["isr_nodes"]))
                      for p in t["partitions"])

    want = [(p, 0, [0, 1, 2], 3) for p in range(6)]
    for b in (b0, b1, b2):
        wait_until(lambda b=b: replicas(b), 30, 0.2, "six partitions, three replicas each, in sync",
                   ok=lambda seen: seen == want)
    [t] = metadata(b0, [topic])["topics"]
    assert [p["leader_id"] for p in sorted(t["partitions"], key=lambda p: p["partition_index"])][4:] == [2, 1]
    # fewer partitions than it has: refused, nothing changes
    refused = cli.run("kafka-topics", "--bootstrap-server", b0, "--alter", "--topic", topic, "--partitions", "3",
                      check=False)
    assert refused.returncode != 0 and "InvalidPartitionsException" in refused.stdout + refused.stderr, refused
    assert replicas(b1) == want

    sent = _produce(b0, topic, 600, "g")
    assert sorted(sent) == list(range(6)) and all(len(v) == 100 for v in sent.values())
    got = _consume_all(b1, topic, 600, "grow")
    assert {p: [v for _, v in rs] for p, rs in got.items()} == sent


def test_a_non_leader_names_the_leader_and_epochs_are_checked(cluster: dict[int, Any]) -> None:
    """Metadata gives each partition's leader epoch; a Produce (v11) or Fetch (v16) sent to a
    broker that does not lead the partition answers NOT_LEADER_OR_FOLLOWER with the current
    leader and its epoch and that leader's endpoint (KIP-951); a Fetch or ListOffsets at an
    epoch newer than the partition's is UNKNOWN_LEADER_EPOCH."""
    b0 = cluster[0].bootstrap
    topic = f"hint-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": b0})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    wait_until(lambda: [len(_layout(p.bootstrap, topic)[1]) for p in cluster.values()], 30, 0.2,
               "the topic everywhere", ok=lambda s: s == [3, 3, 3], retry_errors=True)
    [t] = metadata(b0, [topic])["topics"]
    part = next(p for p in t["partitions"] if p["partition_index"] == 0)
    leader, epoch = part["leader_id"], part["leader_epoch"]
    assert epoch >= 0
    other = cluster[(leader + 1) % 3].bootstrap
    host, port = cluster[leader].bootstrap.rsplit(":", 1)
    want_endpoint = [{"node_id": leader, "host": host, "port": int(port), "rack": None}]
    with RawConn(other) as conn:
        produced = conn.request(0, 11, {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": one_record_batch(b"x")}]}]})
        [p] = produced["responses"][0]["partition_responses"]
        assert (p["error_code"], p["current_leader"]) == (
            NOT_LEADER_OR_FOLLOWER, {"leader_id": leader, "leader_epoch": epoch})
        assert produced["node_endpoints"] == want_endpoint
        fetched = conn.request(1, 16, _fetch_body(t["topic_id"], epoch))
        [f] = fetched["responses"][0]["partitions"]
        assert (f["error_code"], f["current_leader"]) == (
            NOT_LEADER_OR_FOLLOWER, {"leader_id": leader, "leader_epoch": epoch})
        assert fetched["node_endpoints"] == want_endpoint
    with RawConn(cluster[leader].bootstrap) as conn:
        [f] = conn.request(1, 16, _fetch_body(t["topic_id"], epoch + 1))["responses"][0]["partitions"]
        assert f["error_code"] == UNKNOWN_LEADER_EPOCH
        [f] = conn.request(1, 16, _fetch_body(t["topic_id"], epoch))["responses"][0]["partitions"]
        assert f["error_code"] == 0
        listed = conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": epoch + 1, "timestamp": -1}]}]})
        assert listed["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_LEADER_EPOCH


def _fetch_body(topic_id: bytes, leader_epoch: int) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_default_replication_factor_for_topics_created_without_one(cluster: dict[int, Any]) -> None:
    """default.replication.factor 3: `kafka-topics --create` without --replication-factor and a
    topic created automatically by a Metadata request both get three replicas, all in sync."""
    from . import cli_helpers as cli

    b0, b1 = cluster[0].bootstrap, cluster[1].bootstrap
    made, auto = f"dflt-{uuid.uuid4().hex[:6]}", f"auto-{uuid.uuid4().hex[:6]}"
    cli.require_tools()
    cli.run("kafka-topics", "--bootstrap-server", b0, "--create", "--topic", made, "--partitions", "2")
    with RawConn(b1) as conn:
        conn.request(3, 12, {"topics": [{"name": auto, "topic_id": bytes(16)}], "allow_auto_topic_creation": True,
                             "include_topic_authorized_operations": False})

    def replicas(topic: str) -> list[tuple[int, list[int], list[int]]]:
        [t] = metadata(b1, [topic], timeout=5)["topics"]
        assert t["error_code"] == 0, t
        return sorted((p["partition_index"], sorted(p["replica_nodes"]), sorted(p["isr_nodes"]))
                      for p in t["partitions"])

    wait_until(lambda: replicas(made), 30, 0.2, "three replicas of each partition, in sync",
               ok=lambda seen: seen == [(0, [0, 1, 2], [0, 1, 2]), (1, [0, 1, 2], [0, 1, 2])],
               retry_errors=True)
    wait_until(lambda: replicas(auto), 30, 0.2, "the auto-created topic with three replicas",
               ok=lambda seen: seen == [(0, [0, 1, 2], [0, 1, 2])], retry_errors=True)
