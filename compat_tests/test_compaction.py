"""Compacted topics as Apache Kafka has them (issue 15, point 1).

``cleanup.policy`` takes ``compact``, ``delete`` or both, validated and shown as Kafka's
LogConfig does; a record without a key produced to a topic whose policy includes compact is
refused (INVALID_RECORD, every keyless record named in record_errors, Kafka's LogValidator
messages) and the batch is not stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tmqgate.protocol.records import build_batch

from .brokers import new_broker
from .cli_helpers import run as cli_run
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RoutedConn

TIMEOUT = 30
INVALID_RECORD = 87


def _admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin: AdminClient, config: dict[str, str], partitions: int = 1) -> str:
    name = unique_topic("compact")
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(TIMEOUT)
    return name


def _raw_produce(conn: RoutedConn, topic: str, batch: bytes) -> dict[str, Any]:
    """Produce one batch, retried while a new topic's partition has no leader yet (Kafka
    answers NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION for a moment after
    CreateTopics; clients retry these)."""
    return wait_until(lambda: conn.produce(topic, 0, batch), TIMEOUT, 0.1, f"{topic}[0] led",
                      ok=lambda p: p["error_code"] not in (3, 6))


#: What Kafka answers for a moment after CreateTopics or a restart, before the partition has
#: its leader everywhere (clients retry these).
_NOT_SETTLED = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT, KafkaError._TIMED_OUT)


def _settled(call: Any) -> Any:
    """``call()``, retried while it fails with one of the _NOT_SETTLED errors."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return call()
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_SETTLED or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _described(admin: AdminClient, topic: str, key: str) -> str:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = _settled(lambda: admin.describe_configs([resource])[resource].result(TIMEOUT))
    return str(configs[key].value)


@pytest.mark.parametrize(("given", "shown"), [
    ("compact", "compact"),
    ("delete", "delete"),
    ("compact,delete", "compact,delete"),
    ("delete, compact", "delete,compact"),
    ("compact,compact", "compact"),
    ("", ""),
])
def test_cleanup_policy_accepted_and_shown(broker: Broker, given: str, shown: str) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": given})
    assert _described(admin, topic, "cleanup.policy") == shown


@pytest.mark.parametrize(("given", "message"), [
    ("compact,tidy", "Invalid value tidy for configuration cleanup.policy: String must be one of: compact, delete"),
    ("compact,", "Configuration 'cleanup.policy' values must not be empty."),
])
def test_cleanup_policy_refused(broker: Broker, given: str, message: str) -> None:
    admin = _admin(broker)
    name = unique_topic("compact-bad")
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": given})])[name].result(TIMEOUT)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert err.str() == message, err


@pytest.mark.parametrize(("config", "message"), [
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"min.cleanable.dirty.ratio": "-0.1"},
     "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0"),
    ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"},
     "conflict topic config setting min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)"),
])
def test_cleaner_configs_refused(broker: Broker, config: dict[str, str], message: str) -> None:
    admin = _admin(broker)
    name = unique_topic("compact-bad")
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact", **config})]
                            )[name].result(TIMEOUT)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert err.str() == message, err


def _described_after_alter(admin: AdminClient, topic: str, key: str, want: str) -> str:
    """The value DescribeConfigs shows once an alter has reached the broker that answers:
    Kafka acknowledges IncrementalAlterConfigs when its controller has committed it, and each
    broker applies the metadata record a moment later (CI saw the value before the alter)."""
    return wait_until(lambda: _described(admin, topic, key), TIMEOUT, 0.1,
                      f"{topic} {key}={want!r}", ok=lambda v: v == want)


def test_cleanup_policy_altered_both_ways(broker: Broker) -> None:
    admin = _admin(broker)
    topic = _create(admin, {})
    assert _described(admin, topic, "cleanup.policy") == "delete"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert _described_after_alter(admin, topic, "cleanup.policy", "delete,compact") == "delete,compact"
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert _described_after_alter(admin, topic, "cleanup.policy", "compact") == "compact"


