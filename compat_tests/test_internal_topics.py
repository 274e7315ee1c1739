"""Kafka's internal topics as clients see them (issue 15, point 6): `__consumer_offsets` in
Metadata with is_internal (once a group has used the broker: Kafka creates it on the first
FindCoordinator), skipped by regex subscribers that exclude internal topics, readable by a
consumer in Kafka's own record format (the real `kafka-console-consumer` with Kafka's
`OffsetsMessageFormatter` prints a group's commits and the tombstones of deleted offsets), and
refused to producers and DeleteRecords as Kafka refuses them. Run on both brokers.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka import KafkaConsumer

from tmqgate.protocol.internal_topics import (
    offset_commit_key,
    offset_commit_value,
    partition_for,
)

from .brokers import BrokerProcess, TmqgateProcess
from .cli_helpers import client_errors, require_tools, run
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RoutedConn, group_commit_records, one_record_batch

TIMEOUT = 30
OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
PARTITIONS = 50  # offsets.topic.num.partitions: Kafka's default, tmqgate's too
CLUSTER_PARTITIONS = 6  # tmqgate on several brokers: cluster_state_partitions (broker/topics.py)


def _partitions(broker: Broker | BrokerProcess) -> int:
    """The internal topics' partitions: Kafka's (and one tmqgate broker's) 50; on tmqgate's
    brokers of one cluster (`serve --workers 2`) those of the state topics their partitions follow."""
    tmqgate = broker.target == "tmqgate" if isinstance(broker, Broker) else isinstance(broker, TmqgateProcess)
    return CLUSTER_PARTITIONS if tmqgate and len(broker.nodes) > 1 else PARTITIONS
METADATA = 3
INVALID_TOPIC_EXCEPTION = 17
RETRIABLE = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
             KafkaError.NOT_COORDINATOR)


def _compacted_history(seen: list[tuple[Any, Any]], full: list[tuple[Any, Any]]) -> bool:
    """Whether ``seen`` ((key, value) records, in order) is the log ``full`` as a compacted topic
    may show it: ``full`` in order with only superseded records gone — every key's newest record
    kept. Kafka shows ``full`` (its active segment, 100 MB on __consumer_offsets, is never
    compacted); tmqgate compacts what lies before a partition's last 1,000 records once 1,000
    were appended to it since (storage/group_log.py), which on the shared test broker may fall
    between a test's commits and its read."""
    rest = iter(full)
    in_order = all(any(record == r for r in rest) for record in seen)  # `rest` advances: a subsequence
    newest = {key: (key, value) for key, value in full}
    return in_order and all(record in seen for record in newest.values())


def _topic(admin: AdminClient, prefix: str, partitions: int) -> str:
    name = unique_topic(prefix)
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)
    wait_until(lambda: admin.list_topics(name, timeout=10).topics[name], TIMEOUT, 0.5, f"{name} in metadata",
               ok=lambda t: t.error is None and len(t.partitions) == partitions)
    return name


