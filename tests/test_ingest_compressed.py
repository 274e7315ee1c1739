"""A compressed batch produced to a database topic (schemaless ingestion) is decompressed once:
Produce's validation (protocol.validate) hands its decompressed records to ingestion, which
decodes them without decompressing again. A real Broker over TCP; the codecs' ``decompress`` is
observed (wrapped, still doing the work) where validation and decoding call it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.broker_conn import Conn
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol import records as records_module
from tmqgate.protocol import validate as validate_module
from tmqgate.protocol.compression import GZIP, LZ4, ZSTD
from tmqgate.protocol.records import build_batch, decode_records, iter_batches
from tmqgate.protocol.validate import validate_records

TS = 1_700_000_000_000
LINES = [f"m,t=t{i % 4} v={i}i64 {TS + i}" for i in range(500)]


def lp_batch(codec: int) -> bytes:
    return build_batch([(None, "\n".join(LINES[i:i + 50]).encode(), [("tmq.precision", b"ms")], TS + i)
                        for i in range(0, len(LINES), 50)], compression=codec)


def test_validation_hands_out_what_it_decompressed() -> None:
    batch = lp_batch(ZSTD)
    valid = validate_records(batch, 10, 9, ZSTD, TS, len(batch), 1 << 20)
    assert valid.records is not None
    assert decode_records(batch, decompressed=valid.records) == decode_records(batch)
    plain = lp_batch(0)
    assert validate_records(plain, 10, 9, 0, TS, len(plain), 1 << 20).records is None


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_database_topic_produce_decompresses_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  codec: int) -> None:
    calls: list[str] = []
    for module in (validate_module, records_module):
        real = module.decompress

        def counted(*args: Any, _real: Any = real, _name: str = module.__name__, **kw: Any) -> bytes:
            calls.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(module, "decompress", counted)

    async def run() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            broker.executor.execute("CREATE DATABASE power VGROUPS 1")
            conn = await Conn.open(broker.port)
            answer = await conn.call(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10_000,
                                           "topic_data": [{"name": "power", "partition_data": [
                                               {"index": 0, "records": lp_batch(codec)}]}]})
            part = answer["responses"][0]["partition_responses"][0]
            assert part["error_code"] == 0, part
            fetched = await conn.call(1, 12, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
                                              "max_bytes": 1 << 24, "isolation_level": 0, "topics": [
                                                  {"topic": "power", "partitions": [
                                                      {"partition": 0, "fetch_offset": 0,
                                                       "partition_max_bytes": 1 << 24}]}]})
            blob = fetched["responses"][0]["partitions"][0]["records"]
            rows = [r for h in iter_batches(blob) for r in decode_records(blob[h.offset:h.offset + h.size])]
            assert sorted(json.loads(r.value)["v"] for r in rows) == list(range(len(LINES)))
        finally:
            await broker.stop()

    asyncio.run(run())
    assert calls == ["tmqgate.protocol.validate"]  # once, by validation; ingestion reuses it
