"""`kafka-transactions` (Apache Kafka 4.3's TransactionsCommand) against the broker.

A transactional producer (confluent-kafka, transaction.timeout.ms 5 minutes) writes two records
into an open transaction after two plain records, and is killed -9 without ending it: its
transaction stays open until the coordinator's timeout, and read_committed consumers are stuck
at its first offset (2).  The tool must show it — `list` (transactional id, producer id,
Ongoing), `describe --transactional-id` (state, producer id, epoch 0, timeout, partition),
`describe-producers --topic --partition` (the producer and its transaction's start offset 2) —
`find-hanging --broker-id` must not count it as hanging (its coordinator still tracks the
partition, so it will be completed), and `abort --topic --partition --start-offset 2` must
abort it at the partition (marker at 5, after a plain record at 4) so that a read_committed
consumer gets past it: offsets 0 1 4.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from . import cli_helpers as cli
from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RawConn
from .txn_helpers import (
    create_topic,
    high_watermark,
    leader_id,
    parse_tool_table,
    read_partition,
    stable_end_offset,
    txn_id,
)

HANGING_PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, tid = sys.argv[1:]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 300000})
p.init_transactions(60)
p.begin_transaction()
for k in ("h0", "h1"):
    p.produce(topic, key=k.encode(), value=("value-" + k).encode(), partition=0)
assert p.flush(30) == 0
print("open", flush=True)
time.sleep(600)
"""


def _plain(bootstrap: str, topic: str, *keys: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False})
    for k in keys:
        p.produce(topic, key=k.encode(), value=f"value-{k}".encode(), partition=0)
    assert p.flush(30) == 0


def _coordinator_id(bootstrap: str, tid: str) -> int:
    """The node id of the transactional id's coordinator (FindCoordinator)."""
    with RawConn(bootstrap) as c:
        [found] = c.request(10, 4, {"key_type": 1, "coordinator_keys": [tid]})["coordinators"]
    assert found["error_code"] == 0, found
    return int(found["node_id"])


def _tx(bootstrap: str, *args: str) -> list[dict[str, str]]:
    return parse_tool_table(cli.run("kafka-transactions", "--bootstrap-server", bootstrap, *args).stdout)


def test_kafka_transactions_tool_lists_describes_and_aborts_a_hanging_transaction(txn_broker: Broker) -> None:
    cli.require_tools()
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("txn-tool")
    tid = txn_id("hang")
    create_topic(bootstrap, topic)
    _plain(bootstrap, topic, "p0", "p1")

    proc = subprocess.Popen([sys.executable, "-c", HANGING_PRODUCER, bootstrap, topic, tid],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    _plain(bootstrap, topic, "after")
    assert high_watermark(bootstrap, topic) == 5
    assert stable_end_offset(bootstrap, topic) == 2  # held at the open transaction's first offset
    assert read_partition(bootstrap, topic, "read_committed", 2) == [(0, b"p0", b"value-p0"),
                                                                     (1, b"p1", b"value-p1")]

    listed = [r for r in _tx(bootstrap, "list") if r["TransactionalId"] == tid]
    assert len(listed) == 1, listed
    assert listed[0]["TransactionState"] == "Ongoing"
    assert listed[0]["Coordinator"] == str(_coordinator_id(bootstrap, tid))
    producer_id = listed[0]["ProducerId"]

    (described,) = _tx(bootstrap, "describe", "--transactional-id", tid)
    assert described["TransactionalId"] == tid
    assert described["ProducerId"] == producer_id
    assert described["ProducerEpoch"] == "0"
    assert described["TransactionState"] == "Ongoing"
    assert described["TransactionTimeoutMs"] == "300000"
    assert described["TopicPartitions"] == f"{topic}-0"
    assert described["CurrentTransactionStartTimeMs"] != "None"

    producers = _tx(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    mine = [r for r in producers if r["ProducerId"] == producer_id]
    assert len(mine) == 1, producers
    assert mine[0]["ProducerEpoch"] == "0"
    assert mine[0]["LastSequence"] == "1"  # two records, sequences 0 and 1
    assert mine[0]["CurrentTransactionStartOffset"] == "2"

    # its coordinator still has the partition in the ongoing transaction: not hanging
    hanging = _tx(bootstrap, "find-hanging", "--broker-id", str(leader_id(bootstrap, topic)),
                  "--max-transaction-timeout", "0")
    assert [r for r in hanging if r.get("Topic") == topic] == []

    cli.run("kafka-transactions", "--bootstrap-server", bootstrap, "abort", "--topic", topic,
            "--partition", "0", "--start-offset", "2")
    wait_until(lambda: stable_end_offset(bootstrap, topic) == 6, timeout=30,
               what="the abort marker to release the last stable offset")
    assert high_watermark(bootstrap, topic) == 6  # the marker took offset 5
    assert read_partition(bootstrap, topic, "read_committed", 6) == [
        (0, b"p0", b"value-p0"), (1, b"p1", b"value-p1"), (4, b"after", b"value-after")]
    assert read_partition(bootstrap, topic, "read_uncommitted", 6) == [
        (0, b"p0", b"value-p0"), (1, b"p1", b"value-p1"), (2, b"h0", b"value-h0"),
        (3, b"h1", b"value-h1"), (4, b"after", b"value-after")]
    producers = _tx(bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    assert [r["CurrentTransactionStartOffset"] for r in producers if r["ProducerId"] == producer_id] == ["None"]
