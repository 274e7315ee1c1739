"""Record timestamps as a Kafka broker treats them: LogAppendTime topics stamp batches with
the broker's clock, and CreateTime stamps too far from it are refused (KIP-937)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import Broker
from .helpers import unique_topic

TIMEOUT = 30


def _create(broker: Broker, config: dict[str, str]) -> str:
    name = unique_topic("ts")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the result
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(TIMEOUT)
    return name


def _produce(broker: Broker, topic: str, timestamps: list[int]) -> list[tuple[KafkaError | None, int]]:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0,
                         "enable.idempotence": False})
    reports: list[tuple[KafkaError | None, int]] = []
    for i, ts in enumerate(timestamps):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=ts,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        producer.flush(TIMEOUT)
    return reports


def test_log_append_time_topic_stamps_broker_time(broker: Broker) -> None:
    topic = _create(broker, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = _produce(broker, topic, [1_000_000, 2_000_000])
    after = int(time.time() * 1000)
    assert [(err, off) for err, off in reports] == [(None, 0), (None, 1)]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    assert [m.value() for m in got] == [b"v0", b"v1"]
    for m in got:
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000, (before, ts, after)


def test_create_time_too_far_ahead_is_refused(broker: Broker) -> None:
    topic = _create(broker, {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    reports = _produce(broker, topic, [now, now + 3_600_000, now + 1000])
    errors = [err.code() if err else None for err, _ in reports]
    assert errors == [None, KafkaError.INVALID_TIMESTAMP, None]
    assert [off for err, off in reports if err is None] == [0, 1]


@pytest.mark.parametrize("config", [{"message.timestamp.before.max.ms": "60000"}])
def test_create_time_too_old_is_refused(broker: Broker, config: dict[str, str]) -> None:
    topic = _create(broker, config)
    now = int(time.time() * 1000)
    reports = _produce(broker, topic, [now - 3_600_000, now])
    assert [err.code() if err else None for err, _ in reports] == [KafkaError.INVALID_TIMESTAMP, None]