def _commit(broker: Broker, group: str, offsets: list[tuple[str, int, int]]) -> None:
    """One synchronous OffsetCommit of (topic, partition, offset)s by a group of no members."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                c.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
                return
            except KafkaException as exc:  # Kafka's first commit: its offsets topic is still loading
                if exc.args[0].code() not in RETRIABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _metadata_topics(broker: Broker, names: list[str] | None) -> dict[str, dict]:
    with RoutedConn(broker.bootstrap) as conn:
        body = conn.request(METADATA, 12, {
            "topics": None if names is None else [{"name": n, "topic_id": bytes(16)} for n in names],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return {t["name"]: t for t in body["topics"]}


@pytest.fixture
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def committed(broker: Broker, admin: AdminClient) -> tuple[str, str]:
    """A topic of two partitions and a group that committed (t,0)=3, (t,1)=5, then (t,0)=4."""
    topic = _topic(admin, "internal-t", 2)
    group = f"internal-g-{uuid.uuid4().hex[:10]}"
    _commit(broker, group, [(topic, 0, 3), (topic, 1, 5)])
    _commit(broker, group, [(topic, 0, 4)])
    return topic, group


def test_metadata_lists_consumer_offsets_as_internal(broker: Broker, committed: tuple[str, str]) -> None:
    topic, _ = committed
    everything = _metadata_topics(broker, None)
    entry = everything[OFFSETS]
    assert entry["error_code"] == 0 and entry["is_internal"] is True
    assert sorted(p["partition_index"] for p in entry["partitions"]) == list(range(_partitions(broker)))
    assert entry["topic_id"] != bytes(16)
    assert everything[topic]["is_internal"] is False
    by_name = _metadata_topics(broker, [OFFSETS])[OFFSETS]
    assert (by_name["error_code"], by_name["is_internal"], len(by_name["partitions"])) == (0, True, _partitions(broker))
    assert by_name["topic_id"] == entry["topic_id"]


def test_internal_topic_configs_and_offsets(broker: Broker, admin: AdminClient, committed: tuple[str, str]) -> None:
    _, group = committed
    res = ConfigResource(ResourceType.TOPIC, OFFSETS)
    configs = admin.describe_configs([res])[res].result(TIMEOUT)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["compression.type"].value == "producer"
    p = partition_for(group, _partitions(broker))
    with RoutedConn(broker.bootstrap) as conn:
        earliest = conn.list_offsets(OFFSETS, p, -2)
        latest = conn.list_offsets(OFFSETS, p, -1)
    assert (earliest["error_code"], latest["error_code"]) == (0, 0)
    assert latest["offset"] >= earliest["offset"] + 3  # at least the group's three commit records


def test_regex_subscriber_excluding_internal_topics_skips_it(broker: Broker, admin: AdminClient,
                                                              committed: tuple[str, str]) -> None:
    """kafka-python's classic subscription matches the pattern over Metadata client-side and
    drops the topics Metadata marks internal (exclude_internal_topics, default true)."""
    prefix = f"internal-rx-{uuid.uuid4().hex[:8]}"
    mine = _topic(admin, prefix, 1)
    pattern = f"^({prefix}.*|{OFFSETS})$"  # names the internal topic on purpose

    def subscribed(exclude: bool) -> set[str]:
        c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"{prefix}-{exclude}",
                          enable_auto_commit=False, exclude_internal_topics=exclude)
        try:
            c.subscribe(pattern=pattern)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and not c.subscription():
                c.poll(timeout_ms=200)
            return set(c.subscription() or ())
        finally:
            c.close()

    assert subscribed(True) == {mine}
    assert subscribed(False) == {mine, OFFSETS}


def test_produce_and_delete_records_refused(broker: Broker, committed: tuple[str, str]) -> None:
    with RoutedConn(broker.bootstrap) as conn:
        answer = conn.produce(OFFSETS, 0, one_record_batch(b"v", key=b"k"))
        assert (answer["error_code"], answer["base_offset"]) == (INVALID_TOPIC_EXCEPTION, -1)
        body = conn.request(21, 2, {"topics": [{"name": OFFSETS, "partitions": [
            {"partition_index": 0, "offset": 0}]}], "timeout_ms": 10000})
        [t] = body["topics"]
        assert [(p["partition_index"], p["error_code"]) for p in t["partitions"]] == [(0, INVALID_TOPIC_EXCEPTION)]


def _group_records(broker: Broker | BrokerProcess, group: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of the group's records in its partition of __consumer_offsets."""
    return group_commit_records(broker.bootstrap, partition_for(group, _partitions(broker)), group)


