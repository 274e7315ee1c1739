"""SIGKILL durability with an idempotent producer.

Done-when item: a broker killed mid-run and restarted on the same port and data dir loses
no acknowledged record and, thanks to idempotence, stores none twice, in per-partition order.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from .brokers import BrokerProcess
from .helpers import ConfluentDriver, unique_topic, wait_until

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial

PARTITIONS = 4


class _Producer(threading.Thread):
    """Produces unique values continuously until told to stop, then flushes."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.produced = 0
        self.unflushed = -1
        self.error: BaseException | None = None

    def n_delivered(self) -> int:
        with self.lock:
            return len(self.delivered)

    def _report(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.failed[msg.value()] = str(err)
            else:
                self.delivered[msg.value()] = (msg.partition(), msg.offset())

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            p = Producer({
                "bootstrap.servers": self.bootstrap,
                "client.id": "compat-durability",
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 180_000,  # outlives the outage: keep retrying
                "retry.backoff.ms": 100,
                "retry.backoff.max.ms": 1000,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 1000,
            })
            i = 0
            while not self.stop_flag.is_set():
                for _ in range(20):
                    value = f"v{i:09d}".encode()
                    p.produce(self.topic, value=value, key=value, partition=i % PARTITIONS,
                              on_delivery=self._report)
                    i += 1
                p.poll(0.005)
            self.produced = i
            self.unflushed = p.flush(200)
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.error = e


def _read_all(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("unused"),
                  "enable.auto.commit": False, "enable.partition.eof": False})
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if all((out[p][-1][0] + 1 if out[p] else 0) >= ends[p] for p in range(PARTITIONS)):
                break
            for m in c.consume(num_messages=5000, timeout=0.5):
                assert m.error() is None, m.error()
                out[m.partition()].append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def test_sigkill_restart_idempotent_producer(restartable_broker: BrokerProcess) -> None:
    """Every acknowledged record survives a SIGKILL exactly once, in per-partition order."""
    b = restartable_broker
    d = ConfluentDriver(b.bootstrap)
    topic = unique_topic("durable")
    d.create_topic(topic, PARTITIONS)

    prod = _Producer(b.bootstrap, topic)
    prod.start()
    wait_until(lambda: prod.n_delivered() >= 3000 or prod.error is not None, 60, what="3000 deliveries")
    b.kill()
    killed_at = prod.n_delivered()
    time.sleep(0.5)  # the producer keeps producing into its queue and retrying
    b.restart()
    wait_until(lambda: prod.n_delivered() >= killed_at + 3000 or prod.error is not None, 180,
               what="3000 more deliveries after the restart")
    prod.stop_flag.set()
    prod.join(240)
    assert not prod.is_alive(), "producer did not finish flushing"
    assert prod.error is None, repr(prod.error)
    assert prod.unflushed == 0, f"{prod.unflushed} records never got a delivery report"
    assert not prod.failed, f"{len(prod.failed)} failed deliveries, e.g. {list(prod.failed.items())[:3]}"
    assert len(prod.delivered) == prod.produced

    ends = d.list_offsets(topic, dict.fromkeys(range(PARTITIONS), "latest"))
    got = _read_all(b.bootstrap, topic, {p: int(o or 0) for p, o in ends.items()})

    seen: dict[bytes, tuple[int, int]] = {}
    dups = []
    for p, recs in got.items():
        for off, value in recs:
            if value in seen:
                dups.append((value, seen[value], (p, off)))
            seen[value] = (p, off)
    assert not dups, f"{len(dups)} values stored twice, e.g. {dups[:5]}"
    missing = [v for v in prod.delivered if v not in seen]
    assert not missing, f"{len(missing)} acknowledged values lost, e.g. {missing[:5]}"
    wrong = [(v, at, seen[v]) for v, at in prod.delivered.items() if seen[v] != at]
    assert not wrong, f"{len(wrong)} values not where their delivery report said, e.g. {wrong[:5]}"
    for p, recs in got.items():
        assert [off for off, _ in recs] == list(range(len(recs))), f"partition {p} offsets not 0..n-1"
        values = [v for _, v in recs]
        assert values == sorted(values), f"partition {p} out of produce order"
        # the values in a partition are exactly every PARTITIONS-th produced value
        assert values == [f"v{i:09d}".encode() for i in range(p, prod.produced, PARTITIONS)]
