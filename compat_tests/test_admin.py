"""Topic administration through confluent-kafka's AdminClient (librdkafka): topic configs,
CreatePartitions, DeleteRecords, DescribeCluster, and the errors a Kafka broker gives.

Each assertion is what a user of `kafka-configs` / `kafka-topics` / `kafka-delete-records`
would check: the values they set, the partition counts they see, the offsets that move.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from .conftest import Broker
from .helpers import unique_topic, wait_until

TIMEOUT = 30


@pytest.fixture
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def topic(admin: AdminClient) -> Iterator[str]:
    name = unique_topic("admin")
    admin.create_topics([NewTopic(name, 4, 1, config={"retention.ms": "3600000"})])[name].result(TIMEOUT)
    _settled(admin, name, retention_ms="3600000")  # Kafka: once the broker's metadata has the topic
    yield name
    admin.delete_topics([name])[name].result(TIMEOUT)


def _configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def _settled(admin: AdminClient, topic: str, **expected: str) -> dict[str, ConfigEntry]:
    """Describe the topic once the expected values show: Kafka applies config changes through
    its metadata log, so a describe right after an alter may still see the old values."""
    want = {k.replace("_", "."): v for k, v in expected.items()}

    def shown() -> bool:
        try:
            configs = _configs(admin, topic)
        except KafkaException as exc:  # Kafka: the broker's metadata has not caught up with
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:  # the new topic yet
                raise
            return False
        return all(configs[k].value == v for k, v in want.items())

    wait_until(shown, TIMEOUT, what=f"configs {want}")
    return _configs(admin, topic)


def _error_name(exc: BaseException) -> str:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].name()


def test_create_topic_configs_are_described(admin: AdminClient, topic: str) -> None:
    configs = _configs(admin, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"


def test_incremental_alter_and_alter_configs(admin: AdminClient, topic: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    configs = _settled(admin, topic, retention_bytes="1048576")
    assert (configs["retention.bytes"].value, configs["max.message.bytes"].value) == ("1048576", "65536")
    assert configs["retention.ms"].value == "3600000", "incremental alter keeps the other overrides"

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert _settled(admin, topic, retention_bytes="-1")["max.message.bytes"].value == "65536"

    # AlterConfigs (the non-incremental API) replaces the whole set of overrides
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.bytes": "1048576"})
    with pytest.warns(DeprecationWarning):  # kafka-configs still uses it; librdkafka warns
        admin.alter_configs([res])[res].result(TIMEOUT)
    configs = _settled(admin, topic, segment_bytes="1048576")
    assert configs["segment.bytes"].value == "1048576"
    assert configs["retention.ms"].value == "604800000", "AlterConfigs dropped the earlier override"
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_bad_configs_are_refused(admin: AdminClient, topic: str) -> None:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res])[res].result(TIMEOUT)
    assert _error_name(info.value) == "INVALID_CONFIG"
    assert _configs(admin, topic)["retention.ms"].value == "3600000", "a refused change changes nothing"

    name = unique_topic("badcfg")
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(name, 1, 1, config={"no.such.config": "1"})])[name].result(TIMEOUT)
    assert _error_name(info.value) == "INVALID_CONFIG"
    assert name not in admin.list_topics(timeout=TIMEOUT).topics


def test_create_topic_errors(admin: AdminClient, topic: str) -> None:
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(TIMEOUT)
    assert _error_name(info.value) == "TOPIC_ALREADY_EXISTS"

    name = unique_topic("rf3")
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(TIMEOUT)
    assert _error_name(info.value) == "INVALID_REPLICATION_FACTOR"

    name = unique_topic("validate")
    admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)[name].result(TIMEOUT)
    assert name not in admin.list_topics(timeout=TIMEOUT).topics, "validate_only creates nothing"


def test_create_partitions(admin: AdminClient, broker: Broker, topic: str) -> None:
    admin.create_partitions([NewPartitions(topic, 6)])[topic].result(TIMEOUT)
    # Kafka propagates the new partitions to its metadata cache asynchronously
    wait_until(lambda: len(admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) == 6,
               TIMEOUT, what="6 partitions in metadata")
    meta = admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
    assert sorted(meta.partitions) == [0, 1, 2, 3, 4, 5]

    producer = Producer({"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 500})
    reports: list[tuple[int, int]] = []
    producer.produce(topic, b"in-new-partition", partition=5,
                     on_delivery=lambda err, msg: reports.append((msg.partition(), msg.offset())) if not err else None)
    assert producer.flush(TIMEOUT) == 0
    assert reports == [(5, 0)]

    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT)
    assert _error_name(info.value) == "INVALID_PARTITIONS"


def test_delete_records_moves_log_start(admin: AdminClient, broker: Broker, topic: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, b"r%d" % i, partition=1)
        producer.flush(TIMEOUT)  # one batch per record, so the deletion point falls between batches
    tp = TopicPartition(topic, 1, 4)
    result = admin.delete_records([tp])[tp].result(TIMEOUT)
    assert result.low_watermark == 4

    earliest = admin.list_offsets({TopicPartition(topic, 1): OffsetSpec.earliest()})
    latest = admin.list_offsets({TopicPartition(topic, 1): OffsetSpec.latest()})
    assert earliest[TopicPartition(topic, 1)].result(TIMEOUT).offset == 4
    assert latest[TopicPartition(topic, 1)].result(TIMEOUT).offset == 10


def test_describe_cluster(admin: AdminClient, broker: Broker) -> None:
    cluster = admin.describe_cluster().result(TIMEOUT)
    assert cluster.cluster_id
    # one node per broker the target runs (`serve --workers 2`: each worker is one)
    assert sorted((n.host, n.port) for n in cluster.nodes) == sorted(broker.addresses)
    assert cluster.controller is not None


def test_describe_log_dirs(admin: AdminClient, broker: Broker, topic: str) -> None:
    """`kafka-log-dirs --describe`: each broker's one log directory, no error, each partition of
    the topic (on the broker that holds it) with its size in bytes — the partition written to is
    the larger — and no lag."""
    import json

    from . import cli_helpers as cli

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(50):
        producer.produce(topic, b"x" * 1000, key=str(i).encode(), partition=1)
    assert producer.flush(TIMEOUT) == 0

    def described() -> dict:
        out = cli.run("kafka-log-dirs", "--bootstrap-server", broker.bootstrap, "--describe", "--topic-list", topic)
        return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("{")))

    def listed(out: dict) -> list[dict]:
        return [p for b in out["brokers"] for d in b["logDirs"] for p in d["partitions"]]

    # Kafka counts a segment's bytes once the log has them; the first describe may race the flush
    # (and on several brokers, a broker's replicas appear once its metadata has the topic)
    brokers = wait_until(described, TIMEOUT, what="every partition listed, partition 1 with bytes",
                         ok=lambda out: len(listed(out)) == 4 and [p["size"] > 0 for p in listed(out)
                                                                    if p["partition"] == f"{topic}-1"] == [True]
                         )["brokers"]
    assert len(brokers) == len(broker.addresses)
    dirs = [d for b in brokers for d in b["logDirs"]]
    assert [len(b["logDirs"]) for b in brokers] == [1] * len(brokers)
    assert all(d["error"] is None and d["logDir"].startswith("/") for d in dirs)
    partitions = [p for d in dirs for p in d["partitions"]]
    sizes = {p["partition"]: p["size"] for p in partitions}
    assert sorted(p["partition"] for p in partitions) == [f"{topic}-{p}" for p in range(4)]  # each once
    assert sizes[f"{topic}-1"] >= 50_000 > max(sizes[f"{topic}-{p}"] for p in (0, 2, 3))
    assert {(p["offsetLag"], p["isFuture"]) for p in partitions} == {(0, False)}


def test_reassignments_on_one_broker(broker: Broker, topic: str) -> None:
    """AlterPartitionReassignments of a partition onto the one broker that holds it: its replica
    can only stay where it is (answered NONE), a broker id that is not registered is refused
    (INVALID_REPLICA_ASSIGNMENT), there is nothing to cancel (NO_REASSIGNMENT_IN_PROGRESS) and
    nothing running to list."""
    from .raw import RawConn

    with RawConn(broker.bootstrap) as conn:
        meta = conn.request(3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}],
                                    "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        [node] = [p["replica_nodes"][0] for t in meta["topics"] for p in t["partitions"] if p["partition_index"] == 0]
        unregistered = max(b["node_id"] for b in meta["brokers"]) + 7
        body = conn.request(45, 0, {"timeout_ms": 30000, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "replicas": [node]}, {"partition_index": 1, "replicas": [unregistered]},
            {"partition_index": 2, "replicas": None}, {"partition_index": 9, "replicas": [node]}]}]})
        assert body["error_code"] == 0
        assert [(p["partition_index"], p["error_code"]) for t in body["responses"] for p in t["partitions"]] == [
            (0, 0), (1, 39), (2, 85), (9, 3)]
        listed = conn.request(46, 0, {"timeout_ms": 30000, "topics": None})
        assert (listed["error_code"], listed["topics"]) == (0, [])
