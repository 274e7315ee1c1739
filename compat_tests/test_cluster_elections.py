"""Leader elections an operator asks for (issue 16, step 2: ElectLeaders, `kafka-leader-election`)
on three brokers: after its preferred leader died and came back, a partition is led by another
replica until a preferred election gives it back — with every acknowledged record in place;
the per-partition answers (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
UNKNOWN_TOPIC_OR_PARTITION) as Kafka's controller gives them.

On both targets (compat_tests/clusters.py): tmqgate with etcd, and the reference Kafka's KRaft
controller with three brokers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from . import cli_helpers as cli
from .clusters import metadata, partition0, produce_to_partition0, read_partition0, three_brokers
from .helpers import wait_until
from .raw import RawConn

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

ELECT_LEADERS = 43
NONE, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH = 0, 3, 74
PREFERRED_LEADER_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 80, 84
PREFERRED, UNCLEAN = 0, 1


@pytest.fixture
def cluster(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> Iterator[dict[int, Any]]:
    with three_brokers(pytestconfig, target, tmp_path, lag_ms=3000) as nodes:
        wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in nodes.values()], 40,
                   0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3],
                   retry_errors=True)
        yield nodes




def _elect(bootstrap: str, election_type: int, partitions: dict[str, list[int]] | None) -> tuple[int, dict]:
    """One ElectLeaders v2: (top-level error, {(topic, partition): error})."""
    with RawConn(bootstrap, timeout=30) as conn:
        body = conn.request(ELECT_LEADERS, 2, {
            "election_type": election_type, "timeout_ms": 30000,
            "topic_partitions": None if partitions is None else
            [{"topic": t, "partitions": ps} for t, ps in partitions.items()]})
    return body["error_code"], {(r["topic"], p["partition_id"]): p["error_code"]
                                for r in body["replica_election_results"] for p in r["partition_result"]}






def test_a_preferred_election_gives_the_partition_back_to_its_first_replica(cluster: dict[int, Any]) -> None:
    boot = ",".join(p.bootstrap for p in cluster.values())
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": boot})
    # replicas 1, 2, 0: broker 1 is the preferred leader
    new = NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 0]], config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(30)
    wait_until(lambda: partition0(cluster[0].bootstrap, topic), 40, 0.2, "broker 1 leads with a full ISR",
               ok=lambda s: s == (1, [1, 2, 0], [0, 1, 2]), retry_errors=True)
    assert produce_to_partition0(boot, topic, [b"a0", b"a1", b"a2"]) == [0, 1, 2]

    # nothing to do while the preferred leader leads; an unknown topic and partition answered per partition
    error, results = _elect(cluster[0].bootstrap, PREFERRED, {topic: [0, 7], "no-such-topic": [0]})
    assert error == NONE
    assert results == {(topic, 0): ELECTION_NOT_NEEDED, (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                       ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}

    # the preferred leader dies: the next in-sync replica (2) takes over; while 1 is away a
    # preferred election cannot happen and an unclean one is not needed
    cluster[1].kill()
    wait_until(lambda: partition0(cluster[0].bootstrap, topic)[0], 40, 0.2, "broker 2 leads",
               ok=lambda leader: leader == 2, retry_errors=True)
    assert produce_to_partition0(boot, topic, [b"b0", b"b1"]) == [3, 4]
    assert _elect(cluster[0].bootstrap, PREFERRED, {topic: [0]}) == (NONE, {(topic, 0): PREFERRED_LEADER_NOT_AVAILABLE})
    assert _elect(cluster[2].bootstrap, UNCLEAN, {topic: [0]}) == (NONE, {(topic, 0): ELECTION_NOT_NEEDED})

    # back, it catches up and rejoins the ISR, but broker 2 keeps leading
    cluster[1].start()
    wait_until(lambda: partition0(cluster[0].bootstrap, topic), 60, 0.2, "broker 1 back in the ISR",
               ok=lambda s: s[0] == 2 and s[2] == [0, 1, 2], retry_errors=True)

    # kafka-leader-election --election-type PREFERRED moves the leadership back to broker 1
    cli.require_tools()
    out = cli.run("kafka-leader-election", "--bootstrap-server", cluster[0].bootstrap,
                  "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out.stdout, out.stdout
    wait_until(lambda: [partition0(p.bootstrap, topic)[0] for p in cluster.values()], 30, 0.2,
               "every broker names broker 1 the leader", ok=lambda seen: seen == [1, 1, 1],
               retry_errors=True)
    # asked again, for every partition of every topic: this one needs nothing (an internal
    # topic's partitions may, on Kafka), and afterwards nothing is left to elect or listed
    out = cli.run("kafka-leader-election", "--bootstrap-server", cluster[2].bootstrap,
                  "--election-type", "PREFERRED", "--all-topic-partitions", check=False)
    assert f"{topic}-0" not in out.stdout, out.stdout
    assert _elect(cluster[2].bootstrap, PREFERRED, None) == (NONE, {})

    # each change of leader bumped the epoch: a Fetch at the first one is fenced
    [t] = metadata(cluster[1].bootstrap, [topic], timeout=5)["topics"]
    epoch = t["partitions"][0]["leader_epoch"]
    assert epoch >= 2
    with RawConn(cluster[1].bootstrap) as conn:
        for asked, error in ((0, FENCED_LEADER_EPOCH), (epoch, NONE)):
            answer = conn.request(1, 12, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": asked, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            assert answer["responses"][0]["partitions"][0]["error_code"] == error

    # the new leader holds every acknowledged record and takes new ones after them
    assert produce_to_partition0(boot, topic, [b"c0"]) == [5]
    assert read_partition0(boot, topic, 6) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]


@pytest.fixture
def balancing(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> Iterator[dict[int, Any]]:
    """Three brokers whose controller checks the leaders' balance every second (Kafka's
    leader.imbalance.check.interval.seconds; 300 by default)."""
    with three_brokers(pytestconfig, target, tmp_path, lag_ms=3000,
                       settings={"leader_imbalance_check_interval_seconds": 1}) as nodes:
        wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in nodes.values()], 40,
                   0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3],
                   retry_errors=True)
        yield nodes


def test_the_controller_gives_a_partition_back_to_its_preferred_replica(balancing: dict[int, Any]) -> None:
    """auto.leader.rebalance.enable (on by default): a preferred leader killed and restarted
    leads its partition again once it is back in sync, without anyone asking — with every
    acknowledged record."""
    cluster = balancing
    boot = ",".join(p.bootstrap for p in cluster.values())
    topic = f"balance-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": boot})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 0]])])[topic].result(30)
    wait_until(lambda: partition0(cluster[0].bootstrap, topic), 40, 0.2, "broker 1 leads with a full ISR",
               ok=lambda s: s == (1, [1, 2, 0], [0, 1, 2]), retry_errors=True)
    assert produce_to_partition0(boot, topic, [b"a0", b"a1"]) == [0, 1]
    cluster[1].kill()
    wait_until(lambda: partition0(cluster[0].bootstrap, topic)[0], 40, 0.2, "broker 2 leads",
               ok=lambda leader: leader == 2, retry_errors=True)
    assert produce_to_partition0(boot, topic, [b"b0"]) == [2]
    cluster[1].start()
    wait_until(lambda: [partition0(p.bootstrap, topic)[0] for p in cluster.values()], 60, 0.2,
               "broker 1 leads again on every broker", ok=lambda seen: seen == [1, 1, 1],
               retry_errors=True)
    assert produce_to_partition0(boot, topic, [b"c0"]) == [3]
    assert read_partition0(boot, topic, 4) == [b"a0", b"a1", b"b0", b"c0"]
