"""Groups on a cluster (issue 16, step 4): group coordinators are spread over the brokers (a
group's coordinator is the leader of its partition of the replicated group-state topic — Kafka:
of ``__consumer_offsets``), and a coordinator's death moves its groups to another broker with
their committed offsets intact.

On both targets (compat_tests/clusters.py): tmqgate with etcd, and the reference Kafka's KRaft
controller with three brokers (``offsets.topic.replication.factor`` 3, its default).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tmqgate.protocol.internal_topics import partition_for

from .clusters import find_coordinator, metadata, three_brokers
from .helpers import wait_until
from .raw import RawConn, group_commit_records

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

PARTITIONS = 3
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
NOT_COORDINATOR = 16


@pytest.fixture(scope="module")
def cluster(pytestconfig: pytest.Config, target: str,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Any]]:
    """One cluster for the module: the test that kills a broker comes last."""
    with three_brokers(pytestconfig, target, tmp_path_factory.mktemp("cluster-groups")) as nodes:
        yield nodes


def _topic(cluster: dict[int, Any]) -> tuple[str, dict[int, list[bytes]]]:
    """A topic of 3 partitions, replication factor 3, with 100 numbered records in each."""
    topic = f"groups-{uuid.uuid4().hex[:6]}"
    boot = ",".join(p.bootstrap for p in cluster.values())
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: metadata(cluster[0].bootstrap, [topic])["topics"][0]["partitions"], 30, 0.2,
               "the topic led",
               ok=lambda parts: len(parts) == PARTITIONS and all(p["leader_id"] >= 0 for p in parts))
    producer = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "acks": "all"})
    written: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(300):
        value = f"{i:04d}".encode()
        producer.produce(topic, value, partition=i % PARTITIONS)
        written[i % PARTITIONS].append(value)
    assert producer.flush(30) == 0
    return topic, written


def _consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        config.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
    return Consumer(config)


def _read(consumer: Consumer, count: int, timeout: float = 60.0) -> list[tuple[int, bytes]]:
    """``count`` records (partition, value), polled until they came or the time is up."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got.append((msg.partition(), msg.value()))
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


def _committed(consumer: Consumer, topic: str) -> dict[int, int]:
    parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    return {tp.partition: tp.offset for tp in parts}


def test_a_broker_answers_another_brokers_groups_not_coordinator(cluster: dict[int, Any], target: str) -> None:
    """OffsetCommit and OffsetFetch sent to a broker that does not coordinate the group answer
    NOT_COORDINATOR for every partition, and change nothing; the coordinator takes the commit."""
    topic, _ = _topic(cluster)
    group = f"elsewhere-{uuid.uuid4().hex[:6]}"
    coordinator = wait_until(lambda: find_coordinator(cluster[0].bootstrap, group), 60, 0.2, "a coordinator",
                             ok=lambda n: n >= 0, retry_errors=True)
    other = cluster[(coordinator + 1) % 3].bootstrap

    def commit(bootstrap: str, offset: int) -> list[int]:
        with RawConn(bootstrap) as conn:
            answer = conn.request(OFFSET_COMMIT, 8, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                     "committed_metadata": None}]}]})
        return [p["error_code"] for t in answer["topics"] for p in t["partitions"]]

    def fetch(bootstrap: str) -> tuple[int, int]:
        with RawConn(bootstrap) as conn:
            [g] = conn.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
                {"name": topic, "partition_indexes": [0]}]}], "require_stable": False})["groups"]
        offsets = [p["committed_offset"] for t in g["topics"] for p in t["partitions"]]
        return g["error_code"], (offsets[0] if offsets else -1)

    assert commit(other, 7) == [NOT_COORDINATOR]
    assert fetch(other)[0] == NOT_COORDINATOR
    assert wait_until(lambda: commit(cluster[coordinator].bootstrap, 5), 30, 0.2,
                      "the coordinator takes the commit", ok=lambda codes: codes == [0]) == [0]
    assert fetch(cluster[coordinator].bootstrap) == (0, 5)


