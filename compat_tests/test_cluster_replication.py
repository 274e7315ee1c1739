"""Replicated partitions on three `tmqgate serve --cluster etcd://…` brokers (issue 16, step 2):
a topic with replication factor 3 and min.insync.replicas 2 under an idempotent acks=all
producer keeps every acknowledged record, once and in order, while partition leaders are
killed -9 and restarted; a restarted replica catches up and rejoins the ISR; a leader paused
past its session acknowledges nothing after its replacement; with one replica left in sync
acks=all is refused with NOT_ENOUGH_REPLICAS and nothing is appended, and an acks=1 write is
read only once enough replicas have it (KIP-966).

On both targets (compat_tests/clusters.py): tmqgate with etcd, and the reference Kafka's KRaft
controller with three brokers (5 kills there: a Kafka broker's restart takes several seconds).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .clusters import find_coordinator, metadata, three_brokers
from .helpers import soak_cycles, soak_full, wait_until
from .raw import PRODUCE_V, RawConn, fetched_values, one_record_batch

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

LAG_MS = 3000
# Leader kills: the reference Kafka's each takes ~10 s of failover on CI's two cores (scripts/soak.sh:
# 20 on tmqgate, 5 on Kafka).
KILLS = {"tmqgate": soak_cycles(4, 20), "kafka": soak_cycles(3, 5)}
NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT = 19, 6, 7
METADATA = 3
PARTITIONS = 3


class _SharedCluster:
    """The module's cluster, shared by its tests (each on topics of its own): a new reference
    Kafka cluster costs ~20 s of CPU (four JVMs and their storage formats), a restart of the
    brokers a test left dead ~4 s each. ``fresh()`` replaces it."""

    def __init__(self, pytestconfig: pytest.Config, target: str, workdir: Path) -> None:
        self.pytestconfig, self.target, self.workdir = pytestconfig, target, workdir
        self.stack: contextlib.ExitStack | None = None
        self.nodes: Any = None
        self.made = 0

    def fresh(self) -> Any:
        self.close()
        self.made += 1
        self.stack = contextlib.ExitStack()
        self.nodes = self.stack.enter_context(three_brokers(self.pytestconfig, self.target,
                                                            self.workdir / f"cluster{self.made}", lag_ms=LAG_MS))
        return self.nodes

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
        self.stack, self.nodes = None, None


@pytest.fixture(scope="module")
def _shared_cluster(pytestconfig: pytest.Config, target: str,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[_SharedCluster]:
    shared = _SharedCluster(pytestconfig, target, tmp_path_factory.mktemp("replication"))
    yield shared
    shared.close()


def _all_see_each_other(nodes: Any) -> None:
    wait_until(lambda: [len(metadata(p.bootstrap, [], timeout=5)["brokers"]) for p in nodes.values()], 40,
               0.2, "every broker sees the other two", ok=lambda seen: seen == [3, 3, 3], retry_errors=True)


@pytest.fixture
def cluster(_shared_cluster: _SharedCluster) -> Iterator[dict[int, Any]]:
    """Three brokers up and seeing each other: the module's cluster with what the previous test
    left dead (the coordination service, brokers killed or stopped) started again — or, when
    that does not bring it back, a new one."""
    nodes = _shared_cluster.nodes
    if nodes is not None:
        try:
            for proc in (nodes.coordination, *nodes.values()):
                if proc.proc is None or proc.proc.poll() is not None:
                    proc.start()
            _all_see_each_other(nodes)
        except Exception as exc:  # noqa: BLE001 - beyond repair: the test gets a new cluster
            print(f"the module's cluster did not come back ({exc!r}): a new one")
            nodes = None
    if nodes is None:
        nodes = _shared_cluster.fresh()
        _all_see_each_other(nodes)
    yield nodes


def _partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition → (leader, replicas, ISR) as one broker answers."""
    [t] = metadata(bootstrap, [topic], timeout=5)["topics"]
    assert t["error_code"] == 0, t
    return {p["partition_index"]: (p["leader_id"], sorted(p["replica_nodes"]), sorted(p["isr_nodes"]))
            for p in t["partitions"]}


def _any_live(cluster: dict[int, Any], dead: set[int]) -> str:
    return next(p.bootstrap for n, p in cluster.items() if n not in dead)


