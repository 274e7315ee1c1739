"""Spark's Kafka source with `kafka.isolation.level=read_committed` (one batch query).

A transactional producer (confluent-kafka) commits a0 a1 a2, aborts b0 b1, commits c0 c1 (at
offsets 0-2, 4-5 and 7-8; markers at 3, 6 and 9) and then leaves a transaction open with o0 at
10.  spark.read from earliest to latest with read_committed must return exactly the committed
records with their offsets — not the aborted ones, and not the open transaction's record,
since `latest` is the last stable offset (10) for a read_committed consumer — while the same
query at read_uncommitted also returns b0 b1 and o0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Broker
from .helpers import unique_topic
from .spark_helpers import spark_session
from .txn_helpers import create_topic, stable_end_offset, txn_id


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("compat-txn-spark")
    try:
        yield session
    finally:
        session.stop()


def _read(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes, bytes]]:
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("kafka.isolation.level", isolation).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    return sorted((r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in df.select("offset", "key", "value").collect())


def test_spark_batch_read_committed_sees_only_committed_records(txn_broker: Broker, spark: Any) -> None:
    from confluent_kafka import Producer

    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-spark")
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id("spark"), "linger.ms": 5})
    p.init_transactions(60)
    for keys, commit in ((["a0", "a1", "a2"], True), (["b0", "b1"], False), (["c0", "c1"], True), (["o0"], None)):
        p.begin_transaction()
        for k in keys:
            p.produce(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0)
        assert p.flush(30) == 0
        if commit is True:
            p.commit_transaction(30)
        elif commit is False:
            p.abort_transaction(30)
    try:
        assert stable_end_offset(bootstrap, topic) == 10  # o0's open transaction starts at 10
        committed = [(o, k.encode(), f"value-{k}".encode())
                     for o, k in ((0, "a0"), (1, "a1"), (2, "a2"), (7, "c0"), (8, "c1"))]
        assert _read(spark, bootstrap, topic, "read_committed") == committed
        everything = sorted(committed + [(4, b"b0", b"value-b0"), (5, b"b1", b"value-b1"),
                                         (10, b"o0", b"value-o0")])
        assert _read(spark, bootstrap, topic, "read_uncommitted") == everything
    finally:
        p.abort_transaction(30)