@pytest.mark.parametrize("policy", ["compact", "delete,compact"])
def test_keyless_record_refused_on_compacted_topic(broker: Broker, policy: str) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": policy})
    batch = build_batch([(b"k0", b"v0"), (None, b"no key"), (b"k2", b"v2"), (None, b"none either")])
    expected = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    with RoutedConn(broker.bootstrap) as conn:
        p = _raw_produce(conn, topic, batch)
        assert p["error_code"] == INVALID_RECORD, p
        assert p["base_offset"] == -1, p
        assert [(e["batch_index"], e["batch_index_error_message"]) for e in p["record_errors"]] == [
            (1, expected), (3, expected)]
        assert p["error_message"] == (
            "One or more records have been rejected due to 2 record errors in total, and only showing the "
            f"first three errors at most: [RecordError(batchIndex=1, message='{expected}'), "
            f"RecordError(batchIndex=3, message='{expected}')]")
        # Nothing of the batch is stored: a keyed batch afterwards takes offset 0.
        p = _raw_produce(conn, topic, build_batch([(b"k", b"v")]))
        assert (p["error_code"], p["base_offset"]) == (0, 0), p


@pytest.mark.parametrize(("policy", "code"), [("compact", 44), ("delete,compact", 0)])
def test_delete_records_needs_the_delete_policy(broker: Broker, policy: str, code: int) -> None:
    """DeleteRecords on a topic whose cleanup.policy lacks delete: POLICY_VIOLATION (44)."""
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": policy})
    with RoutedConn(broker.bootstrap) as conn:
        for i in range(3):
            assert _raw_produce(conn, topic, build_batch([(b"k%d" % i, b"v")]))["error_code"] == 0
        body = conn.request(21, 2, {"timeout_ms": 10000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}]})
    [p] = body["topics"][0]["partitions"]
    assert (p["error_code"], p["low_watermark"]) == (code, 2 if code == 0 else -1), p


def test_keyless_record_accepted_on_delete_topic(broker: Broker) -> None:
    admin = _admin(broker)
    topic = _create(admin, {"cleanup.policy": "delete"})
    with RoutedConn(broker.bootstrap) as conn:
        p = _raw_produce(conn, topic, build_batch([(None, b"no key")]))
        assert (p["error_code"], p["base_offset"], p["record_errors"]) == (0, 0, []), p


# -- the cleaner over TCP ---------------------------------------------------------------------
#
# Both brokers run their cleaner every 200 ms (tmqgate's log_cleaner_backoff_ms, Kafka's
# log.cleaner.backoff.ms) and the topics roll their head quickly (segment.ms 100: Kafka rolls
# its active segment at the first append more than 100 ms after the segment's first batch;
# tmqgate's head is the entries within segment.ms of the newest one), clean at any dirty
# ratio (min.cleanable.dirty.ratio 0.01) and without lag (min.compaction.lag.ms 0).

CLEANER_TOPIC = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                 "min.compaction.lag.ms": "0"}


@pytest.fixture(scope="module")
def cleaner_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory, target: str,
                   broker: Broker) -> Iterator[Broker]:
    if broker.external:
        pytest.skip("--bootstrap given: the cleaner tests need their own broker settings")
    config: dict[str, Any] = ({"log.cleaner.backoff.ms": "200"} if target == "kafka"
                              else {"log_cleaner_backoff_ms": 200})
    proc = new_broker(str(pytestconfig.getoption("--target")), tmp_path_factory.mktemp("cleaner"), config=config)
    proc.start()
    try:
        yield Broker(proc.bootstrap, target, external=False)
    finally:
        proc.stop()


