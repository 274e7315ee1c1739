"""A real Broker over TCP whose handler fails (a fault injected into its bound handler table):
the failure is answered with Kafka's error response for that API and version, the connection
lives on, and the log gets one line per failure up to the rate limit."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.broker_conn import Conn
from tmqgate.broker.apis import ApiKey
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch

E = ErrorCode


async def _broken(request: Any) -> Any:
    raise RuntimeError("disk on fire")


def _list_offsets(topic: str, partitions: list[int]) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in partitions]}]}


async def scenario(data_dir: str) -> None:
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir, log_rate_limit_messages=3))
    await broker.start()
    try:
        broker.topics.create("t", 2, {})
        broker.serving.handlers[ApiKey.LIST_OFFSETS] = _broken
        broker.serving.handlers[ApiKey.PRODUCE] = _broken
        conn = await Conn.open(broker.port, client_id="failing")
        for _ in range(20):
            resp = await conn.call(ApiKey.LIST_OFFSETS, 7, _list_offsets("t", [0, 1]))
            assert resp["topics"] == [{"name": "t", "partitions": [
                {"partition_index": p, "error_code": E.UNKNOWN_SERVER_ERROR, "timestamp": -1, "offset": -1,
                 "leader_epoch": -1} for p in (0, 1)]}]
        produce = {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 1, "records": build_batch([(None, b"v")])}]}]}
        resp = await conn.call(ApiKey.PRODUCE, 9, produce)
        [p] = resp["responses"][0]["partition_responses"]
        assert (p["index"], p["error_code"], p["base_offset"], p["error_message"]) == \
            (1, E.UNKNOWN_SERVER_ERROR, -1, None)
        # the connection lives on and is served
        md = await conn.call(ApiKey.METADATA, 12, {"topics": [{"name": "t", "topic_id": bytes(16)}]})
        assert [(t["name"], t["error_code"]) for t in md["topics"]] == [("t", 0)]
        # Produce acks=0 owes no answer: Kafka closes the connection instead
        conn.writer.write(_frame(produce))
        assert await asyncio.wait_for(conn.reader.read(), 10) == b""
        conn.close()
    finally:
        await broker.stop()


def _frame(produce: dict[str, Any]) -> bytes:
    from tmqgate.protocol.messages import encode_request

    return encode_request(ApiKey.PRODUCE, 9, 99, "failing", {**produce, "acks": 0})


def test_handler_failure_is_answered(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="tmqgate.server"):
        asyncio.run(scenario(str(tmp_path / "data")))
    lines = [r.getMessage() for r in caplog.records if r.name == "tmqgate.server"
             and "error handling" in r.getMessage()]
    assert len(lines) == 3, lines  # 22 failures, 3 logged (log_rate_limit_messages)
    assert "LIST_OFFSETS v7 (client id 'failing'" in lines[0] and "UNKNOWN_SERVER_ERROR" in lines[0]
    assert "RuntimeError('disk on fire')" in lines[0]
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
