"""`kafka-transactions find-hanging` reporting a real hanging transaction (issue 14, "Tests").

A hanging transaction is one open at a partition (DescribeProducers shows its start offset)
that its coordinator will never end: its producer id is unknown to ListTransactions, or its
transactional id's DescribeTransactions does not list the partition (Kafka's
TransactionsCommand.filterHangingTransactions).  A client cannot make one on Kafka 4.3, nor on
tmqgate: every transactional Produce is verified with the coordinator first (KIP-890 part 1,
`transaction.partition.verification.enable`, true by default; tmqgate's TxnGate), so a batch
for a partition not added to the ongoing transaction is refused (INVALID_TXN_STATE), and a
coordinator that aborts or expires a transaction writes its markers first (an id expires only
when idle).  Losing the coordinator's state is not reachable from a client either.

So both brokers of this module run with that verification off — Kafka's
`transaction.partition.verification.enable=false`, tmqgate's
`transaction_partition_verification_enable = false`, the way Kafka behaved before KIP-890 —
and the hanging transaction is made as it was then: a producer id from InitProducerId for a
transactional id, and a transactional batch produced with it to a partition that was never
added with AddPartitionsToTxn.  The coordinator's transaction stays Empty; the partition's is
open at offset 1 (after a plain record at 0).  `find-hanging --broker-id N
--max-transaction-timeout 0` must report exactly that row (topic, partition 0, producer id,
epoch, start offset 1); `abort --start-offset 1` ends it (abort marker at 2) and find-hanging
then reports nothing for the topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import cli_helpers as cli
from .brokers import new_broker
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RoutedConn
from .txn_helpers import (
    KAFKA_TXN_CONFIG,
    TMQGATE_TXN_CONFIG,
    TxnRefKafkaProcess,
    create_topic,
    high_watermark,
    leader_id,
    parse_tool_table,
    read_partition,
    stable_end_offset,
    txn_id,
)

RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def unverified_broker(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory,
                      broker: Broker) -> Iterator[Broker]:
    """A broker of its own with transactional Produce unverified (see the module's header)."""
    if broker.external:
        pytest.skip("--bootstrap given: the test needs a broker with partition verification off")
    target = str(pytestconfig.getoption("--target"))
    workdir = Path(tmp_path_factory.mktemp("txn-unverified"))
    if target == "kafka":
        proc: Any = TxnRefKafkaProcess(workdir, config={**KAFKA_TXN_CONFIG,
                                                        "transaction.partition.verification.enable": "false"})
    else:
        proc = new_broker(target, workdir, config={**TMQGATE_TXN_CONFIG,
                                                   "transaction_partition_verification_enable": False})
    proc.start()
    try:
        yield Broker(proc.bootstrap, target, external=False)
    finally:
        proc.stop()


def _init_producer_id(c: RoutedConn, tid: str) -> tuple[int, int]:
    """FindCoordinator for the transactional id (on Kafka it creates __transaction_state;
    retried until the coordinator is there), then InitProducerId."""
    found = wait_until(lambda: c.request(10, 3, {"key": tid, "key_type": 1}), 60, 0.5, f"the coordinator of {tid}",
                       ok=lambda f: f["error_code"] not in RETRIABLE)
    assert found["error_code"] == 0, found
    body = wait_until(lambda: c.request(22, 4, {"transactional_id": tid, "transaction_timeout_ms": 60000,
                                                "producer_id": -1, "producer_epoch": -1}),
                      60, 0.5, f"a producer id for {tid}", ok=lambda b: b["error_code"] not in RETRIABLE)
    assert body["error_code"] == 0, body
    return body["producer_id"], body["producer_epoch"]


def _tx(bootstrap: str, *args: str) -> list[dict[str, str]]:
    return parse_tool_table(cli.run("kafka-transactions", "--bootstrap-server", bootstrap, *args).stdout)


def test_find_hanging_reports_a_transaction_its_coordinator_does_not_know(unverified_broker: Broker) -> None:
    from confluent_kafka import Producer

    from tmqgate.protocol.records import build_batch

    cli.require_tools()
    bootstrap = unverified_broker.bootstrap
    topic = unique_topic("txn-hanging")
    create_topic(bootstrap, topic)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False})
    p.produce(topic, key=b"p0", value=b"value-p0", partition=0)
    assert p.flush(30) == 0
    tid = txn_id("hanging")
    with RoutedConn(bootstrap) as c:
        pid, epoch = _init_producer_id(c, tid)
        # a timestamp a minute back: find-hanging counts a transaction whose last write is
        # older than --max-transaction-timeout (0 minutes here)
        batch = build_batch([(b"h1", b"value-h1", [], int(time.time() * 1000) - 60_000)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, is_transactional=True)
        body = c.request(0, 9, {"transactional_id": tid, "acks": -1, "timeout_ms": 10000,
                                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        [part] = body["responses"][0]["partition_responses"]
        assert (part["error_code"], part["base_offset"]) == (0, 1), part
    assert high_watermark(bootstrap, topic) == 2
    assert stable_end_offset(bootstrap, topic) == 1  # held at the open transaction's first offset

    (described,) = _tx(bootstrap, "describe", "--transactional-id", tid)
    assert (described["ProducerId"], described["TransactionState"], described["TopicPartitions"]) == (
        str(pid), "Empty", "")
    broker_id = str(leader_id(bootstrap, topic))
    hanging = [r for r in _tx(bootstrap, "find-hanging", "--broker-id", broker_id, "--max-transaction-timeout", "0")
               if r.get("Topic") == topic]
    assert [(r["Partition"], r["ProducerId"], r["ProducerEpoch"], r["StartOffset"]) for r in hanging] == [
        ("0", str(pid), str(epoch), "1")], hanging

    cli.run("kafka-transactions", "--bootstrap-server", bootstrap, "abort", "--topic", topic,
            "--partition", "0", "--start-offset", "1")
    wait_until(lambda: stable_end_offset(bootstrap, topic) == 3, timeout=30,
               what="the abort marker to release the last stable offset")
    assert read_partition(bootstrap, topic, "read_committed", 3) == [(0, b"p0", b"value-p0")]
    assert [r for r in _tx(bootstrap, "find-hanging", "--broker-id", broker_id, "--max-transaction-timeout", "0")
            if r.get("Topic") == topic] == []
