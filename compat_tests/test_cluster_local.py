"""Brokers of one machine as a cluster without etcd (issue 28's first step): two `tmqgate serve
--cluster local:PATH` processes sharing one SQLite file (broker/cluster/local_kv.py) see each
other and one controller, spread a topic's partitions over both, serve a producer and a
consumer group across them exactly, and when one is killed (-9) its registration lapses with
its lease and the other takes the controller role; restarted, it is listed again.

tmqgate only: the coordination store is tmqgate's (Kafka's KRaft has no such mode).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from .brokers import TmqgateProcess, stop_all
from .clusters import metadata
from .helpers import wait_until

pytestmark = [pytest.mark.serial, pytest.mark.tmqgate_only]

SESSION_MS = 2000


def _listed(bootstrap: str) -> tuple[list[tuple[int, int]], int, str]:
    meta = metadata(bootstrap, [], timeout=5)
    return sorted((b["node_id"], b["port"]) for b in meta["brokers"]), meta["controller_id"], meta["cluster_id"]


def test_two_brokers_on_one_file_are_one_cluster(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    shared = f"local:{tmp_path / 'cluster.db'}"
    nodes = {n: TmqgateProcess(tmp_path / f"node{n}", config={
        "node_id": n, "cluster": shared, "cluster_session_timeout_ms": SESSION_MS,
        # the group-state topic on both (Kafka's default of 3 needs three brokers)
        "offsets_topic_replication_factor": 2}) for n in (0, 1)}
    for p in nodes.values():
        p.start()
    try:
        everyone = sorted((n, int(p.bootstrap.rsplit(":", 1)[1])) for n, p in nodes.items())
        answers = [wait_until(lambda p=p: _listed(p.bootstrap), 30, 0.2, "both listed", ok=lambda m: m[0] == everyone)
                   for p in nodes.values()]
        assert len({a[1] for a in answers}) == 1 and answers[0][1] in nodes, answers  # one controller
        assert len({a[2] for a in answers}) == 1, answers  # one cluster id, kept in the file

        topic = f"local-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
        leaders = wait_until(lambda: sorted(p["leader_id"] for t in metadata(nodes[1].bootstrap, [topic])["topics"]
                                            for p in t["partitions"]), 30, 0.2, "both partitions led",
                             ok=lambda ls: len(ls) == 2 and -1 not in ls)
        assert leaders == [0, 1]  # one partition on each broker

        producer = Producer({"bootstrap.servers": nodes[1].bootstrap, "acks": "all", "linger.ms": 5})
        sent = [(i % 2, f"v{i}".encode()) for i in range(200)]
        acked: list[tuple[int, int]] = []
        for part, value in sent:
            producer.produce(topic, value, partition=part,
                             on_delivery=lambda err, msg: acked.append((-1, -1) if err else (msg.partition(),
                                                                                           msg.offset())))
        assert producer.flush(30) == 0
        assert sorted(acked) == sorted((p, o) for p in (0, 1) for o in range(100))

        consumer = Consumer({"bootstrap.servers": nodes[0].bootstrap, "group.id": f"g-{topic}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got: list[tuple[int, int, bytes]] = []
        try:
            wait_until(lambda: got.extend((m.partition(), m.offset(), m.value()) for m in consumer.consume(500, 0.5)
                                          if m.error() is None) or len(got), 60, 0.1, "200 records consumed",
                       ok=lambda n: n >= 200)
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(got) == sorted((p, i // 2, v) for i, (p, v) in enumerate(sent))

        controller = answers[0][1]
        nodes[controller].kill()  # kill -9: its lease lapses after the session timeout
        [survivor] = [n for n in nodes if n != controller]
        alone = [e for e in everyone if e[0] == survivor]
        wait_until(lambda: _listed(nodes[survivor].bootstrap), 30, 0.2, "the dead controller gone, a new one",
                   ok=lambda m: m[0] == alone and m[1] == survivor)

        nodes[controller].start()  # back on its data: registered again
        for p in nodes.values():
            wait_until(lambda p=p: _listed(p.bootstrap), 30, 0.2, "the restarted broker listed again",
                       ok=lambda m: m[0] == everyone)
    finally:
        stop_all(nodes.values())