def _one_partition_topic(cluster: dict[int, Any], topic: str, min_isr: int | None) -> int:
    """Create ``topic`` with 1 partition, replication factor 3 and ``min.insync.replicas``
    (the broker's default when None); wait until every broker lists it with all three in
    sync: its leader."""
    config = {} if min_isr is None else {"min.insync.replicas": str(min_isr)}
    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config=config)])[topic].result(30)
    leader: int = wait_until(lambda: _partitions(cluster[0].bootstrap, topic)[0][0], 40, 0.2, "a leader",
                             ok=lambda n: n >= 0, retry_errors=True)
    wait_until(lambda: [_partitions(p.bootstrap, topic)[0][2] for p in cluster.values()], 40, 0.2,
               "the topic on every broker", ok=lambda seen: seen == [[0, 1, 2]] * 3, retry_errors=True)
    return leader


#: Records a second the load writes in the suite; under scripts/soak.sh as fast as it can. Each
#: kill still lands among writes in flight (linger.ms 2), and failover is still measured to
#: ~20 ms (an acknowledgement per partition every 20 ms); unpaced (~350 acks=all writes a
#: second), these tests took 1.2-1.5 of CI's two cores for their whole length (.ci/run of
#: 2026-11-28, CPU of each test's processes).
LOAD_RATE = None if soak_full() else 150


