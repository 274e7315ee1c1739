"""Three brokers for the cluster tests (issue 16), on either target: three `tmqgate serve
--cluster` processes with a real etcd, or the reference Kafka's KRaft controller with three
brokers (``compat_tests.kafka_cluster``) — node ids 0, 1, 2 either way, each with
``bootstrap``, ``kill()`` (SIGKILL), ``start()`` (again, on its data), ``stop()`` and ``proc``.
Both are configured alike: a 2 s broker session, and the replica lag time and the default
replication factor when given."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .brokers import TmqgateProcess, stop_all
from .etcd import EtcdProcess, require_etcd
from .helpers import free_port, wait_until
from .raw import RawConn

SESSION_MS = 2000
METADATA = 3


class Nodes(dict[int, Any]):
    """The brokers by node id; ``etcd`` (tmqgate) or None (Kafka); ``coordination``: what
    keeps the cluster's metadata — etcd for tmqgate, the KRaft controller for Kafka — with
    ``stop()`` and ``start()`` (again, on its data)."""

    etcd: EtcdProcess | None = None
    coordination: Any = None
    #: start one broker more with this node id, configured as the others (a broker added to
    #: the running cluster); it is in the dict from then on
    add: Callable[[int], Any]


#: broker settings the cluster tests set, by tmqgate's name: Kafka's name of each
KAFKA_NAMES = {"default_replication_factor": "default.replication.factor",
               "leader_imbalance_check_interval_seconds": "leader.imbalance.check.interval.seconds",
               "authorizer": "authorizer.class.name",
               "allow_everyone_if_no_acl_found": "allow.everyone.if.no.acl.found"}
#: and Kafka's value of a setting where it is not the same text
KAFKA_VALUES = {("authorizer", "acl"): "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                ("allow_everyone_if_no_acl_found", True): "true", ("allow_everyone_if_no_acl_found", False): "false"}


@contextlib.contextmanager
def three_brokers(pytestconfig: pytest.Config, target: str, workdir: Path,
                  lag_ms: int | None = None, settings: dict[str, Any] | None = None) -> Iterator[Nodes]:
    """``lag_ms``: replica.lag.time.max.ms; ``settings``: more, by tmqgate's name (KAFKA_NAMES)."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: the cluster tests start their own brokers")
    if target == "kafka":
        from .kafka_cluster import start_reference_kafka_cluster
        from .kafka_ref import require_jars

        require_jars()
        extra = {} if lag_ms is None else {"replica.lag.time.max.ms": str(lag_ms)}
        extra.update({KAFKA_NAMES[k]: KAFKA_VALUES.get((k, v), str(v)) for k, v in (settings or {}).items()})
        cluster = start_reference_kafka_cluster(workdir / "kafka", broker_config=extra)
        nodes = Nodes(cluster.brokers)
        nodes.coordination = cluster.controller

        def add_kafka(node_id: int) -> Any:
            nodes[node_id] = cluster.add_broker(node_id)
            return nodes[node_id]

        nodes.add = add_kafka
        try:
            yield nodes
        finally:
            cluster.stop()
        return
    require_etcd()
    config: dict[str, Any] = {**({} if lag_ms is None else {"replica_lag_time_max_ms": lag_ms}), **(settings or {})}
    with tmqgate_cluster(workdir, config) as nodes:
        yield nodes


@contextlib.contextmanager
def tmqgate_cluster(workdir: Path, config: dict[str, Any], *, listener: str = "PLAINTEXT",
                    prepare: Callable[[TmqgateProcess], None] | None = None) -> Iterator[Nodes]:
    """A real etcd and three `tmqgate serve --cluster` nodes (ids 0, 1, 2) with a 2 s session
    and ``config``; stopped (or killed) at the end with etcd. Also bench/cluster_bench.py's.
    ``listener``: the security protocol of each node's one listener; ``prepare``: run on each
    node's data directory before it first starts (e.g. users provisioned alike)."""
    etcd = EtcdProcess(workdir / "etcd")
    etcd.start()
    config = {"cluster": etcd.url, "cluster_session_timeout_ms": SESSION_MS, **config}
    nodes = Nodes()
    nodes.etcd = nodes.coordination = etcd

    def node(node_id: int) -> TmqgateProcess:
        port = free_port()
        own: dict[str, Any] = {"node_id": node_id}
        if listener != "PLAINTEXT":
            own.update(listeners=[f"{listener}://127.0.0.1:{port}"],
                       listener_security_protocol_map={listener: listener})
        proc = nodes[node_id] = TmqgateProcess(workdir / f"node{node_id}", port=port, config={**own, **config})
        if prepare is not None:
            prepare(proc)
        return proc

    def add_tmqgate(node_id: int) -> Any:
        node(node_id).start()
        return nodes[node_id]

    nodes.add = add_tmqgate
    try:
        for n in (0, 1, 2):
            node(n)
        for p in nodes.values():
            p.start()
        yield nodes
    finally:
        stop_all(nodes.values())
        etcd.stop()


def find_coordinator(bootstrap: str, group: str, key_type: int = 0) -> int:
    """FindCoordinator (v6) of a group (``key_type`` 0; 2: a share-partition's, the key
    "group:topic id:partition") as one broker answers it: the node id (-1: none now)."""
    with RawConn(bootstrap) as conn:
        [found] = conn.request(10, 6, {"key_type": key_type, "coordinator_keys": [group]})["coordinators"]
    return int(found["node_id"]) if found["error_code"] == 0 else -1


def metadata(bootstrap: str, topics: list[str] | None, timeout: float = 15.0) -> dict[str, Any]:
    """A Metadata v12 answer from one broker (``topics`` None: all); ``timeout``: the
    connection's (RawConn's default)."""
    with RawConn(bootstrap, timeout=timeout) as conn:
        return conn.request(METADATA, 12, {
            "topics": None if topics is None else [{"name": t, "topic_id": bytes(16)} for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def partition0(bootstrap: str, topic: str) -> tuple[int, list[int], list[int]]:
    """Partition 0's (leader, replicas in their order, sorted ISR) as one broker answers."""
    [t] = metadata(bootstrap, [topic], timeout=5)["topics"]
    [p] = t["partitions"]
    return p["leader_id"], list(p["replica_nodes"]), sorted(p["isr_nodes"])


def produce_to_partition0(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """``values`` by an idempotent acks=all producer to partition 0: the offsets acknowledged
    (-1 for a failed one), in the order of the acknowledgements."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    offsets: list[int] = []
    for v in values:
        producer.produce(topic, v, partition=0,
                         on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()))
        producer.poll(0)
    assert producer.flush(60) == 0
    return offsets


def read_partition0(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first ``count`` values (at least) of partition 0, read from offset 0."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        wait_until(lambda: got.extend(m.value() for m in consumer.consume(500, 0.5) if m.error() is None) or len(got),
                   60, 0.2, f"{count} records read", ok=lambda n: n >= count)
    finally:
        consumer.close()
    return got
