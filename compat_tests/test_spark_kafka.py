"""Spark's Kafka source and sink (spark-sql-kafka-0-10, kafka-clients 3.9.x) against the broker.

PySpark's `spark.read.format("kafka")` and `spark.readStream.format("kafka")` must deliver a
topic's records exactly (key, value, partition, offset, timestamp, headers), a stream started
at `earliest` with the default failOnDataLoss=true must read everything once even where
offsets have gaps, and `df.write.format("kafka")` — whose producer is idempotent by default in
kafka-clients 3.x — must land every row exactly once.  Records are produced and checked with
confluent-kafka, so Spark is compared with an independent client.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .brokers import TmqgateProcess
from .conftest import Broker
from .helpers import ConfluentDriver, expected_offsets, make_records, unique_topic, wait_until
from .proxy import RecordingProxy
from .spark_helpers import read_topic, rows_as_records, spark_session

PRODUCE, INIT_PRODUCER_ID = 0, 22


# Stopped only after the session: Spark caches its Kafka producers, which would keep
# reconnecting to a proxy that went away while the session lives.
_proxies: list[RecordingProxy] = []


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("compat-spark-kafka")
    try:
        yield session
    finally:
        session.stop()
        while _proxies:
            _proxies.pop().stop()


def _source_columns(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select("partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ts_ms"),
                     "timestampType", "headers", "topic")


def _stream_topic(spark: Any, bootstrap: str, topic: str, while_running: Callable[[], None] | None = None,
                  **options: str) -> list[Any]:
    """Read `topic` with readStream (startingOffsets=earliest, failOnDataLoss left at its default)
    into a memory sink, run `while_running` once the first micro-batch is done, then wait until
    everything available has been processed and return the rows."""
    name = "q_" + uuid.uuid4().hex[:10]
    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "true")
          .options(**options).load())
    q = (_source_columns(df).writeStream.format("memory").queryName(name)
         .trigger(processingTime="1 second").outputMode("append").start())
    try:
        def progressed() -> bool:
            assert q.exception() is None, q.exception()
            return q.lastProgress is not None

        wait_until(progressed, 90, 0.2, "a micro-batch completed")
        if while_running is not None:
            while_running()
        q.processAllAvailable()
        assert q.exception() is None, q.exception()
        return spark.sql(f"SELECT * FROM {name}").collect()
    finally:
        q.stop()


def _expected(records: list[Any], reports: list[tuple[int, int]]) -> list[tuple]:
    return sorted((p, o, r.key, r.value, r.timestamp, 0, tuple(r.headers))
                  for r, (p, o) in zip(records, reports, strict=True))


# --------------------------------------------------------------------------- batch read


def test_batch_read_returns_exact_records(broker: Broker, spark: Any) -> None:
    """spark.read.format("kafka") with includeHeaders=true: every record once, with its partition,
    offset, key (null and empty kept apart), value, CreateTime timestamp and headers (order,
    repeated names and null values kept)."""
    d = ConfluentDriver(broker.bootstrap)
    topic = unique_topic("spark-batch")
    d.create_topic(topic, 3)
    records = make_records(240, 3, value_size=40)
    reports = d.produce(topic, records)
    assert [o for _, o in reports] == expected_offsets(records)

    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .option("includeHeaders", "true").load())
    rows = _source_columns(df).collect()
    assert {r["topic"] for r in rows} == {topic}
    assert sorted(rows_as_records(rows)) == _expected(records, reports)


def test_batch_read_offset_range(broker: Broker, spark: Any) -> None:
    """Explicit JSON starting/ending offsets (inclusive start, exclusive end) per partition."""
    d = ConfluentDriver(broker.bootstrap)
    topic = unique_topic("spark-range")
    d.create_topic(topic, 2)
    records = make_records(60, 2, value_size=20)
    reports = d.produce(topic, records)
    start = {topic: {"0": 5, "1": 0}}
    end = {topic: {"0": 20, "1": -1}}  # -1 = latest
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic).option("startingOffsets", json.dumps(start))
          .option("endingOffsets", json.dumps(end)).option("includeHeaders", "true").load())
    got = sorted(rows_as_records(_source_columns(df).collect()))
    want = [e for e in _expected(records, reports) if (e[0] == 0 and 5 <= e[1] < 20) or e[0] == 1]
    assert got == want


# --------------------------------------------------------------------------- sink


def test_idempotent_sink_writes_exactly_once(broker: Broker, spark: Any) -> None:
    """df.write.format("kafka"): kafka-clients 3.x producers are idempotent by default
    (enable.idempotence=true, acks=all), so Spark's sink gets a producer id and sends sequenced
    batches; every row lands exactly once, at offsets 0..n-1 of its partition."""
    from tmqgate.protocol.messages import decode_request, decode_response
    from tmqgate.protocol.records import iter_batches

    topic = unique_topic("spark-sink")
    ConfluentDriver(broker.bootstrap).create_topic(topic, 2)
    n = 400
    rows = [(f"k{i:04d}", f"value-{i:04d}", i % 2) for i in range(n)]
    df = spark.createDataFrame(rows, "key string, value string, partition int").repartition(4)
    proxy = RecordingProxy(broker.bootstrap, nodes=broker.nodes).start()
    _proxies.append(proxy)
    (df.write.format("kafka").option("kafka.bootstrap.servers", proxy.bootstrap)
     .option("kafka.client.id", "spark-sink-" + uuid.uuid4().hex[:6])
     .option("topic", topic).save())
    cap = proxy.capture
    assert not cap.errors, cap.errors

    got = read_topic(broker.bootstrap, topic, 2)
    values = Counter(r.value for r in got)
    assert values == Counter(f"value-{i:04d}".encode() for i in range(n)), "rows lost or duplicated"
    for r in got:
        i = int(r.key[1:]) if r.key else -1
        assert r.partition == i % 2 and r.value == f"value-{i:04d}".encode()
    for p in (0, 1):
        assert sorted(r.offset for r in got if r.partition == p) == list(range(n // 2))

    requests = [decode_request(f) for f in cap.requests]
    init = [r for r in requests if r.api_key == INIT_PRODUCER_ID]
    assert init, "Spark's producer never asked for a producer id: not idempotent"
    assert all(r.body.get("transactional_id") is None for r in init)
    pids = {decode_response(k, v, f)[1].get("producer_id") for k, v, f in cap.responses if k == INIT_PRODUCER_ID}
    assert pids and all(pid is not None and pid >= 0 for pid in pids), pids
    produces = [r for r in requests if r.api_key == PRODUCE]
    assert produces
    batches = 0
    for r in produces:
        assert r.body["acks"] == -1
        for td in r.body["topic_data"]:
            for pd in td["partition_data"]:
                for h in iter_batches(pd["records"]):
                    batches += 1
                    assert h.producer_id in pids and h.base_sequence >= 0 and h.producer_epoch >= 0, h
    assert batches > 0


# --------------------------------------------------------------------------- streaming read


def test_stream_reads_topic_exactly(broker: Broker, spark: Any) -> None:
    """readStream from earliest (failOnDataLoss=true): records already there and records produced
    while the query runs are each read exactly once, with their offsets, timestamps and headers."""
    d = ConfluentDriver(broker.bootstrap)
    topic = unique_topic("spark-stream")
    d.create_topic(topic, 2)
    records = make_records(300, 2, value_size=30, seed=3)
    first, second = records[:150], records[150:]
    reports = d.produce(topic, first)

    def more() -> None:
        reports.extend(d.produce(topic, second))

    rows = _stream_topic(spark, broker.bootstrap, topic, more)
    got = sorted(rows_as_records(rows))
    assert len(got) == len(set(got)), "a record was delivered twice"
    assert got == _expected(records, reports)


def _assert_stream_reads(spark: Any, bootstrap: str, topic: str, partitions: int,
                         truth: list[tuple[int, int, bytes | None, bytes | None]]) -> None:
    offsets_by_partition: dict[int, list[int]] = {}
    for p, o, _, _ in truth:
        offsets_by_partition.setdefault(p, []).append(o)
    gaps = sum(max(os_) + 1 - len(os_) for os_ in offsets_by_partition.values())
    assert gaps > 0, f"the topic has no offset gaps to test: {offsets_by_partition}"
    rows = _stream_topic(spark, bootstrap, topic)
    got = sorted((p, o, k, v) for p, o, k, v, *_ in rows_as_records(rows))
    assert len(got) == len(set(got)), "a record was delivered twice"
    assert got == sorted(truth)


def test_stream_reads_offsets_with_transaction_marker_gaps(broker: Broker, spark: Any) -> None:
    """Offsets with gaps (each transaction's commit marker takes an offset, the last one at the
    end of the log): a stream from earliest with failOnDataLoss=true reads every record once and
    does not take the gaps for data loss.  Transactions are how Kafka makes such gaps (tmqgate's
    query topics make others, see the next test)."""
    from confluent_kafka import Producer

    topic = unique_topic("spark-gaps-tx")
    ConfluentDriver(broker.bootstrap).create_topic(topic, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-gaps-" + uuid.uuid4().hex[:8],
                  "acks": "all", "linger.ms": 5})
    truth: list[tuple[int, int, bytes | None, bytes | None]] = []

    def cb(err: Any, msg: Any) -> None:
        assert err is None, err
        truth.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    p.init_transactions(30)
    i = 0
    for txn in range(8):
        p.begin_transaction()
        for _ in range(3 + txn % 4):
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2, on_delivery=cb)
            i += 1
        p.commit_transaction(30)
    assert p.flush(30) == 0
    _assert_stream_reads(spark, broker.bootstrap, topic, 2, truth)


@pytest.mark.tmqgate_only
def test_stream_reads_query_topic_with_offset_gaps(broker: Broker, spark: Any, tmp_path: Any) -> None:
    """A supertable topic: each CREATE TABLE is a WAL meta entry that takes a version (offset)
    but is not delivered without WITH META, so the topic's offsets have gaps.  A stream from
    earliest with failOnDataLoss=true must read exactly what a plain consumer reads."""
    if broker.external:
        pytest.skip("needs tmqgate's HTTP SQL front, which --bootstrap does not tell")
    import urllib.error
    import urllib.request

    proc = TmqgateProcess(tmp_path / "sqlgate")
    proc.start()
    try:
        def sql(stmt: str) -> dict[str, Any]:
            req = urllib.request.Request(f"http://127.0.0.1:{proc.http_port}/rest/sql", data=stmt.encode(),
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    out = json.loads(resp.read())
            except urllib.error.HTTPError as e:
                raise AssertionError(f"{stmt}: HTTP {e.code} {e.read()[:300]!r}") from e
            assert out.get("code") == 0, (stmt, out)
            return out

        db = "sparkgap" + uuid.uuid4().hex[:6]
        sql(f"CREATE DATABASE {db} VGROUPS 2")
        sql(f"CREATE STABLE {db}.meters (ts TIMESTAMP, v DOUBLE) TAGS (loc NCHAR(16))")
        inserted: Counter[tuple[bytes, float]] = Counter()
        base = int(time.time() * 1000) - 60_000
        for t in range(6):
            sql(f"CREATE TABLE {db}.d{t} USING {db}.meters TAGS ('loc{t}')")
            values = " ".join(f"({base + t * 100 + j}, {t * 10 + j * 0.5})" for j in range(5))
            sql(f"INSERT INTO {db}.d{t} VALUES {values}")
            for j in range(5):
                inserted[(f"d{t}".encode(), t * 10 + j * 0.5)] += 1
        topic = f"{db}_meters"
        sql(f"CREATE TOPIC {topic} AS STABLE {db}.meters")
        plain = read_topic(proc.bootstrap, topic, 2)
        delivered = Counter((r.key or b"", float(json.loads(r.value or b"{}")["v"])) for r in plain)
        assert delivered == inserted, "a plain consumer does not read the inserted rows"
        truth = [(r.partition, r.offset, r.key, r.value) for r in plain]
        _assert_stream_reads(spark, proc.bootstrap, topic, 2, truth)
    finally:
        proc.stop()
