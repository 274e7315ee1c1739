"""Produce of transactional batches against a real Broker over TCP: the transaction
coordinator's gate (broker/handlers/context.py's TxnGate) is asked before each transactional
batch and its code answers the partition; a producer with an open transaction may not send
non-transactional batches to that partition (Kafka's ProducerAppendInfo: INVALID_TXN_STATE)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from tests.broker_conn import Conn
from tmqgate.broker.apis import ApiKey
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.handlers.context import DataPlane
from tmqgate.broker.server import Broker
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch

PID = 77


class Gate:
    """A coordinator that knows one transactional id and answers the rest with a set code."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.answer = ErrorCode.NONE

    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add: bool = False) -> ErrorCode:
        self.calls.append((transactional_id, producer_id, producer_epoch, topic, partition))
        return self.answer


class GatedBroker(Broker):
    def __init__(self, config: BrokerConfig, gate: Gate) -> None:
        super().__init__(config)
        self.gate = gate

    def _contexts(self) -> dict[type, Any]:
        contexts = super()._contexts()
        contexts[DataPlane] = dataclasses.replace(contexts[DataPlane], transactions=self.gate)
        return contexts


async def _produce(conn: Conn, batch: bytes, transactional_id: str | None = "tx") -> int:
    resp = await conn.call(ApiKey.PRODUCE, 9, {
        "transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 1, "records": batch}]}]})
    return int(resp["responses"][0]["partition_responses"][0]["error_code"])


def _batch(seq: int, transactional: bool, epoch: int = 0) -> bytes:
    return build_batch([(None, b"v", [], 1000)], producer_id=PID, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=transactional)


async def _scenario(data_dir: str) -> None:
    gate = Gate()
    broker = GatedBroker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir), gate)
    await broker.start()
    try:
        broker.topics.create("t", 2, {})
        conn = await Conn.open(broker.port)
        gate.answer = ErrorCode.INVALID_TXN_STATE  # e.g. the partition was not added
        assert await _produce(conn, _batch(0, True)) == ErrorCode.INVALID_TXN_STATE
        assert broker.store.next_version("t", 1) == 0  # nothing appended
        gate.answer = ErrorCode.NONE
        assert await _produce(conn, _batch(0, True)) == 0
        assert gate.calls == [("tx", PID, 0, "t", 1)] * 2
        assert broker.store.open_transactions("t", 1) == {PID: (0, 0)}
        # the same producer without the transactional bit while its transaction is open
        assert await _produce(conn, _batch(1, False), None) == ErrorCode.INVALID_TXN_STATE
        assert len(gate.calls) == 2  # not a transactional batch: the gate is not asked
        gate.answer = ErrorCode.PRODUCER_FENCED
        assert await _produce(conn, _batch(1, True)) == ErrorCode.PRODUCER_FENCED
        assert broker.store.next_version("t", 1) == 1
        conn.close()
    finally:
        await broker.stop()


def test_produce_asks_the_transaction_gate(tmp_path: Path) -> None:
    asyncio.run(_scenario(str(tmp_path / "data")))
