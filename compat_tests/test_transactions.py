"""Transactions with every client that has them: commits and aborts, fencing, timeouts.

Each client's transactional producer writes three transactions to one partition — committed
a0 a1 a2, aborted b0 b1, committed c0 c1 — and flushes each before ending it, so the aborted
records are in the log.  As in Apache Kafka, every commit or abort marker takes an offset: the
records land at 0-2, 4-5 and 7-8 (markers at 3, 6 and 9).  A read_committed consumer must get
exactly a0 a1 a2 c0 c1 at offsets 0 1 2 7 8, a read_uncommitted one also b0 b1 at 4 5; each
client's own read_committed consumer is checked too (confluent-kafka, kafka-python 3.x,
aiokafka and the Java client 4.x all implement transactions).

Fencing: a second producer with the same transactional.id fences the first, whose next send or
commit fails with the error the client shows for it, and whose open transaction is aborted.
Timeout: a transaction left open past its transaction.timeout.ms is aborted by the coordinator;
the producer's commit then fails and read_committed never shows its records.

All transaction tests share one broker of their own (the `txn_broker` fixture of conftest.py,
see `txn_helpers.py`: the coordinator checks for timed-out transactions every 500 ms; both
brokers run transaction version 1). The Java client's tests run again on `txn_broker_tv2`, both
brokers at transaction version 2 (KIP-890 part 2), which the Java client 4.x negotiates: the
records and the errors are the same, the producer epoch is bumped by every EndTxn.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from .conftest import Broker
from .helpers import require, unique_topic, wait_until
from .java_client import SPARK_CLIENTS_JAR, java_txn
from .kafka_ref import require_jars
from .raw import RawConn, RoutedConn
from .txn_helpers import (
    Rec,
    create_topic,
    high_watermark,
    read_partition,
    stable_end_offset,
    txn_id,
)

# (transaction's keys, commit?)
SCENARIO: list[tuple[list[str], bool]] = [(["a0", "a1", "a2"], True), (["b0", "b1"], False), (["c0", "c1"], True)]
COMMITTED: list[Rec] = [(0, b"a0", b"value-a0"), (1, b"a1", b"value-a1"), (2, b"a2", b"value-a2"),
                        (7, b"c0", b"value-c0"), (8, b"c1", b"value-c1")]
ALL: list[Rec] = sorted(COMMITTED + [(4, b"b0", b"value-b0"), (5, b"b1", b"value-b1")])
END = 10  # the last marker is at 9
SENT = [("a0", 0), ("a1", 1), ("a2", 2), ("b0", 4), ("b1", 5), ("c0", 7), ("c1", 8)]


def _check_log(bootstrap: str, topic: str) -> None:
    """What confluent-kafka consumers at both isolation levels read back, and the end offsets."""
    assert high_watermark(bootstrap, topic) == END
    assert stable_end_offset(bootstrap, topic) == END  # no transaction left open
    assert read_partition(bootstrap, topic, "read_committed", END) == COMMITTED
    assert read_partition(bootstrap, topic, "read_uncommitted", END) == ALL


# --------------------------------------------------------------------------- commit and abort, per client


def test_confluent_commit_and_abort(txn_broker: Broker) -> None:
    from confluent_kafka import Producer

    topic = unique_topic("txn-ck")
    create_topic(txn_broker.bootstrap, topic)
    sent: list[tuple[str, int]] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        sent.append((msg.key().decode(), msg.offset()))

    p = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": txn_id("ck"), "linger.ms": 5})
    p.init_transactions(60)
    for keys, commit in SCENARIO:
        p.begin_transaction()
        for k in keys:
            p.produce(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0, on_delivery=report)
        assert p.flush(30) == 0
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    assert sent == SENT
    _check_log(txn_broker.bootstrap, topic)


def test_kafka_python_commit_and_abort(txn_broker: Broker) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique_topic("txn-kp")
    create_topic(txn_broker.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=txn_id("kp"))
    sent: list[tuple[str, int]] = []
    try:
        p.init_transactions()
        for keys, commit in SCENARIO:
            p.begin_transaction()
            futures = [(k, p.send(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0)) for k in keys]
            p.flush()
            sent += [(k, f.get(30).offset) for k, f in futures]
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()
    assert sent == SENT
    _check_log(txn_broker.bootstrap, topic)

    c = KafkaConsumer(bootstrap_servers=txn_broker.bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    got: list[Rec] = []
    try:
        c.assign([tp])
        c.seek_to_beginning(tp)
        assert c.end_offsets([tp])[tp] == END
        deadline = time.monotonic() + 60
        while c.position(tp) < END and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got += [(r.offset, r.key, r.value) for r in recs]
    finally:
        c.close()
    assert got == COMMITTED


def test_aiokafka_commit_and_abort(txn_broker: Broker) -> None:
    topic = unique_topic("txn-aio")
    create_topic(txn_broker.bootstrap, topic)

    async def run() -> tuple[list[tuple[str, int]], list[Rec]]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=txn_id("aio"))
        await p.start()
        sent: list[tuple[str, int]] = []
        try:
            for keys, commit in SCENARIO:
                await p.begin_transaction()
                for k in keys:
                    md = await p.send_and_wait(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0)
                    sent.append((k, md.offset))
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=txn_broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        got: list[Rec] = []
        try:
            c.assign([tp])
            await c.seek_to_beginning(tp)
            assert (await c.end_offsets([tp]))[tp] == END
            deadline = time.monotonic() + 60
            while await c.position(tp) < END and time.monotonic() < deadline:
                for recs in (await c.getmany(tp, timeout_ms=200)).values():
                    got += [(r.offset, r.key, r.value) for r in recs]
        finally:
            await c.stop()
        return sent, got

    sent, got = asyncio.run(run())
    assert sent == SENT
    assert got == COMMITTED
    _check_log(txn_broker.bootstrap, topic)


def _java_lines(out: str, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in out.splitlines() if line.startswith(kind + " ")]


def _finalized_transaction_version(bootstrap: str) -> int | None:
    """The `transaction.version` level ApiVersions v4 gives as finalized (None: not listed)."""
    with RawConn(bootstrap) as c:
        body = c.request(18, 4, {"client_software_name": "compat-raw", "client_software_version": "1"})
    levels = {f["name"]: f["max_version_level"] for f in body.get("finalized_features") or []}
    return levels.get("transaction.version")


def _describe_transaction(bootstrap: str, tid: str) -> tuple[str, int]:
    """DescribeTransactions v0 to the id's coordinator: its (state, producer epoch)."""
    with RoutedConn(bootstrap) as c:
        body = c.request(65, 0, {"transactional_ids": [tid]})
    [state] = body["transaction_states"]
    assert state["error_code"] == 0, state
    return state["transaction_state"], state["producer_epoch"]


