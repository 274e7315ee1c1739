"""Fetch long-poll: a waiting Fetch is answered as soon as data lands, not at max wait.

Done-when item: with fetch max wait 5000 ms, a record produced while the consumer's Fetch is
parked at the broker reaches the consumer in well under a second.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from .conftest import Broker
from .helpers import CLIENTS, ConfluentDriver, unique_topic, wait_until

MAX_WAIT_MS = 5000


class _Waiter(threading.Thread):
    """A consumer of partition 0 that polls in a loop and notes when the record arrives."""

    def __init__(self, client: str, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.bootstrap = bootstrap
        self.topic = topic
        self.polling = threading.Event()  # set once a few empty polls have returned
        self.stop = threading.Event()
        self.received_at: float | None = None
        self.value: bytes | None = None
        self.error: BaseException | None = None

    def _got(self, value: bytes) -> None:
        self.received_at = time.monotonic()
        self.value = value

    def _tick(self, n: int) -> None:
        if n >= 3:
            self.polling.set()

    def run(self) -> None:
        try:
            getattr(self, "_run_" + self.client.replace("-", "_"))()
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.error = e
            self.polling.set()

    def _run_kafka_python(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                          fetch_max_wait_ms=MAX_WAIT_MS, fetch_min_bytes=1, request_timeout_ms=30000)
        try:
            tp = TopicPartition(self.topic, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            n = 0
            while not self.stop.is_set() and self.received_at is None:
                for msgs in c.poll(timeout_ms=100).values():
                    for m in msgs:
                        self._got(m.value)
                n += 1
                self._tick(n)
        finally:
            c.close()

    def _run_aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                 fetch_max_wait_ms=MAX_WAIT_MS, fetch_min_bytes=1)
            await c.start()
            try:
                tp = TopicPartition(self.topic, 0)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                n = 0
                while not self.stop.is_set() and self.received_at is None:
                    for msgs in (await c.getmany(timeout_ms=100)).values():
                        for m in msgs:
                            self._got(m.value)
                    n += 1
                    self._tick(n)
            finally:
                await c.stop()

        asyncio.run(go())

    def _run_confluent(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique_topic("unused"),
                      "enable.auto.commit": False, "enable.partition.eof": False,
                      "fetch.wait.max.ms": MAX_WAIT_MS, "fetch.min.bytes": 1})
        try:
            c.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            n = 0
            while not self.stop.is_set() and self.received_at is None:
                m = c.poll(0.1)
                if m is not None:
                    assert m.error() is None, m.error()
                    self._got(m.value())
                n += 1
                self._tick(n)
        finally:
            c.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_parked_fetch_answered_when_data_lands(broker: Broker, client: str) -> None:
    """Produce to an empty partition a consumer is long-polling; receipt well under 1 s."""
    topic = unique_topic(f"longpoll-{client}")
    d = ConfluentDriver(broker.bootstrap)
    d.create_topic(topic, 2)

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    # warm the producer (connection, metadata) on the other partition, so the timed
    # produce below costs one round trip
    producer.produce(topic, value=b"warm-up", partition=1)
    assert producer.flush(30) == 0

    waiter = _Waiter(client, broker.bootstrap, topic)
    waiter.start()
    try:
        assert waiter.polling.wait(30), "consumer never started polling"
        assert waiter.error is None, repr(waiter.error)
        time.sleep(0.1)
        sent_at = time.monotonic()
        producer.produce(topic, value=b"wake-up", partition=0)
        assert producer.flush(30) == 0
        deadline = sent_at + MAX_WAIT_MS / 1000 + 5
        while waiter.received_at is None and waiter.error is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert waiter.error is None, repr(waiter.error)
        assert waiter.received_at is not None, "record never arrived"
        latency = waiter.received_at - sent_at
        print(f"{client}: produce-to-receipt {latency * 1000:.0f} ms")
        assert waiter.value == b"wake-up"
        assert latency < 1.0, f"record took {latency:.3f}s: the parked Fetch waited for its max wait"
    finally:
        waiter.stop.set()
        waiter.join(15)


# --------------------------------------------------------------------------- raw Fetch timing


@pytest.fixture
def empty_topic(broker: Broker) -> str:
    """A new one-partition topic this broker serves Fetch on: on the reference Kafka the partition
    can answer NOT_LEADER_OR_FOLLOWER for a moment after CreateTopics returns, and a Fetch parked
    then is answered at once, empty (r25: test_parked_raw_fetch_wakes_on_produce)."""
    from .raw import RoutedConn

    topic = unique_topic("longpoll-raw")
    ConfluentDriver(broker.bootstrap).create_topic(topic, 1)
    with RoutedConn(broker.bootstrap) as c:
        wait_until(lambda: c.fetch(topic, 0, 0)["error_code"] == 0, 30, 0.1, f"{topic}-0 served by its leader")
    return topic


def test_fetch_without_data_waits_max_wait(broker: Broker, empty_topic: str) -> None:
    """Nothing to return: the Fetch is answered at max_wait_ms, empty, not at once."""
    from .raw import RawConn, leader_address

    with RawConn(leader_address(broker.bootstrap, empty_topic, 0)) as c:
        t0 = time.monotonic()
        p = c.fetch(empty_topic, 0, 0, max_wait_ms=1000, min_bytes=1)
        elapsed = time.monotonic() - t0
    assert (p["error_code"], p["high_watermark"], p["records"] or b"") == (0, 0, b"")
    assert 0.9 <= elapsed < 3.0, f"answered after {elapsed:.3f}s"


def test_parked_raw_fetch_wakes_on_produce(broker: Broker, empty_topic: str) -> None:
    """A Fetch parked on one connection is answered as soon as another connection produces."""
    from .raw import FETCH_V, RawConn, fetched_values, leader_address, one_record_batch

    leader = leader_address(broker.bootstrap, empty_topic, 0)  # where a client sends both
    with RawConn(leader) as waiter, RawConn(leader) as writer:
        writer.api_versions()
        corr = waiter.send_request(1, FETCH_V, _fetch_body(empty_topic, MAX_WAIT_MS, 1))
        time.sleep(0.3)
        sent_at = time.monotonic()
        assert writer.produce(empty_topic, 0, one_record_batch(b"wake"))["error_code"] == 0
        body = waiter.recv_response(1, FETCH_V, corr, timeout=MAX_WAIT_MS / 1000 + 5)
        latency = time.monotonic() - sent_at
    [t] = body["responses"]
    [p] = t["partitions"]
    assert (p["error_code"], fetched_values(p)) == (0, [(0, b"wake")])
    assert latency < 1.0, f"answered {latency:.3f}s after the produce"


def test_parked_fetch_waits_for_min_bytes(broker: Broker, empty_topic: str) -> None:
    """Data below min_bytes does not end the wait: the answer comes at max_wait, with the data."""
    from .raw import FETCH_V, RawConn, fetched_values, leader_address, one_record_batch

    leader = leader_address(broker.bootstrap, empty_topic, 0)  # where a client sends both
    with RawConn(leader) as waiter, RawConn(leader) as writer:
        writer.api_versions()
        t0 = time.monotonic()
        corr = waiter.send_request(1, FETCH_V, _fetch_body(empty_topic, 1500, 100_000))
        time.sleep(0.2)
        assert writer.produce(empty_topic, 0, one_record_batch(b"small"))["error_code"] == 0
        body = waiter.recv_response(1, FETCH_V, corr, timeout=10)
        elapsed = time.monotonic() - t0
    [t] = body["responses"]
    [p] = t["partitions"]
    assert fetched_values(p) == [(0, b"small")]
    assert 1.35 <= elapsed < 4.0, f"answered after {elapsed:.3f}s"


def _fetch_body(topic: str, max_wait_ms: int, min_bytes: int) -> dict:
    return {
        "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }
