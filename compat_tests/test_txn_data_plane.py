"""The transactional data plane over TCP (issue 14, points 2, 3): a transaction's batches hold
the last stable offset at their first offset; read_committed Fetch and ListOffsets stop there
while read_uncommitted sees everything; WriteTxnMarkers (what `kafka-transactions abort`
sends) writes the commit or abort marker as a control batch that takes an offset and moves the
LSO; an abort is listed in the Fetch response's aborted transactions; DescribeProducers shows
the open transaction; a confluent-kafka read_committed consumer reads exactly the committed
records.

On both brokers the transaction is opened by a real transactional producer (confluent-kafka:
InitProducerId, AddPartitionsToTxn, Produce) and left open; DescribeProducers gives its id and
epoch. The markers are written with WriteTxnMarkers (no authorizer: CLUSTER_ACTION is not
checked).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from .conftest import Broker
from .helpers import ConfluentDriver, unique_topic
from .raw import RawConn, fetched_values, leader_address, serving_leader

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
WRITE_TXN_MARKERS_V = 1


def _fetch(c: RawConn, topic: str, offset: int, isolation: int, max_wait_ms: int = 0,
           timeout: float | None = None) -> dict[str, Any]:
    p = c.fetch(topic, 0, offset, max_wait_ms=max_wait_ms, timeout=timeout, isolation_level=isolation)
    assert p["error_code"] == 0, p
    return p


def _latest(c: RawConn, topic: str, isolation: int) -> int:
    p = c.list_offsets(topic, 0, -1, isolation_level=isolation)
    assert p["error_code"] == 0, p
    return int(p["offset"])


def _describe_producers(c: RawConn, topic: str, partition: int = 0) -> dict[str, Any]:
    body = c.request(61, 0, {"topics": [{"name": topic, "partition_indexes": [partition]}]})
    [t] = body["topics"]
    [p] = t["partitions"]
    return p


def _write_marker(c: RawConn, topic: str, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
    body = c.request(27, WRITE_TXN_MARKERS_V, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": coordinator_epoch}]})
    [m] = body["markers"]
    assert m["producer_id"] == pid
    [t] = m["topics"]
    [p] = t["partitions"]
    return int(p["error_code"])


def _plain(c: RawConn, topic: str, values: list[bytes]) -> None:
    from tmqgate.protocol.records import build_batch

    now = int(time.time() * 1000)
    p = c.produce(topic, 0, build_batch([(None, v, [], now) for v in values]))
    assert p["error_code"] == 0, p


class _Txn:
    """An open transaction on partition 0 of a topic: its producer id and epoch; `producer` is
    the confluent-kafka producer holding it open (None when produced raw)."""

    def __init__(self, pid: int, epoch: int, producer: Any = None) -> None:
        self.pid, self.epoch, self.producer = pid, epoch, producer


def _open_txn(broker: Broker, c: RawConn, topic: str, values: list[bytes]) -> _Txn:
    """Produce `values` to partition 0 in a transaction left open, by a confluent-kafka
    transactional producer (see the module docstring)."""
    from confluent_kafka import Producer

    known = {p["producer_id"] for p in _describe_producers(c, topic)["active_producers"]}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("txn"),
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(30) == 0
    [state] = [p for p in _describe_producers(c, topic)["active_producers"] if p["producer_id"] not in known]
    return _Txn(state["producer_id"], state["producer_epoch"], producer)


def _produce(c: RawConn, topic: str, batch: bytes, transactional_id: str | None) -> dict[str, Any]:
    """Produce one batch to partition 0 with the request's transactional id; the whole answer's
    error (the topic-level answer Kafka gives to a refused request) or the partition's."""
    body = c.request(0, 9, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    })
    [t] = body["responses"]
    [p] = t["partition_responses"]
    return p


def _control_offsets(p: dict[str, Any]) -> list[int]:
    from tmqgate.protocol.records import iter_batches

    data = p.get("records") or b""
    return [h.base_offset for h in iter_batches(data) if h.is_control]


def _data_values(p: dict[str, Any]) -> list[tuple[int, bytes | None]]:
    """(offset, value) of the records of data batches (control batches left out)."""
    from tmqgate.protocol.records import decode_records, iter_batches

    data = p.get("records") or b""
    return [(r.offset, r.value) for h in iter_batches(data) if not h.is_control
            for r in decode_records(data[h.offset:h.offset + h.size])]


def _leader_conn(broker: Broker, topic: str) -> RawConn:
    """A connection to the leader of the topic's partition 0 — where a client sends Produce,
    Fetch, ListOffsets, DescribeProducers and a coordinator WriteTxnMarkers."""
    return RawConn(leader_address(broker.bootstrap, topic, 0))


@pytest.fixture
def topic(broker: Broker) -> str:
    name = unique_topic("txn-data")
    ConfluentDriver(broker.bootstrap).create_topic(name, 1)
    serving_leader(broker.bootstrap, name)
    return name