@pytest.mark.parametrize(("fixture", "version", "client"), [("txn_broker", 1, "4.3.1"),
                                                       ("txn_broker_tv2", 2, "4.3.1"),
                                                       ("txn_broker", 1, "3.9.2-spark")])
def test_java_client_commit_and_abort(request: pytest.FixtureRequest, fixture: str, version: int,
                                      client: str) -> None:
    """The Java client 4.3.1 and the kafka-clients 3.9.2 Spark ships (spark-lib), each with its
    own transactional producer and read_committed / read_uncommitted consumers. At transaction
    version 1 the producer keeps epoch 0 through its three transactions; at 2 (the Java client
    adds partitions by Produce v12 and ends with EndTxn v5) every commit and abort bumps it:
    epoch 3 after them. The records are the same."""
    require_jars()
    clients_jar = SPARK_CLIENTS_JAR if client.endswith("-spark") else None
    if clients_jar is not None:
        require(clients_jar.exists(), f"{clients_jar} not installed", "scripts/install_java.sh")
    txn_broker: Broker = request.getfixturevalue(fixture)
    if not txn_broker.external:
        assert _finalized_transaction_version(txn_broker.bootstrap) == version
    topic = unique_topic("txn-java")
    create_topic(txn_broker.bootstrap, topic)
    tid = txn_id("java")
    proc = java_txn(txn_broker.bootstrap, "interleaved", topic, tid, clients_jar=clients_jar)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _java_lines(proc.stdout, "client") == [[client.removesuffix("-spark")]]
    assert _describe_transaction(txn_broker.bootstrap, tid) == ("CompleteCommit", 0 if version == 1 else 3)
    assert [(k, int(o)) for k, o in _java_lines(proc.stdout, "sent")] == SENT
    as_recs = [(int(o), k.encode(), v.encode()) for o, k, v in _java_lines(proc.stdout, "read_committed")]
    assert as_recs == COMMITTED
    as_recs = [(int(o), k.encode(), v.encode()) for o, k, v in _java_lines(proc.stdout, "read_uncommitted")]
    assert as_recs == ALL
    _check_log(txn_broker.bootstrap, topic)


# --------------------------------------------------------------------------- zombie fencing