class _Load:
    """An idempotent acks=all producer writing n, n+1, … round-robin over the partitions in a
    thread (LOAD_RATE a second); ``acked[p]`` holds what the broker acknowledged, in order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 2, "message.timeout.ms": 120000,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.failed: list[Any] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.acked[msg.partition()].append(int(msg.value()))
            self.ack_times[msg.partition()].append(time.monotonic())

    def _run(self) -> None:
        n, started = 0, time.monotonic()
        while not self.stopped.is_set():
            self.producer.produce(self.topic, str(n).encode(), partition=n % PARTITIONS, on_delivery=self._report)
            n += 1
            pause = 0.002 if LOAD_RATE is None else max(0.0, started + n / LOAD_RATE - time.monotonic())
            self.producer.poll(pause)
        self.producer.flush(120)

    def count(self) -> int:
        return sum(map(len, self.acked.values()))


def _consume_everything(bootstrap: str, topic: str, at_least: int) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    eof: set[int] = set()
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline and (len(eof) < PARTITIONS or sum(map(len, got.values())) < at_least):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                continue
            eof.discard(msg.partition())
            got[msg.partition()].append(int(msg.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.slow
def test_acknowledged_writes_survive_leaders_killed_and_restarted(cluster: dict[int, Any], target: str,
                                                                  figures: Callable[[str], None]) -> None:
    topic = _replicated_topic(cluster)
    load = _Load(",".join(p.bootstrap for p in cluster.values()), topic)
    load.thread.start()
    kills = []
    try:
        wait_until(load.count, 40, 0.2, "the producer under way", ok=lambda c: c >= 300, retry_errors=True)
        for i in range(KILLS[target]):  # kill -9 a partition's leader, each partition in turn
            kills.append(_kill_and_restart_leader(cluster, topic, load, i % PARTITIONS))
    finally:
        load.stopped.set()
        load.thread.join(150)
    total, consumed = _check_history(cluster, topic, load)
    # Failover: the longest pause in acknowledgements of the dead leader's partition around its death.
    failovers = sorted(_longest_gap(load.ack_times[p], at - 1, at + 60) for _, p, at in kills)
    figures(f"replication soak on {target}: kills={len(kills)} acknowledged={total} consumed={consumed} "
          f"lost=0 duplicated=0 failover s min/median/max="
          f"{failovers[0]:.2f}/{failovers[len(failovers) // 2]:.2f}/{failovers[-1]:.2f}")


@pytest.mark.slow
def test_a_rolling_restart_keeps_every_acknowledged_write(cluster: dict[int, Any], target: str,
                                                          figures: Callable[[str], None]) -> None:
    """Each broker in turn stopped (SIGTERM) and started again under the load: the writes go on
    through the other two, and every acknowledged one is read back once, in order."""
    topic = _replicated_topic(cluster)
    load = _Load(",".join(p.bootstrap for p in cluster.values()), topic)
    load.thread.start()
    try:
        wait_until(load.count, 40, 0.2, "the producer under way", ok=lambda c: c >= 300, retry_errors=True)
        for n in (0, 1, 2):
            _restart_under_load(cluster, topic, load, n)
    finally:
        load.stopped.set()
        load.thread.join(150)
    total, consumed = _check_history(cluster, topic, load)
    figures(f"rolling restart on {target}: acknowledged={total} consumed={consumed} lost=0 duplicated=0")


def test_writes_go_on_after_the_coordination_service_restarts(cluster: Any, target: str,
                                                              figures: Callable[[str], None]) -> None:
    """etcd (tmqgate) or the KRaft controller (Kafka) stopped for longer than the brokers'
    session and started again under the load: writes resume, nothing acknowledged is lost.
    (While etcd is away tmqgate's leaders refuse writes to replicated partitions; Kafka's go
    on — both end with the same history.)"""
    topic = _replicated_topic(cluster)
    load = _Load(",".join(p.bootstrap for p in cluster.values()), topic)
    load.thread.start()
    try:
        wait_until(load.count, 40, 0.2, "the producer under way", ok=lambda c: c >= 300, retry_errors=True)
        cluster.coordination.stop()
        time.sleep(3)
        cluster.coordination.start()
        before = load.count()
        wait_until(load.count, 60, 0.2, "acknowledged writes after the restart",
                   ok=lambda c: c >= before + 300, retry_errors=True)
    finally:
        load.stopped.set()
        load.thread.join(150)
    total, consumed = _check_history(cluster, topic, load)
    figures(f"coordination restart on {target}: acknowledged={total} consumed={consumed} lost=0 duplicated=0")


class _GroupReader:
    """A group consumer (``protocol``: classic or consumer, KIP-848) reading the topic in a
    thread, committing as it goes; ``seen[p]`` holds every value it got from partition p."""

    def __init__(self, bootstrap: str, topic: str, protocol: str) -> None:
        self.group = f"{protocol}-{uuid.uuid4().hex[:6]}"
        conf = {"bootstrap.servers": bootstrap, "group.id": self.group,
                "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 500,
                "group.protocol": protocol, "topic.metadata.refresh.interval.ms": 1000}
        if protocol == "classic":
            conf["session.timeout.ms"] = 10000
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.offsets: list[tuple[int, int]] = []  # (partition, offset) of every read, in order
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopped.is_set():
                msg = self.consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.seen[msg.partition()].append(int(msg.value()))
                    self.offsets.append((msg.partition(), msg.offset()))
        finally:
            self.consumer.close()

    def missing(self, acked: dict[int, list[int]]) -> int:
        return sum(len(set(acked[p]) - set(self.seen[p])) for p in acked)

    def committed(self, bootstrap: str, topic: str) -> dict[int, int]:
        """The group's committed offsets as an admin client reads them (OffsetFetch)."""
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wanted = ConsumerGroupTopicPartitions(self.group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
        done = admin.list_consumer_group_offsets([wanted])[self.group].result(20)
        return {tp.partition: tp.offset for tp in done.topic_partitions if tp.error is None and tp.offset >= 0}


def test_group_consumers_keep_going_through_leader_and_coordinator_kills(
        cluster: dict[int, Any], target: str, figures: Callable[[str], None]) -> None:
    """A classic and a KIP-848 group consumer read the topic while the leaders of two partitions
    are killed -9 and restarted under the producer's load, then each group's coordinator: each
    keeps consuming and in the end has every acknowledged record (at least once — a consumer may
    read again what it had not committed yet), and a coordinator's death does not send a group
    back: after it, the group reads nothing below the offsets it had committed before."""
    topic = _replicated_topic(cluster)
    boot = ",".join(p.bootstrap for p in cluster.values())
    load = _Load(boot, topic)
    load.thread.start()
    readers = [_GroupReader(boot, topic, protocol) for protocol in ("classic", "consumer")]

    def reads_on(r: _GroupReader) -> None:
        before = sum(map(len, r.seen.values()))
        wait_until(lambda: sum(map(len, r.seen.values())), 60, 0.2, "the group consuming after the failover",
                   ok=lambda n: n >= before + 100, retry_errors=True)

    read_at_kill: dict[str, int] = {}  # how many it had read when its coordinator was killed
    committed_at_kill: dict[str, dict[int, int]] = {}
    try:
        wait_until(load.count, 40, 0.2, "the producer under way", ok=lambda c: c >= 300, retry_errors=True)
        for partition in (0, 1):
            _kill_and_restart_leader(cluster, topic, load, partition)
            for r in readers:  # each group reads on after the failover
                reads_on(r)
        for r in readers:
            coordinator = wait_until(lambda r=r: find_coordinator(cluster[0].bootstrap, r.group), 30, 0.2,
                                     "the group's coordinator", ok=lambda n: n >= 0,
                                     retry_errors=True)
            committed_at_kill[r.group] = r.committed(boot, topic)
            read_at_kill[r.group] = len(r.offsets)
            assert committed_at_kill[r.group], "the group committed before its coordinator is killed"
            _restart_under_load(cluster, topic, load, coordinator, kill=True)
            reads_on(r)
    finally:
        load.stopped.set()
        load.thread.join(150)
    try:
        assert not load.failed, load.failed[:5]
        for r in readers:
            wait_until(lambda r=r: r.missing(load.acked), 90, 0.2, "every acknowledged record consumed",
                       ok=lambda n: n == 0, retry_errors=True)
    finally:
        for r in readers:
            r.stopped.set()
            r.thread.join(30)
    again = {r.group: sum(len(v) - len(set(v)) for v in r.seen.values()) for r in readers}
    figures(f"group consumers through 2 leader kills and their coordinators' on {target}: "
            f"acknowledged={load.count()} " + " ".join(
                f"{r.group.split('-')[0]}: read={sum(map(len, r.seen.values()))} read again={again[r.group]} "
                f"read when its coordinator died={read_at_kill[r.group]} missing=0" for r in readers))
    for r in readers:
        below = [(p, o) for p, o in r.offsets[read_at_kill[r.group]:] if o < committed_at_kill[r.group].get(p, 0)]
        assert not below, (r.group, committed_at_kill[r.group], below[:5])


def _replicated_topic(cluster: dict[int, Any]) -> str:
    """A new topic of 3 partitions, replication factor 3, min.insync.replicas 2, known to all."""
    topic = f"repl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster[0].bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    layout = wait_until(lambda: _partitions(cluster[0].bootstrap, topic), 40, 0.2, "the topic listed",
                        ok=lambda lay: len(lay) == PARTITIONS, retry_errors=True)
    assert all(replicas == isr == [0, 1, 2] for _, replicas, isr in layout.values()), layout
    assert sorted(leader for leader, _, _ in layout.values()) == [0, 1, 2]  # one leader each
    return topic