def _produce_rounds(producer: Producer, topic: str, rounds: list[list[tuple[bytes, bytes | None]]]
                    ) -> list[tuple[int, bytes, bytes | None]]:
    """Each round flushed on its own (a batch each); (offset, key, value) of every record."""
    out: list[tuple[int, bytes, bytes | None]] = []
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            out.append((msg.offset(), msg.key(), msg.value()))

    for records in rounds:
        for key, value in records:
            producer.produce(topic, value, key, partition=0, on_delivery=report)
        assert producer.flush(TIMEOUT) == 0
    assert errors == []
    return sorted(out)


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record from the beginning to the high watermark, with a stock consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_uncommitted"})
    try:
        _, high = _settled(lambda: consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT,
                                                                 cached=False))
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= high:
                    return got
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"did not reach the high watermark {high}: {got[-3:]}")
    finally:
        consumer.close()


def test_cleaner_keeps_newest_per_key_at_original_offsets(cleaner_broker: Broker) -> None:
    admin = _admin(cleaner_broker)
    topic = _create(admin, dict(CLEANER_TOPIC))
    producer = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    keys = [b"key-%02d" % k for k in range(10)]
    rounds: list[list[tuple[bytes, bytes | None]]] = [
        [(k, b"%s=%d" % (k, r)) for k in keys] for r in range(20)]
    rounds.append([(keys[3], None)])  # a tombstone: kept (delete.retention.ms is a day)
    written = _produce_rounds(producer, topic, rounds)
    time.sleep(0.5)  # past segment.ms: the next append rolls the head (Kafka: its active segment)
    [roll] = _produce_rounds(producer, topic, [[(b"roll", b"roll")]])
    newest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
    for record in written:
        newest[record[1]] = record
    expected = sorted(newest.values()) + [roll]
    assert len(written) == 201 and len(expected) == 11

    got: list[tuple[int, bytes, bytes | None]] = []

    def cleaned() -> bool:
        got[:] = _consume_all(cleaner_broker.bootstrap, topic)
        return len(got) == len(expected)

    wait_until(cleaned, 60, interval=0.5, what="the cleaner to compact the topic")
    assert got == expected  # the newest value per key at its original offset; the tombstone too
    # The idempotent producer goes on after the cleaning (its state kept): the next offset.
    [after] = _produce_rounds(producer, topic, [[(b"after", b"x")]])
    assert after[0] == roll[0] + 1


def test_cleaner_leaves_the_head_alone(cleaner_broker: Broker) -> None:
    """Without a roll, the last batch is the head: never cleaned, on either broker."""
    admin = _admin(cleaner_broker)
    topic = _create(admin, dict(CLEANER_TOPIC))
    producer = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "linger.ms": 5})
    first = _produce_rounds(producer, topic, [[(b"a", b"1"), (b"b", b"1")]])
    time.sleep(0.5)
    rest = _produce_rounds(producer, topic, [[(b"a", b"2")], [(b"a", b"3")]])
    time.sleep(0.5)
    head = _produce_rounds(producer, topic, [[(b"a", b"4"), (b"b", b"2")]])
    expected = [first[1]] + rest[1:] + head  # b=1 (its newer is in the head), a=3, the head

    got: list[tuple[int, bytes, bytes | None]] = []

    def cleaned() -> bool:
        got[:] = _consume_all(cleaner_broker.bootstrap, topic)
        return len(got) == len(expected)

    wait_until(cleaned, 60, interval=0.5, what="the cleaner to compact all but the head")
    assert got == expected
    # The Java consumer (kafka-console-consumer) steps over the gaps the same way.
    out = cli_run("kafka-console-consumer", "--bootstrap-server", cleaner_broker.bootstrap, "--topic", topic,
                  "--from-beginning", "--max-messages", str(len(expected)), "--timeout-ms", "30000",
                  "--formatter-property", "print.offset=true", "--formatter-property", "print.key=true")
    assert out.stdout.split("\n")[:-1] == [f"Offset:{o}\t{k.decode()}\t{v.decode()}" for o, k, v in expected
                                           if v is not None], out.describe()