def test_fetch_returns_commits_in_kafkas_record_format(broker: Broker, committed: tuple[str, str]) -> None:
    topic, group = committed
    records = _group_records(broker, group)
    offsets = [r[0] for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    topic_id = _metadata_topics(broker, [topic])[topic]["topic_id"]
    seen = []
    for _, key, value in records:
        # byte for byte OffsetCommitValue v4 with the topic's id (tag 0); the commit
        # timestamp (after offset, leader epoch and the empty metadata) is the broker's own
        assert value is not None
        stamp = int.from_bytes(value[15:23], "big", signed=True)
        seen.append((key, next((v for v in (3, 4, 5) if value == offset_commit_value(v, -1, "", stamp, topic_id)),
                               value)))
    full = [(offset_commit_key(group, topic, 0), 3), (offset_commit_key(group, topic, 1), 5),
            (offset_commit_key(group, topic, 0), 4)]
    assert _compacted_history(seen, full), (seen, full)


def test_console_consumer_offsets_formatter_prints_commits(broker: Broker, admin: AdminClient,
                                                           committed: tuple[str, str]) -> None:
    """The real kafka-console-consumer reading __consumer_offsets with Kafka's own
    OffsetsMessageFormatter: the group's commits exactly, then the tombstone of a deleted offset."""
    require_tools()
    topic, group = committed
    gone = run("kafka-consumer-groups", "--bootstrap-server", broker.bootstrap, "--delete-offsets",
               "--group", group, "--topic", f"{topic}:1")
    assert not client_errors(gone.stderr), gone.describe()
    p = partition_for(group, _partitions(broker))
    out = run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", OFFSETS,
              "--partition", str(p), "--offset", "earliest", "--timeout-ms", "8000",
              "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter")
    # --timeout-ms ends the tool with a TimeoutException once the partition is read: expected
    errors = [e for e in client_errors(out.stderr)
              if "TimeoutException" not in e and "terminating consumer process" not in e]
    assert not errors and "Processed a total of" in out.stderr, out.describe()
    mine = []
    decoder = json.JSONDecoder()
    text, pos = out.stdout, 0
    while (start := text.find("{", pos)) >= 0:  # the formatter prints its JSON objects back to back
        msg, pos = decoder.raw_decode(text, start)
        key, value = msg["key"]["data"], msg["value"]
        if msg["key"]["type"] != 1 or key["group"] != group:
            continue
        mine.append((key["topic"], key["partition"], None if value is None else (
            value["version"], value["data"]["offset"], value["data"]["leaderEpoch"], value["data"]["metadata"])))
    full = [((topic, 0), (4, 3, -1, "")), ((topic, 1), (4, 5, -1, "")), ((topic, 0), (4, 4, -1, "")),
            ((topic, 1), None)]
    assert _compacted_history([((t, p), v) for t, p, v in mine], full), out.describe()


def _formatted(broker: Broker, partition: int, formatter: str, topic: str = OFFSETS) -> list[dict]:
    """The JSON objects kafka-console-consumer prints for a partition of an internal topic."""
    out = run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--partition", str(partition), "--offset", "earliest", "--timeout-ms", "8000",
              "--formatter", f"org.apache.kafka.tools.consumer.{formatter}")
    # --timeout-ms ends the tool with a TimeoutException once the partition is read: expected
    errors = [e for e in client_errors(out.stderr)
              if "TimeoutException" not in e and "terminating consumer process" not in e]
    assert not errors and "Processed a total of" in out.stderr, out.describe()
    decoder = json.JSONDecoder()
    text, pos, msgs = out.stdout, 0, []
    while (start := text.find("{", pos)) >= 0:  # the formatter prints its JSON objects back to back
        msg, pos = decoder.raw_decode(text, start)
        msgs.append(msg)
    return msgs


def test_console_consumer_group_metadata_formatter_prints_classic_group(broker: Broker, admin: AdminClient) -> None:
    """A classic group's life as Kafka's GroupMetadataMessageFormatter prints it: the group
    its first JoinGroup made, the synced generation (protocol, leader, the member with its client id), then the empty
    group after the member left."""
    require_tools()
    topic = _topic(admin, "internal-gm", 1)
    group = f"internal-gm-{uuid.uuid4().hex[:10]}"
    # librdkafka: a leader whose metadata lacked the new topic assigns nothing and rejoins once
    # its metadata has it (kafka-python, on a loaded machine, once waited past 30 s for that)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "gm-client",
                  "enable.auto.commit": False, "partition.assignment.strategy": "range"})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not c.assignment():
            c.poll(0.2)
        assert [(tp.topic, tp.partition) for tp in c.assignment()] == [(topic, 0)]
    finally:
        c.close()  # LeaveGroup: the group becomes empty

    def group_life() -> list[tuple[Any, ...]]:
        mine = []
        for msg in _formatted(broker, partition_for(group, _partitions(broker)), "GroupMetadataMessageFormatter"):
            # (a null value: the group deleted since — Kafka removes an empty group without
            # offsets at its next cleanup)
            if msg["key"]["type"] != 2 or msg["key"]["data"]["group"] != group or msg["value"] is None:
                continue
            v = msg["value"]
            data = v["data"]
            mine.append((v["version"], data["protocolType"], data["generation"], data["protocol"],
                         data["leader"] is not None and data["leader"] == (data["members"] or [{}])[0].get("memberId"),
                         [(m["clientId"], m["groupInstanceId"]) for m in data["members"]]))
        return mine

    # The empty group after LeaveGroup is written by the coordinator after it answers; on a
    # loaded machine it can come after a first read of the partition: read until it is there.
    mine = wait_until(group_life, TIMEOUT, 1.0, "the group's records through to the empty group",
                      ok=lambda life: len(life) >= 3 and life[-1][2] > 0 and life[-1][5] == [])
    # made by the first JoinGroup; then each synced generation (one, unless the lone member
    # rejoined); then, once it left, the next generation empty
    stable = mine[1:-1]
    assert stable, mine
    generations = [g for _, _, g, *_ in stable]
    assert generations == list(range(1, len(stable) + 1)), mine
    assert mine == [(3, "", 0, None, False, [])] + [
        (3, "consumer", g, "range", True, [("gm-client", None)]) for g in generations] + [
        (3, "consumer", len(stable) + 1, None, False, [])], mine


