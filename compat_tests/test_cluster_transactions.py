"""Transactions on a cluster (issue 16, step 4b, part 1): a transactional producer writes to
partitions led by three brokers and commits a group's offsets to a group coordinated by
another broker than its transaction coordinator; commits show every record to read_committed
consumers and move the group's offsets, aborts show none and move nothing — also after a
partition leader (neither coordinator) was killed -9 between transactions.

On both targets (compat_tests/clusters.py): tmqgate with etcd, and the reference Kafka's KRaft
controller with three brokers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .clusters import find_coordinator, metadata, three_brokers
from .helpers import wait_until
from .raw import RawConn

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

PARTITIONS = 3


@pytest.fixture
def cluster(pytestconfig: pytest.Config, target: str, tmp_path: Any) -> Iterator[dict[int, Any]]:
    with three_brokers(pytestconfig, target, tmp_path) as nodes:
        yield nodes


def _txn_coordinator(bootstrap: str, transactional_id: str) -> int:
    with RawConn(bootstrap) as conn:
        [found] = conn.request(10, 4, {"key_type": 1, "coordinator_keys": [transactional_id]})["coordinators"]
    return int(found["node_id"]) if found["error_code"] == 0 else -1


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    [t] = metadata(bootstrap, [topic])["topics"]
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def _read(bootstrap: str, topic: str, isolation: str, count: int) -> dict[int, list[bytes]]:
    """``count`` records of the topic from its start (and nothing more within 3 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.subscribe([topic])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append(msg.value())
            n = sum(map(len, got.values()))
            if n >= count:
                quiet_until = quiet_until or time.monotonic() + 3
                if time.monotonic() >= quiet_until:
                    break
    finally:
        consumer.close()
    return got


def test_transactions_over_three_leaders_and_another_brokers_group(cluster: dict[int, Any], target: str) -> None:
    boot = ",".join(p.bootstrap for p in cluster.values())
    admin = AdminClient({"bootstrap.servers": boot})
    topic, source = f"txn-{uuid.uuid4().hex[:6]}", f"src-{uuid.uuid4().hex[:6]}"
    created = admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"}),
                                   NewTopic(source, 1, 3)])
    for future in created.values():
        future.result(30)
    leaders = wait_until(lambda: _leaders(cluster[0].bootstrap, topic), 30, 0.2, "the topic led",
                         ok=lambda lay: len(lay) == PARTITIONS and all(n >= 0 for n in lay.values()))
    assert sorted(leaders.values()) == [0, 1, 2], leaders  # the transaction spans three leaders

    tid = f"tx-{uuid.uuid4().hex[:6]}"
    txn_coordinator = wait_until(lambda: _txn_coordinator(cluster[0].bootstrap, tid), 60, 0.2,
                                 "a transaction coordinator", ok=lambda n: n >= 0)
    group = next(g for g in (f"eos-{uuid.uuid4().hex[:8]}" for _ in range(500))
                 if wait_until(lambda g=g: find_coordinator(cluster[0].bootstrap, g), 60, 0.2,
                               "a group coordinator", ok=lambda n: n >= 0) not in (txn_coordinator, -1))
    group_coordinator = find_coordinator(cluster[0].bootstrap, group)
    [bystander] = [n for n in cluster if n not in (txn_coordinator, group_coordinator)]

    producer = Producer({"bootstrap.servers": boot, "transactional.id": tid, "acks": "all",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    member = Consumer({"bootstrap.servers": boot, "group.id": group})  # its group metadata, no join

    def transaction(tag: str, offset: int, commit: bool) -> list[bytes]:
        values = [f"{tag}{i:02d}".encode() for i in range(30)]
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % PARTITIONS)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)], member.consumer_group_metadata(), 30)
        assert producer.flush(30) == 0  # all written before the end (an abort drops what is unsent)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
        return values

    def committed_offset() -> int:
        wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(source, 0)])
        [tp] = admin.list_consumer_group_offsets([wanted])[group].result(30).topic_partitions
        return tp.offset

    first = transaction("c", 7, commit=True)
    assert wait_until(committed_offset, 30, 0.2, "the group's offset committed by the transaction",
                      ok=lambda o: o == 7) == 7

    # a partition leader that coordinates nothing dies: its partition moves, transactions go on
    cluster[bystander].kill()
    wait_until(lambda: _leaders(cluster[txn_coordinator].bootstrap, topic), 60, 0.2,
               "its partition led elsewhere",
               ok=lambda lay: bystander not in lay.values() and -1 not in lay.values(), retry_errors=True)
    aborted = transaction("a", 9, commit=False)
    last = transaction("d", 12, commit=True)
    assert wait_until(committed_offset, 30, 0.2, "the second commit's offset", ok=lambda o: o == 12) == 12
    member.close()
    producer.flush(10)

    live = ",".join(p.bootstrap for n, p in cluster.items() if n != bystander)
    committed = _read(live, topic, "read_committed", 60)
    for p in range(PARTITIONS):  # every committed record, in order; none of the aborted
        assert committed[p] == [v for i, v in enumerate(first) if i % PARTITIONS == p] + \
            [v for i, v in enumerate(last) if i % PARTITIONS == p], p
    everything = _read(live, topic, "read_uncommitted", 90)
    assert sorted(v for vs in everything.values() for v in vs) == sorted(first + aborted + last)