def test_cleaner_removes_aborted_transaction_records(cleaner_broker: Broker) -> None:
    """The records of an aborted transaction are removed by the cleaning, as Kafka's cleaner
    discards aborted batches: a read_uncommitted consumer no longer sees them; the committed
    records keep their offsets."""
    admin = _admin(cleaner_broker)
    topic = _create(admin, dict(CLEANER_TOPIC))
    txn = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "transactional.id": unique_topic("txn"),
                    "linger.ms": 5})
    txn.init_transactions(TIMEOUT)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"aborted-%d" % i, b"gone-%d" % i, partition=0)
    txn.flush(TIMEOUT)
    txn.abort_transaction(TIMEOUT)
    producer = Producer({"bootstrap.servers": cleaner_broker.bootstrap, "linger.ms": 5})
    kept = _produce_rounds(producer, topic, [[(b"a", b"1"), (b"b", b"1")]])
    time.sleep(0.5)
    [roll] = _produce_rounds(producer, topic, [[(b"roll", b"roll")]])
    assert kept[0][0] > 0  # after the aborted records and the abort marker

    got: list[tuple[int, bytes, bytes | None]] = []

    def cleaned() -> bool:
        got[:] = _consume_all(cleaner_broker.bootstrap, topic)
        return not any(k.startswith(b"gone") for _, k, _ in got)

    wait_until(cleaned, 60, interval=0.5, what="the cleaner to remove the aborted records")
    assert got == kept + [roll]


@pytest.mark.slow
def test_broker_killed_mid_clean_keeps_every_newest_value(pytestconfig: pytest.Config, tmp_path: Path,
                                                          target: str) -> None:
    """SIGKILL the broker while its cleaner works through a paced cleaning (1 MB/s), restart
    it on the same data: every key's newest value is there at its offset and every record read
    is one that was produced at that offset (old or new, never lost or torn); the cleaning then
    finishes. Both brokers."""
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: cannot kill and restart an external broker")
    config: dict[str, Any] = (
        {"log.cleaner.backoff.ms": "200", "log.cleaner.io.max.bytes.per.second": "1000000"} if target == "kafka"
        else {"log_cleaner_backoff_ms": 200, "log_cleaner_io_max_bytes_per_second": 1_000_000,
              "log_cleaner_io_buffer_size": 65536})
    proc = new_broker(str(pytestconfig.getoption("--target")), tmp_path / "killed", config=config)
    proc.start()
    try:
        admin = _admin(Broker(proc.bootstrap, target, False))
        # Written under delete, then switched to compact: the whole log is cleaned in one go.
        topic = _create(admin, {**CLEANER_TOPIC, "cleanup.policy": "delete"})
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 20})
        keys = [b"key-%03d" % k for k in range(500)]
        written = _produce_rounds(producer, topic, [[(k, b"%s=%d:" % (k, r) + b"x" * 80) for k in keys]
                                                    for r in range(20)])
        time.sleep(0.5)
        [roll] = _produce_rounds(producer, topic, [[(b"roll", b"roll")]])
        producer.flush(TIMEOUT)
        del producer
        produced = {o: (k, v) for o, k, v in written + [roll]}
        newest: dict[bytes, tuple[int, bytes, bytes | None]] = {}
        for record in written:
            newest[record[1]] = record
        expected = sorted(newest.values()) + [roll]
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
        del admin

        def started() -> bool:  # the first cleaned records are gone
            return _first_offset(proc.bootstrap, topic) > 0

        wait_until(started, 60, interval=0.1, what="the cleaning to start")
        proc.kill()
        proc.start()
        got = _consume_all(proc.bootstrap, topic)
        assert all(produced.get(o) == (k, v) for o, k, v in got)  # no torn or moved record
        assert set(expected) <= set(got)  # no newest value lost

        def cleaned() -> bool:
            got[:] = _consume_all(proc.bootstrap, topic)
            return len(got) == len(expected)

        wait_until(cleaned, 120, interval=0.5, what="the cleaning to finish after the restart")
        assert got == expected
    finally:
        proc.stop()


def _first_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                return int(msg.offset())
        return -1
    finally:
        consumer.close()