def _check_history(cluster: dict[int, Any], topic: str, load: _Load) -> tuple[int, int]:
    """Every acknowledged write read back once and in per-partition order: (acknowledged, read)."""
    assert not load.failed, load.failed[:5]
    acked = load.acked
    total = load.count()
    got = _consume_everything(_any_live(cluster, set()), topic, total)
    lost = {p: sorted(set(acked[p]) - set(got[p])) for p in acked}
    duplicated = {p: len(got[p]) - len(set(got[p])) for p in got}
    assert all(not v for v in lost.values()), {p: v[:10] for p, v in lost.items()}
    assert not any(duplicated.values()), duplicated
    for p in got:  # per-partition order: the producer wrote increasing numbers to each
        assert got[p] == sorted(got[p]), p
    return total, sum(map(len, got.values()))


def _restart_under_load(cluster: dict[int, Any], topic: str, load: _Load, node: int, kill: bool = False) -> None:
    """Stop (SIGTERM; ``kill``: -9) one broker under the load, see writes go on without it,
    start it again and wait until every ISR has it back."""
    before = load.count()
    if kill:
        cluster[node].kill()
    else:
        cluster[node].stop()
    wait_until(load.count, 40, 0.2, f"writes going on without broker {node}", ok=lambda c: c >= before + 300,
               retry_errors=True)
    cluster[node].start()
    wait_until(lambda: _partitions(_any_live(cluster, set()), topic), 40, 0.2, "all three in sync again",
               ok=lambda lay: all(isr == [0, 1, 2] for _, _, isr in lay.values()), retry_errors=True)


