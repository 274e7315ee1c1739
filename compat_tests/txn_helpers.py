"""Shared boilerplate for the transaction tests (`test_transactions*.py`).

A broker of the transaction tests' own (`txn_broker`), started with the coordinator's check
for timed-out transactions every 500 ms on both brokers (Kafka's
`transaction.abort.timed.out.transaction.cleanup.interval.ms`, tmqgate's
`transaction_abort_timed_out_transaction_cleanup_interval_ms`; both default to 10 s), so a
transaction with `transaction.timeout.ms=2000` is aborted by its coordinator within a few
seconds.  Readers at either isolation level (confluent-kafka, manual assignment) that return
(offset, key, value) and stop once the partition's position reaches the end offset (positions
move past transaction markers and aborted records); the read_committed end offset (ListOffsets
with isolation level 1, i.e. the last stable offset); a group's committed offsets.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .brokers import BrokerProcess, RefKafkaProcess, new_broker
from .conftest import Broker

# The coordinator looks for timed-out transactions this often (ms) on the tests' broker.
CLEANUP_INTERVAL_MS = 500
KAFKA_TXN_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(CLEANUP_INTERVAL_MS)}


TMQGATE_TXN_CONFIG: dict[str, Any] = {
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": CLEANUP_INTERVAL_MS}

Rec = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


# The transaction tests' broker (`txn_broker`) runs transaction version 1 on both brokers
# (clients add partitions with AddPartitionsToTxn, one epoch per producer session): the
# reference formatted at transaction.version=1, tmqgate with `transaction_version = 1`.
# `txn_broker_tv2` runs version 2 (KIP-890 part 2: Produce adds partitions implicitly, every
# EndTxn bumps the epoch), Kafka 4.x's level for new clusters and tmqgate's default.
TRANSACTION_VERSION = 1


class TxnRefKafkaProcess(RefKafkaProcess):
    """The reference broker formatted with transaction.version=`transaction_version`."""

    transaction_version = TRANSACTION_VERSION

    def start(self) -> None:
        from . import kafka_ref

        self.ref = kafka_ref.start_reference_kafka(self.workdir, extra_config=self.config,
                                                   features={"transaction.version": self.transaction_version})
        self.listener_ports = self.ref.listener_ports
        if self.bootstrap and self.ref.bootstrap != self.bootstrap:
            raise RuntimeError(f"reference Kafka came back on {self.ref.bootstrap}, not {self.bootstrap}")
        self.bootstrap = self.ref.bootstrap


def txn_broker_process(target: str, workdir: Path,
                       transaction_version: int = TRANSACTION_VERSION) -> BrokerProcess:
    """An unstarted broker of `target` with the transaction tests' settings."""
    if target == "kafka":
        proc = TxnRefKafkaProcess(workdir, config=dict(KAFKA_TXN_CONFIG))
        proc.transaction_version = transaction_version
        return proc
    config: dict[str, Any] = dict(KAFKA_TXN_CONFIG if target.startswith("kafka") else TMQGATE_TXN_CONFIG)
    if not target.startswith("kafka"):
        config["transaction_version"] = transaction_version
    return new_broker(target, workdir, config=config)


def txn_broker_fixture(pytestconfig: Any, tmp_path_factory: Any, target: str, broker: Broker,
                       name: str, transaction_version: int = TRANSACTION_VERSION) -> Iterator[Broker]:
    """Body of a module fixture: the tests' own broker (or the given one with --bootstrap)."""
    if broker.external:
        yield broker
        return
    proc = txn_broker_process(str(pytestconfig.getoption("--target")), tmp_path_factory.mktemp(name),
                              transaction_version)
    proc.start()
    try:
        yield Broker(proc.bootstrap, target, external=False, nodes=proc.nodes)
    finally:
        proc.stop()


def txn_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from .helpers import ConfluentDriver

    ConfluentDriver(bootstrap).create_topic(topic, partitions)


def leader_id(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node id of the broker leading the partition (Metadata)."""
    from confluent_kafka.admin import AdminClient

    return int(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic]
               .partitions[partition].leader)


def ck_consumer(bootstrap: str, isolation: str, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader-" + uuid.uuid4().hex[:8],
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                     "isolation.level": isolation, **extra})


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    from confluent_kafka import TopicPartition

    c = ck_consumer(bootstrap, "read_uncommitted")
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)[1])
    finally:
        c.close()


def stable_end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """ListOffsets latest with isolation level read_committed: the last stable offset."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, partition)
        return int(c.end_offsets([tp])[tp])
    finally:
        c.close()


def read_partition(bootstrap: str, topic: str, isolation: str, end: int | None = None,
                   partition: int = 0, timeout: float = 60.0) -> list[Rec]:
    """Every record a consumer at `isolation` gets from the start of the partition until its
    position reaches `end` (default: the high watermark now)."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    if end is None:
        end = high_watermark(bootstrap, topic, partition)
    c = ck_consumer(bootstrap, isolation)
    got: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while True:
            for m in c.consume(num_messages=1000, timeout=0.2):
                if m.error() is not None:
                    raise AssertionError(f"consume error: {m.error()}")
                got.append((m.offset(), m.key(), m.value()))
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            if max(pos, got[-1][0] + 1 if got else 0) >= end:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read of {topic}[{partition}]: position {pos} never "
                                     f"reached {end}; got {got}")
    finally:
        c.close()


def committed_offset(bootstrap: str, group: str, topic: str, partition: int = 0, timeout: float = 60.0) -> int:
    """The group's committed offset (-1001 for none); retriable errors (e.g. NOT_COORDINATOR
    while the offsets topic is loading after a broker start, or the client's own timeout while
    an unstable offset waits for its transaction's marker) are retried until `timeout`."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    coordinator_moving = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                          KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT}
    deadline = time.monotonic() + timeout
    c = ck_consumer(bootstrap, "read_committed", **{"group.id": group})
    try:
        while True:
            try:
                return int(c.committed([TopicPartition(topic, partition)], timeout=30)[0].offset)
            except KafkaException as exc:
                err = exc.args[0]
                if not (err.retriable() or err.code() in coordinator_moving) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def values(recs: list[Rec]) -> list[bytes | None]:
    return [v for _, _, v in recs]


def parse_tool_table(text: str) -> list[dict[str, str]]:
    """The tables `kafka-transactions` prints (ToolsUtils.prettyPrintTable: a header line, then
    one line per row, cells padded and separated by tabs; an empty cell stays empty)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [h.strip() for h in lines[0].rstrip("\t").split("\t")]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.rstrip("\n").split("\t")][: len(header)]
        cells += [""] * (len(header) - len(cells))
        rows.append(dict(zip(header, cells, strict=True)))
    return rows