def test_open_transaction_holds_the_last_stable_offset(broker: Broker, topic: str) -> None:
    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"p0", b"p1"])
        txn = _open_txn(broker, c, topic, [b"t2", b"t3", b"t4"])
        uncommitted = _fetch(c, topic, 0, READ_UNCOMMITTED)
        assert (uncommitted["high_watermark"], uncommitted["last_stable_offset"]) == (5, 2)
        assert uncommitted["aborted_transactions"] is None
        assert fetched_values(uncommitted) == [(0, b"p0"), (1, b"p1"), (2, b"t2"), (3, b"t3"), (4, b"t4")]
        committed = _fetch(c, topic, 0, READ_COMMITTED)
        assert (committed["high_watermark"], committed["last_stable_offset"]) == (5, 2)
        assert fetched_values(committed) == [(0, b"p0"), (1, b"p1")]
        assert not committed["aborted_transactions"]
        assert fetched_values(_fetch(c, topic, 2, READ_COMMITTED)) == []
        assert _latest(c, topic, READ_COMMITTED) == 2
        assert _latest(c, topic, READ_UNCOMMITTED) == 5
        described = _describe_producers(c, topic)
        assert described["error_code"] == 0
        [state] = [p for p in described["active_producers"] if p["producer_id"] == txn.pid]
        assert (state["producer_epoch"], state["current_txn_start_offset"]) == (txn.epoch, 2)
        assert state["coordinator_epoch"] == -1  # no marker of this producer here yet


def test_commit_marker_moves_the_lso_past_it(broker: Broker, topic: str) -> None:
    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"p0"])
        txn = _open_txn(broker, c, topic, [b"t1", b"t2"])
        assert _write_marker(c, topic, txn.pid, txn.epoch, True, coordinator_epoch=7) == 0
        p = _fetch(c, topic, 0, READ_COMMITTED)
        assert (p["high_watermark"], p["last_stable_offset"]) == (4, 4)  # the marker took offset 3
        assert _data_values(p) == [(0, b"p0"), (1, b"t1"), (2, b"t2")]
        assert _control_offsets(p) == [3]
        assert p["aborted_transactions"] == []
        assert _latest(c, topic, READ_COMMITTED) == 4
        [state] = [s for s in _describe_producers(c, topic)["active_producers"] if s["producer_id"] == txn.pid]
        # the marker's coordinator epoch is the producer's latest (Kafka's ProducerStateEntry)
        assert (state["current_txn_start_offset"], state["coordinator_epoch"]) == (-1, 7)


def test_abort_marker_is_listed_in_aborted_transactions(broker: Broker, topic: str) -> None:
    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"p0"])
        txn = _open_txn(broker, c, topic, [b"t1", b"t2"])
        assert _write_marker(c, topic, txn.pid, txn.epoch, False) == 0
        _plain(c, topic, [b"p4"])
        p = _fetch(c, topic, 0, READ_COMMITTED)
        assert (p["high_watermark"], p["last_stable_offset"]) == (5, 5)
        assert p["aborted_transactions"] == [{"producer_id": txn.pid, "first_offset": 1}]
        assert _control_offsets(p) == [3]
        # the records are returned; the client drops them by the aborted list
        assert _data_values(p) == [(0, b"p0"), (1, b"t1"), (2, b"t2"), (4, b"p4")]
        assert _fetch(c, topic, 4, READ_COMMITTED)["aborted_transactions"] == []
        assert _fetch(c, topic, 0, READ_UNCOMMITTED)["aborted_transactions"] is None


def test_read_committed_fetch_waiting_at_the_lso_wakes_on_the_marker(broker: Broker, topic: str) -> None:
    with _leader_conn(broker, topic) as c, _leader_conn(broker, topic) as waiter:
        txn = _open_txn(broker, c, topic, [b"t0", b"t1"])
        got: dict[str, Any] = {}
        # waits up to 60 s server-side; the connection's own timeout (15 s) fails the test
        # unless the marker wakes it
        thread = threading.Thread(target=lambda: got.update(
            p=_fetch(waiter, topic, 0, READ_COMMITTED, max_wait_ms=60_000, timeout=15)))
        thread.start()
        time.sleep(0.5)  # let the Fetch park (not an assertion: a Fetch not yet parked sees the commit)
        assert _write_marker(c, topic, txn.pid, txn.epoch, True) == 0
        thread.join()
        assert _data_values(got["p"]) == [(0, b"t0"), (1, b"t1")]


def test_read_committed_consumer_reads_exactly_the_committed_records(broker: Broker, topic: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"plain-0"])
        kept = _open_txn(broker, c, topic, [b"committed-1", b"committed-2"])
        assert _write_marker(c, topic, kept.pid, kept.epoch, True) == 0
        dropped = _open_txn(broker, c, topic, [b"aborted-4", b"aborted-5"])
        assert _write_marker(c, topic, dropped.pid, dropped.epoch, False) == 0
        _plain(c, topic, [b"plain-7"])
        end = _latest(c, topic, READ_COMMITTED)
    assert end == 8
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.offset(), msg.value()))
            if consumer.position([TopicPartition(topic, 0)])[0].offset >= end:
                break
    finally:
        consumer.close()
    assert seen == [(0, b"plain-0"), (1, b"committed-1"), (2, b"committed-2"), (7, b"plain-7")]


