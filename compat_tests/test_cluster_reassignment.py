"""A broker added to a running cluster and a partition moved onto it (issue 16, step 2:
AlterPartitionReassignments / ListPartitionReassignments, `kafka-reassign-partitions`): the
new broker registers and is listed by every broker; a partition's replicas [0, 1] reassigned
to [3, 1] are copied to broker 3, which then leads it (its old leader 0 was removed) with every
acknowledged record, and the answers for bad targets are Kafka's error codes.

On both targets (compat_tests/clusters.py): tmqgate with etcd (a fourth `tmqgate serve
--cluster`), and the reference Kafka's KRaft controller with a fourth broker formatted for it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from . import cli_helpers as cli
from .clusters import Nodes, metadata, partition0, produce_to_partition0, read_partition0, three_brokers
from .helpers import wait_until
from .raw import RawConn

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS = 3, 39, 85


@pytest.fixture
def cluster(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> Iterator[Nodes]:
    with three_brokers(pytestconfig, target, tmp_path, lag_ms=3000) as nodes:
        wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in nodes.values()], 40,
                   0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3],
                   retry_errors=True)
        yield nodes




def _alter(bootstrap: str, topics: dict[str, dict[int, list[int] | None]]) -> dict[tuple[str, int], int]:
    """One AlterPartitionReassignments v0: {(topic, partition): error}."""
    with RawConn(bootstrap, timeout=30) as conn:
        body = conn.request(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "replicas": r} for p, r in ps.items()]}
            for t, ps in topics.items()]})
    assert body["error_code"] == 0, body
    return {(t["name"], p["partition_index"]): p["error_code"] for t in body["responses"] for p in t["partitions"]}


def _running(bootstrap: str) -> list[tuple[str, int, list[int], list[int], list[int]]]:
    """ListPartitionReassignments v0 of every topic."""
    with RawConn(bootstrap, timeout=30) as conn:
        body = conn.request(LIST_REASSIGNMENTS, 0, {"timeout_ms": 30000, "topics": None})
    assert body["error_code"] == 0, body
    return [(t["name"], p["partition_index"], p["replicas"], p["adding_replicas"], p["removing_replicas"])
            for t in body["topics"] for p in t["partitions"]]






def test_a_partition_moved_onto_a_broker_added_to_the_running_cluster(cluster: Nodes, tmp_path: Path) -> None:
    boot = ",".join(p.bootstrap for p in cluster.values())
    topic = f"move-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": boot})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1]])])[topic].result(30)
    wait_until(lambda: partition0(cluster[2].bootstrap, topic), 40, 0.2,
               "broker 0 leads with both replicas in sync", ok=lambda s: s == (0, [0, 1], [0, 1]),
               retry_errors=True)
    first = [f"a{i}".encode() for i in range(300)]
    assert produce_to_partition0(boot, topic, first) == list(range(300))

    # a fourth broker joins the running cluster: every broker lists it
    cluster.add(3)
    wait_until(lambda: [sorted(b["node_id"] for b in metadata(p.bootstrap, [], timeout=5)["brokers"])
                        for p in cluster.values()], 40, 0.2, "every broker lists the new one",
               ok=lambda seen: seen == [[0, 1, 2, 3]] * 4, retry_errors=True)

    # bad targets, answered per partition
    assert _alter(cluster[1].bootstrap, {topic: {0: [1, 1], 5: [0, 1]}, "no-such-topic": {0: [0, 1]}}) == {
        (topic, 0): INVALID_REPLICA_ASSIGNMENT, (topic, 5): UNKNOWN_TOPIC_OR_PARTITION,
        ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert _alter(cluster[1].bootstrap, {topic: {0: [1, 9]}}) == {(topic, 0): INVALID_REPLICA_ASSIGNMENT}
    assert _alter(cluster[1].bootstrap, {topic: {0: None}}) == {(topic, 0): NO_REASSIGNMENT_IN_PROGRESS}
    assert _running(cluster[2].bootstrap) == []

    # kafka-reassign-partitions moves [0, 1] to [3, 1]
    cli.require_tools()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [3, 1]}]}))
    out = cli.run("kafka-reassign-partitions", "--bootstrap-server", cluster[2].bootstrap,
                  "--reassignment-json-file", str(plan), "--execute")
    assert f"Successfully started partition reassignment for {topic}-0" in out.stdout, out.stdout
    wait_until(lambda: cli.run("kafka-reassign-partitions", "--bootstrap-server", cluster[2].bootstrap,
                               "--reassignment-json-file", str(plan), "--verify").stdout, 60, 0.2,
               "the reassignment completed",
               ok=lambda text: f"Reassignment of partition {topic}-0 is completed." in text)
    # every broker: replicas [3, 1], led by broker 3 (the old leader left the replicas), both in sync
    wait_until(lambda: [partition0(p.bootstrap, topic) for p in cluster.values()], 40, 0.2,
               "the new placement everywhere", ok=lambda seen: seen == [(3, [3, 1], [1, 3])] * 4,
               retry_errors=True)
    assert _running(cluster[0].bootstrap) == []

    # broker 3 holds every acknowledged record and takes new ones after them
    assert produce_to_partition0(boot, topic, [b"b0", b"b1"]) == [300, 301]
    assert read_partition0(cluster[3].bootstrap, topic, 302) == first + [b"b0", b"b1"]