def test_confluent_zombie_fenced(txn_broker: Broker) -> None:
    """A second producer with the same transactional.id: the first one's commit fails with
    librdkafka's fatal _FENCED error, its open transaction (x1 at offset 0) is aborted (marker
    at 1), and the new producer's committed record y lands at 2."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = unique_topic("txn-fence")
    create_topic(txn_broker.bootstrap, topic)
    tid = txn_id("fence")
    conf = {"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid, "linger.ms": 5}
    first = Producer(conf)
    first.init_transactions(60)
    first.begin_transaction()
    first.produce(topic, key=b"x1", value=b"value-x1", partition=0)
    assert first.flush(30) == 0

    second = Producer(conf)
    second.init_transactions(60)

    first.produce(topic, key=b"x2", value=b"value-x2", partition=0)
    with pytest.raises(KafkaException) as exc:
        first.commit_transaction(30)
    err = exc.value.args[0]
    assert err.code() == KafkaError._FENCED, err
    assert err.fatal(), err

    second.begin_transaction()
    second.produce(topic, key=b"y", value=b"value-y", partition=0)
    second.commit_transaction(30)
    assert second.flush(30) == 0

    assert high_watermark(txn_broker.bootstrap, topic) == 4
    assert read_partition(txn_broker.bootstrap, topic, "read_committed", 4) == [(2, b"y", b"value-y")]
    assert read_partition(txn_broker.bootstrap, topic, "read_uncommitted", 4) == [
        (0, b"x1", b"value-x1"), (2, b"y", b"value-y")]


@pytest.mark.parametrize(("fixture", "version"), [("txn_broker", 1), ("txn_broker_tv2", 2)])
@pytest.mark.parametrize("mode", ["fenced", "fenced_commit"])
def test_java_client_zombie_fenced(request: pytest.FixtureRequest, fixture: str, version: int, mode: str) -> None:
    """The same with the Java client.  A zombie that commits straight away gets
    ProducerFencedException (EndTxn answered PRODUCER_FENCED by the coordinator); one that first
    sends again to its partition gets InvalidProducerEpochException for the send (Produce answered
    INVALID_PRODUCER_EPOCH: the abort marker raised the partition's epoch) and for the commit —
    what Apache Kafka 4.3 answers, at transaction version 1 and 2 alike."""
    require_jars()
    txn_broker: Broker = request.getfixturevalue(fixture)
    topic = unique_topic("txn-jfence")
    create_topic(txn_broker.bootstrap, topic)
    tid = txn_id("jfence")
    proc = java_txn(txn_broker.bootstrap, mode, topic, tid)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    errors = "org.apache.kafka.common.errors."
    if mode == "fenced":
        assert _java_lines(proc.stdout, "send") == [[errors + "InvalidProducerEpochException"]], proc.stdout
        assert _java_lines(proc.stdout, "commit") == [[errors + "InvalidProducerEpochException"]], proc.stdout
    else:
        assert _java_lines(proc.stdout, "send") == []
        assert _java_lines(proc.stdout, "commit") == [[errors + "ProducerFencedException"]], proc.stdout
    assert _java_lines(proc.stdout, "committed2") == [["2"]], proc.stdout
    # the fence bumps the epoch (1), the new producer's InitProducerId again (2); at version 2
    # its commit bumps it once more
    assert _describe_transaction(txn_broker.bootstrap, tid) == ("CompleteCommit", 2 if version == 1 else 3)
    assert read_partition(txn_broker.bootstrap, topic, "read_committed", 4) == [(2, b"y", b"value-y")]
    assert read_partition(txn_broker.bootstrap, topic, "read_uncommitted", 4) == [
        (0, b"x1", b"value-x1"), (2, b"y", b"value-y")]


# --------------------------------------------------------------------------- transaction timeout


def test_timed_out_transaction_aborted_by_coordinator(txn_broker: Broker) -> None:
    """transaction.timeout.ms=2000 and no commit: the coordinator aborts the transaction (its
    marker at 2 makes the last stable offset 3), the producer's late commit fails with the
    fatal _FENCED error, and read_committed never shows t0 t1."""
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = unique_topic("txn-timeout")
    create_topic(txn_broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": txn_id("timeout"),
                  "transaction.timeout.ms": 2000, "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    for k in ("t0", "t1"):
        p.produce(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0)
    assert p.flush(30) == 0
    assert stable_end_offset(txn_broker.bootstrap, topic) == 0  # open: the LSO is its first offset

    wait_until(lambda: stable_end_offset(txn_broker.bootstrap, topic) == 3, timeout=60, interval=0.5,
               what="the coordinator to abort the timed-out transaction")
    assert high_watermark(txn_broker.bootstrap, topic) == 3
    with pytest.raises(KafkaException) as exc:
        p.commit_transaction(30)
    err = exc.value.args[0]  # the coordinator bumped the epoch when it aborted: EndTxn is fenced
    assert err.code() == KafkaError._FENCED, err
    assert err.fatal(), err
    assert read_partition(txn_broker.bootstrap, topic, "read_committed", 3) == []
    assert read_partition(txn_broker.bootstrap, topic, "read_uncommitted", 3) == [
        (0, b"t0", b"value-t0"), (1, b"t1", b"value-t1")]