def _kill_and_restart_leader(cluster: dict[int, Any], topic: str, load: _Load,
                             partition: int) -> tuple[int, int, float]:
    """Kill -9 the partition's leader under the load, wait for the failover and for 300 more
    acknowledged writes, restart it and wait until it is in sync again: (node, partition, time)."""
    before = load.count()
    leader = wait_until(lambda: _partitions(_any_live(cluster, set()), topic)[partition][0], 40, 0.2,
                        "a leader", ok=lambda n: n >= 0, retry_errors=True)
    cluster[leader].kill()
    killed = time.monotonic()
    others = {n for n in cluster if n != leader}
    wait_until(lambda: _partitions(_any_live(cluster, {leader}), topic), 40, 0.2,
               "every leader on a live broker, the dead one out of every ISR (replica_lag_time_max_ms)",
               ok=lambda lay: all(ld in others and leader not in isr for ld, _, isr in lay.values()),
               retry_errors=True)
    wait_until(load.count, 40, 0.2, "acknowledged writes after the failover", ok=lambda c: c >= before + 300,
               retry_errors=True)
    cluster[leader].start()  # back: truncates, catches up, rejoins the ISR
    wait_until(lambda: _partitions(_any_live(cluster, set()), topic), 40, 0.2, "all three in sync again",
               ok=lambda lay: all(isr == [0, 1, 2] for _, _, isr in lay.values()), retry_errors=True)
    return leader, partition, killed


def _longest_gap(times: list[float], start: float, end: float) -> float:
    window = [t for t in times if start <= t <= end]
    return max((b - a for a, b in zip(window, window[1:], strict=False)), default=0.0)


def test_acks_all_is_refused_below_min_insync_replicas(cluster: dict[int, Any]) -> None:
    topic = f"minisr-{uuid.uuid4().hex[:6]}"
    leader = _one_partition_topic(cluster, topic, min_isr=2)
    with RawConn(cluster[leader].bootstrap) as conn:
        assert conn.produce(topic, 0, one_record_batch(b"in sync"))["error_code"] == 0
    down = [n for n in cluster if n != leader]
    for n in down:
        cluster[n].kill()
    wait_until(lambda: _partitions(cluster[leader].bootstrap, topic)[0][2], 40, 0.2,
               "the ISR shrunk to the leader after replica_lag_time_max_ms",
               ok=lambda isr: isr == [leader], retry_errors=True)
    # A Kafka broker's Metadata answers from the image it publishes just before it applies that
    # image to its partitions: on a loaded machine a Produce in between still met the old ISR
    # (appended, then REQUEST_TIMED_OUT waiting for the dead followers; CI run of 2026-11-28).
    time.sleep(1.0)
    with RawConn(cluster[leader].bootstrap) as conn:
        refused = conn.produce(topic, 0, one_record_batch(b"refused"))
        assert refused["error_code"] == NOT_ENOUGH_REPLICAS, refused
        assert conn.produce(topic, 0, one_record_batch(b"acks=1"), acks=1)["error_code"] == 0
        # "refused" was not appended; "acks=1" was, but below min.insync.replicas the high
        # watermark stays (KIP-966), so consumers do not see it yet
        assert conn.list_offsets(topic, 0, -1)["offset"] == 1
    for n in down:
        cluster[n].start()
    wait_until(lambda: _partitions(cluster[leader].bootstrap, topic)[0][2], 40, 0.2,
               "the restarted replicas back in sync", ok=lambda isr: isr == [0, 1, 2], retry_errors=True)
    with RawConn(cluster[leader].bootstrap) as conn:  # replicated now: visible
        wait_until(lambda: conn.list_offsets(topic, 0, -1)["offset"], 40, 0.2, "the high watermark at 2",
                   ok=lambda end: end == 2, retry_errors=True)
        assert [v for _, v in fetched_values(conn.fetch(topic, 0, 0))] == [b"in sync", b"acks=1"]


def _produce_body(topic: str, value: bytes, timeout_ms: int = 10000) -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": one_record_batch(value)}]}]}