def test_group_coordinators_are_spread_and_offsets_outlive_the_coordinator(
        cluster: dict[int, Any], target: str) -> None:
    """Twelve groups have their coordinators on more than one broker, every broker naming the
    same one. A classic and a KIP-848 group that share a coordinator each read and commit half
    the topic; the coordinator is killed -9; FindCoordinator names a live broker for both, their
    committed offsets are exactly what was committed — and their records in __consumer_offsets
    are where they were, at the same offsets —, and a consumer of each group reads on from
    there: the other half, nothing twice."""
    topic, written = _topic(cluster)
    boot = ",".join(p.bootstrap for p in cluster.values())

    def coordinators(names: list[str], dead: frozenset[int] = frozenset()) -> dict[str, int]:
        """Each group's coordinator once every live broker names the same live one."""
        live = [p.bootstrap for n, p in cluster.items() if n not in dead]

        def settled(seen: Any) -> bool:
            return isinstance(seen, dict) and all(len(s) == 1 and not s & (dead | {-1}) for s in seen.values())

        seen = wait_until(lambda: {g: {find_coordinator(b, g) for b in live} for g in names}, 60, 0.2,
                          "every live broker names one live coordinator per group", ok=settled,
                          retry_errors=True)
        return {g: next(iter(s)) for g, s in seen.items()}

    spread = coordinators([f"spread-{i}" for i in range(12)])
    assert len(set(spread.values())) >= 2, spread

    # two groups (classic, KIP-848) with one coordinator
    by_node: dict[int, list[str]] = {}
    for _ in range(200):
        name = f"victim-{uuid.uuid4().hex[:8]}"
        by_node.setdefault(coordinators([name])[name], []).append(name)
        pair = next((names for names in by_node.values() if len(names) >= 2), None)
        if pair:
            break
    assert pair is not None
    groups = dict(zip(("classic", "consumer"), pair[:2], strict=True))
    coordinator = coordinators(list(groups.values()))[groups["classic"]]

    committed: dict[str, dict[int, int]] = {}
    read_before: dict[str, set[bytes]] = {}
    for protocol, group in groups.items():
        consumer = _consumer(boot, group, protocol)
        consumer.subscribe([topic])
        try:
            got = _read(consumer, 150)
            positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            consumer.commit(offsets=[tp for tp in positions if tp.offset >= 0], asynchronous=False)
            committed[group] = _committed(consumer, topic)
            read_before[group] = {v for _, v in got}
        finally:
            consumer.close()
        assert sum(max(o, 0) for o in committed[group].values()) == 150, committed[group]

    # the groups' commit records in __consumer_offsets, as a lag monitor reading it saw them
    survivor = next(p.bootstrap for n, p in cluster.items() if n != coordinator)  # one address: RoutedConn's
    [offsets_topic] = metadata(survivor, ["__consumer_offsets"])["topics"]
    log_partition = {g: partition_for(g, len(offsets_topic["partitions"])) for g in groups.values()}
    in_log = {g: group_commit_records(survivor, log_partition[g], g) for g in groups.values()}
    assert all(in_log.values()), in_log

    cluster[coordinator].kill()
    moved = coordinators(list(groups.values()), dead=frozenset({coordinator}))
    assert all(node != coordinator for node in moved.values()), moved
    live = ",".join(p.bootstrap for n, p in cluster.items() if n != coordinator)
    # the new coordinators serve them as they were, each record at its offset (Kafka's log is
    # replicated; tmqgate replicates it with the group state: storage/group_log.py)
    for group in groups.values():
        assert wait_until(lambda g=group: group_commit_records(survivor, log_partition[g], g), 60, 0.5,
                          f"{group}'s records in __consumer_offsets from its new coordinator", retry_errors=True,
                          ok=lambda records, g=group: records == in_log[g]) == in_log[group]
    for protocol, group in groups.items():
        consumer = _consumer(live, group, protocol)
        try:
            assert wait_until(lambda c=consumer: _committed(c, topic), 60, 0.2, "the committed offsets",
                              ok=lambda got: bool(got), retry_errors=True) == committed[group]
            consumer.subscribe([topic])
            rest = _read(consumer, 150)
            assert not {v for _, v in rest} & read_before[group], "nothing read twice"
            assert sorted(read_before[group] | {v for _, v in rest}) == sorted(v for vs in written.values() for v in vs)
            assert consumer.poll(2) is None, "nothing more"
        finally:
            consumer.close()