def test_a_transaction_goes_on_when_its_coordinator_dies(cluster: dict[int, Any], target: str) -> None:
    """A transaction begun, written and given a group's offsets; its coordinator is killed -9
    before the commit: the commit goes to the new coordinator (the transaction's state was
    replicated), and read_committed reads both transactions' records, the group its offset."""
    boot = ",".join(p.bootstrap for p in cluster.values())
    admin = AdminClient({"bootstrap.servers": boot})
    topic, source = f"txk-{uuid.uuid4().hex[:6]}", f"srck-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"}),
                                       NewTopic(source, 1, 3)]).values():
        future.result(30)
    wait_until(lambda: _leaders(cluster[0].bootstrap, topic), 30, 0.2, "the topic led",
               ok=lambda lay: len(lay) == PARTITIONS and all(n >= 0 for n in lay.values()))
    tid, group = f"txk-{uuid.uuid4().hex[:6]}", f"eosk-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": boot, "transactional.id": tid, "acks": "all",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(60)
    member = Consumer({"bootstrap.servers": boot, "group.id": group})
    written: list[bytes] = []
    for tag, offset in (("x", 3), ("y", 8)):
        values = [f"{tag}{i:02d}".encode() for i in range(30)]
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % PARTITIONS)
        producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)], member.consumer_group_metadata(), 30)
        assert producer.flush(30) == 0
        written += values
        if tag == "y":  # the coordinator dies with the transaction open
            coordinator = _txn_coordinator(cluster[0].bootstrap, tid)
            assert coordinator >= 0
            cluster[coordinator].kill()
        producer.commit_transaction(90)
    member.close()
    live = ",".join(p.bootstrap for n, p in cluster.items() if n != coordinator)
    wait_until(lambda: _txn_coordinator(live.split(",")[0], tid), 60, 0.2, "a new coordinator",
               ok=lambda n: n not in (-1, coordinator), retry_errors=True)
    committed = _read(live, topic, "read_committed", 60)
    for p in range(PARTITIONS):
        assert committed[p] == [v for i, v in enumerate(written) if i % 30 % PARTITIONS == p], p
    wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(source, 0)])
    live_admin = AdminClient({"bootstrap.servers": live})
    assert wait_until(
        lambda: live_admin.list_consumer_group_offsets([wanted])[group].result(30).topic_partitions[0].offset,
        60, 0.2, "the second transaction's offset", ok=lambda o: o == 8, retry_errors=True) == 8