def _metadata_body(topic: str) -> dict[str, Any]:
    return {"topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}


def test_pipelined_requests_are_answered_in_order_while_acks_all_waits(cluster: dict[int, Any]) -> None:
    """Requests sent back to back on one connection, acks=all Produce among others, are answered
    in the order sent with the offsets in that order — also when the first acks=all answer waits
    for followers that do not fetch (paused) until its timeout."""
    topic = f"pipelined-{uuid.uuid4().hex[:6]}"
    leader = _one_partition_topic(cluster, topic, min_isr=2)
    with RawConn(cluster[leader].bootstrap) as conn:
        sent = []
        for i in range(12):
            if i % 4 == 3:
                sent.append((METADATA, 12, conn.send_request(METADATA, 12, _metadata_body(topic))))
            else:
                sent.append((0, PRODUCE_V, conn.send_request(0, PRODUCE_V, _produce_body(topic, b"v%d" % i))))
        offsets = []
        for api, version, corr in sent:  # recv_response checks the correlation id: the order
            body = conn.recv_response(api, version, corr)
            if api == METADATA:
                assert [t["name"] for t in body["topics"]] == [topic]
            else:
                [p] = body["responses"][0]["partition_responses"]
                assert p["error_code"] == 0, p
                offsets.append(p["base_offset"])
        assert offsets == list(range(9))
        assert [v for _, v in fetched_values(conn.fetch(topic, 0, 0))] == \
            [b"v%d" % i for i in range(12) if i % 4 != 3]

        followers = [cluster[n].proc.pid for n in cluster if n != leader]  # type: ignore[union-attr]
        for pid in followers:
            os.kill(pid, signal.SIGSTOP)
        try:  # within replica.lag.time.max.ms: still in the ISR, so the write waits for them
            waits = conn.send_request(0, PRODUCE_V, _produce_body(topic, b"waits", timeout_ms=1000))
            after = conn.send_request(METADATA, 12, _metadata_body(topic))
            [[p]] = [t["partition_responses"] for t in conn.recv_response(0, PRODUCE_V, waits)["responses"]]
            assert p["error_code"] == REQUEST_TIMED_OUT, p
            assert [t["name"] for t in conn.recv_response(METADATA, 12, after)["topics"]] == [topic]
        finally:
            for pid in followers:
                os.kill(pid, signal.SIGCONT)


def test_a_paused_leader_acknowledges_nothing_after_its_replacement(cluster: dict[int, Any]) -> None:
    """SIGSTOP of a leader for longer than its etcd session: a write it takes when it resumes
    is not acknowledged, and what it appended then is truncated when it follows the new leader
    (KIP-101) — shown by making it the leader again and reading its log."""
    topic = f"paused-{uuid.uuid4().hex[:6]}"
    old = _one_partition_topic(cluster, topic, min_isr=2)
    with RawConn(cluster[old].bootstrap) as conn:
        assert conn.produce(topic, 0, one_record_batch(b"before"))["error_code"] == 0
    others = [n for n in cluster if n != old]
    pid = cluster[old].proc.pid  # type: ignore[union-attr]
    zombie = RawConn(cluster[old].bootstrap, timeout=60)
    os.kill(pid, signal.SIGSTOP)
    try:
        new = wait_until(lambda: _partitions(cluster[others[0]].bootstrap, topic)[0][0], 40, 0.2,
                         "a new leader elected while the old one is paused",
                         ok=lambda n: n in others, retry_errors=True)
        wait_until(lambda: _partitions(cluster[new].bootstrap, topic)[0][0], 40, 0.2, "the new leader knows",
                   ok=lambda n: n == new, retry_errors=True)
        corr = zombie.send_request(0, PRODUCE_V, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": one_record_batch(b"zombie")}]}]})
        with RawConn(cluster[new].bootstrap) as conn:
            # Kafka's broker answers Metadata from the new image a moment before its partition
            # has become the leader (NOT_LEADER_OR_FOLLOWER, nothing appended): a client retries
            code = wait_until(lambda: conn.produce(topic, 0, one_record_batch(b"after"))["error_code"], 10, 0.2,
                              "the new leader takes a write", ok=lambda c: c != NOT_LEADER_OR_FOLLOWER)
            assert code == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    [answer] = zombie.recv_response(0, PRODUCE_V, corr, timeout=30)["responses"]
    zombie.close()
    assert answer["partition_responses"][0]["error_code"] != 0, answer  # not acknowledged

    wait_until(lambda: _partitions(cluster[new].bootstrap, topic)[0][2], 40, 0.2,
               "the old leader caught up and back in sync", ok=lambda isr: isr == [0, 1, 2],
               retry_errors=True)
    for n in others:  # leave the old leader alone: it must lead again, from its own log
        cluster[n].kill()
    wait_until(lambda: _partitions(cluster[old].bootstrap, topic)[0][:1], 40, 0.2,
               "the old leader elected again", ok=lambda s: s == (old,), retry_errors=True)
    with RawConn(cluster[old].bootstrap) as conn:
        values = [v for _, v in fetched_values(conn.fetch(topic, 0, 0))]
    assert values == [b"before", b"after"]


@pytest.mark.tmqgate_only  # Kafka's brokers keep leading while the controller quorum is down
def test_a_leader_cut_off_from_etcd_takes_no_writes_until_it_is_back(cluster: dict[int, Any]) -> None:
    """etcd paused (SIGSTOP) for longer than the session: the leaders of replicated partitions
    answer NOT_LEADER_OR_FOLLOWER to writes — their leases lapse, so the controller could have
    moved the partitions — and take them again once etcd is back."""
    etcd = getattr(cluster, "etcd", None)
    assert etcd is not None and etcd.proc is not None
    topic = f"cutoff-{uuid.uuid4().hex[:6]}"
    leader = _one_partition_topic(cluster, topic, min_isr=None)
    with RawConn(cluster[leader].bootstrap) as conn:
        assert conn.produce(topic, 0, one_record_batch(b"before"))["error_code"] == 0
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(3)  # past the 2 s session
        with RawConn(cluster[leader].bootstrap) as conn:
            assert conn.produce(topic, 0, one_record_batch(b"cut off"), acks=1)["error_code"] == NOT_LEADER_OR_FOLLOWER
            assert conn.produce(topic, 0, one_record_batch(b"cut off"))["error_code"] == NOT_LEADER_OR_FOLLOWER
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)

    def produce_after() -> tuple[int, int]:
        """Write "after" to the partition's leader now (the leases lapsed: it may have moved)."""
        now = _partitions(cluster[0].bootstrap, topic)[0][0]
        with RawConn(cluster[now].bootstrap) as conn:
            return now, conn.produce(topic, 0, one_record_batch(b"after"))["error_code"]

    current, _ = wait_until(produce_after, 40, 0.2, "writes taken again once etcd is back",
                            ok=lambda answer: answer[1] == 0, retry_errors=True)
    with RawConn(cluster[current].bootstrap) as conn:
        values = [v for _, v in fetched_values(conn.fetch(topic, 0, 0))]
    assert b"cut off" not in values and values[0] == b"before" and values[-1] == b"after"


def test_a_follower_with_a_wiped_data_dir_is_re_replicated(cluster: dict[int, Any], target: str) -> None:
    """A follower stopped, its data dir removed, started again: it leaves the ISR, fetches the
    whole log again and rejoins; made the only live replica (the other two killed) it leads
    with every acknowledged record."""
    topic = f"wiped-{uuid.uuid4().hex[:6]}"
    # min.insync.replicas 1: alone at the end, the re-replicated follower may move its high
    # watermark to its log end (with 2 it would keep what it heard last, KIP-966)
    leader = _one_partition_topic(cluster, topic, min_isr=1)
    written = [f"r{i}".encode() for i in range(200)]
    with RawConn(cluster[leader].bootstrap) as conn:
        for value in written[:100]:
            assert conn.produce(topic, 0, one_record_batch(value))["error_code"] == 0
    wiped = next(n for n in cluster if n != leader)
    cluster[wiped].stop()
    shutil.rmtree(cluster[wiped].data_dir if target == "tmqgate" else cluster[wiped].workdir / "kafka-logs")
    if target == "kafka":  # a Kafka log dir needs its meta.properties: format it again
        from .kafka_cluster import _format_broker

        _format_broker(cluster[wiped], cluster[wiped].cluster_id)
    cluster[wiped].start()
    with RawConn(cluster[leader].bootstrap) as conn:
        for value in written[100:]:
            assert conn.produce(topic, 0, one_record_batch(value))["error_code"] == 0
    wait_until(lambda: _partitions(cluster[leader].bootstrap, topic)[0][2], 60, 0.2,
               "the wiped follower re-replicated and back in sync", ok=lambda isr: isr == [0, 1, 2],
               retry_errors=True)
    for n in cluster:
        if n != wiped:
            cluster[n].kill()
    wait_until(lambda: _partitions(cluster[wiped].bootstrap, topic)[0][0], 60, 0.2,
               "the re-replicated follower leading", ok=lambda n: n == wiped, retry_errors=True)

    def read() -> list[bytes]:
        with RawConn(cluster[wiped].bootstrap) as conn:
            return [v for _, v in fetched_values(conn.fetch(topic, 0, 0))]

    # Every record, once the dead replicas are out of its ISR (a broker whose lease had not
    # lapsed yet at the election stays in it until replica.lag.time.max.ms; the high
    # watermark waits for it meanwhile).
    assert wait_until(read, 30, 0.2, "every acknowledged record on the new leader",
                      ok=lambda values: values == written, retry_errors=True) == written