def test_describe_producers_unknown_partition(broker: Broker, topic: str) -> None:
    with _leader_conn(broker, topic) as c:
        assert _describe_producers(c, topic, 5)["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert _describe_producers(c, unique_topic("missing"))["error_code"] == 3


def test_transactional_records_need_a_transactional_id(broker: Broker, topic: str) -> None:
    """Kafka's handleProduceRequest: transactional records in a request without a transactional
    id are refused whole, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, with or without an authorizer."""
    from tmqgate.protocol.records import build_batch

    batch = build_batch([(None, b"v", [], int(time.time() * 1000))], producer_id=1, producer_epoch=0,
                        base_sequence=0, is_transactional=True)
    with _leader_conn(broker, topic) as c:
        assert _produce(c, topic, batch, None)["error_code"] == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _latest(c, topic, READ_UNCOMMITTED) == 0



def test_kafka_transactions_describe_producers_and_abort(broker: Broker, topic: str) -> None:
    """`kafka-transactions describe-producers` shows the open transaction's start offset and
    `abort --start-offset` (DescribeProducers, then WriteTxnMarkers) ends it as aborted."""
    from .cli_helpers import require_tools, run

    require_tools()
    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"p0"])
        txn = _open_txn(broker, c, topic, [b"t1", b"t2"])
        out = run("kafka-transactions", "--bootstrap-server", broker.bootstrap, "describe-producers",
                  "--topic", topic, "--partition", "0")
        header, *rows = [ln.split() for ln in out.lines]
        assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                          "LastTimestamp", "CurrentTransactionStartOffset"], out.describe()
        [row] = [dict(zip(header, r, strict=True)) for r in rows if r[0] == str(txn.pid)]
        assert (row["ProducerEpoch"], row["LastSequence"], row["CurrentTransactionStartOffset"]) == (
            str(txn.epoch), "1", "1"), out.describe()
        run("kafka-transactions", "--bootstrap-server", broker.bootstrap, "abort",
            "--topic", topic, "--partition", "0", "--start-offset", "1")
        p = _fetch(c, topic, 0, READ_COMMITTED)
        assert (p["high_watermark"], p["last_stable_offset"]) == (4, 4)
        assert p["aborted_transactions"] == [{"producer_id": txn.pid, "first_offset": 1}]
        assert _control_offsets(p) == [3]


def test_delete_records_past_an_open_transaction(broker: Broker, topic: str) -> None:
    """DeleteRecords up to the high watermark is accepted while a transaction is open (Kafka's
    maybeIncrementLogStartOffset checks the high watermark only); the LSO is then the new log
    start (Kafka's first unstable offset is never below it) and records produced after it stay
    hidden from read_committed until the transaction ends."""
    with _leader_conn(broker, topic) as c:
        _plain(c, topic, [b"p0"])
        txn = _open_txn(broker, c, topic, [b"t1", b"t2"])
        _plain(c, topic, [b"p3"])
        body = c.request(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 4}]}],
                                 "timeout_ms": 10000})
        [part] = body["topics"][0]["partitions"]
        assert (part["error_code"], part["low_watermark"]) == (0, 4)
        _plain(c, topic, [b"p4"])
        p = _fetch(c, topic, 4, READ_COMMITTED)
        assert (p["log_start_offset"], p["last_stable_offset"], p["high_watermark"]) == (4, 4, 5)
        assert fetched_values(p) == []
        assert _latest(c, topic, READ_COMMITTED) == 4
        assert _write_marker(c, topic, txn.pid, txn.epoch, True) == 0
        p = _fetch(c, topic, 4, READ_COMMITTED)
        assert (p["last_stable_offset"], p["high_watermark"]) == (6, 6)
        assert _data_values(p) == [(4, b"p4")]


def test_marker_with_an_older_epoch_is_refused(broker: Broker, topic: str) -> None:
    """A marker carries the producer's epoch and the partition takes it (a fencing abort bumps
    it); a later marker of an older epoch is INVALID_PRODUCER_EPOCH and writes nothing."""
    with _leader_conn(broker, topic) as c:
        txn = _open_txn(broker, c, topic, [b"t0"])
        assert _write_marker(c, topic, txn.pid, txn.epoch + 1, False) == 0
        assert _write_marker(c, topic, txn.pid, txn.epoch, True) == 47  # INVALID_PRODUCER_EPOCH
        p = _fetch(c, topic, 0, READ_COMMITTED)
        assert (p["high_watermark"], p["last_stable_offset"]) == (2, 2)
        assert p["aborted_transactions"] == [{"producer_id": txn.pid, "first_offset": 0}]
        [state] = [s for s in _describe_producers(c, topic)["active_producers"] if s["producer_id"] == txn.pid]
        assert state["producer_epoch"] == txn.epoch + 1