def test_offsets_stable_across_a_kill_and_restart(restartable_broker) -> None:
    """The records of __consumer_offsets keep their offsets across a SIGKILL and restart, and
    later commits follow them (a lag monitor resuming from its position misses nothing) — on
    `--workers N` also where the group's coordinator came back on another worker."""
    b = restartable_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = _topic(admin, "internal-rs", 1)
    group = f"internal-rs-{uuid.uuid4().hex[:10]}"
    _commit(b, group, [(topic, 0, 1)])
    _commit(b, group, [(topic, 0, 2)])
    before = _group_records(b, group)
    assert len(before) == 2
    b.kill()
    b.restart()
    _commit(b, group, [(topic, 0, 3)])
    # on `serve --workers N` the group's coordinator may come back on another worker
    # (whichever is up first takes the state partition): the log moves with it (storage/group_log.py)
    after = wait_until(lambda: _records_or_none(b, group), TIMEOUT, 0.5,
                       "the group's three commits after the restart",
                       ok=lambda r: r is not None and len(r) == 3)
    assert after[:2] == before
    assert after[2][0] > before[1][0]
    assert after[2][1] == offset_commit_key(group, topic, 0)
    assert int.from_bytes(after[2][2][2:10], "big") == 3


def _records_or_none(b, group: str) -> list[tuple[int, bytes, bytes | None]] | None:
    try:
        return _group_records(b, group)
    except (AssertionError, OSError):  # the partition not served yet after the restart
        return None


def test_console_consumer_transaction_log_formatter_prints_states(txn_broker: Broker) -> None:
    """A transactional id's states as Kafka's TransactionLogMessageFormatter prints them from
    __transaction_state: made Empty by InitProducerId, Ongoing with the partition it wrote, then
    the two-phase commit."""
    require_tools()
    from confluent_kafka import Producer

    b = txn_broker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = _topic(admin, "internal-tx", 1)
    tid = f"internal-tx-{uuid.uuid4().hex[:10]}"
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    p.commit_transaction(TIMEOUT)
    p.flush(TIMEOUT)
    assert _metadata_topics(b, [TXN_STATE])[TXN_STATE]["is_internal"] is True
    states = []
    for msg in _formatted(b, partition_for(tid, _partitions(b)), "TransactionLogMessageFormatter", TXN_STATE):
        if msg["key"]["type"] != 0 or msg["key"]["data"]["transactionalId"] != tid:
            continue
        v, d = msg["value"], msg["value"]["data"]
        assert d.get("previousProducerId", -1) == d["producerId"], d  # no rotation: the id itself
        states.append((v["version"], d["transactionStatus"], d["transactionPartitions"], d["producerEpoch"],
                       d["transactionTimeoutMs"], d.get("nextProducerId", -1), d.get("clientTransactionVersion", 0),
                       d["transactionStartTimestampMs"] > 0))
    part = [{"topic": topic, "partitionIds": [0]}]
    # version 1 (flexible, transaction.version >= 1); Empty 0, Ongoing 1, PrepareCommit 2, CompleteCommit 4
    assert states == [(1, 0, None, 0, 60000, -1, 0, False), (1, 1, part, 0, 60000, -1, 0, True),
                      (1, 2, part, 0, 60000, -1, 0, True), (1, 4, [], 0, 60000, -1, 0, True)], states
