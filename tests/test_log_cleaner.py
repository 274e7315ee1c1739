"""The broker's log cleaner task (broker/runtime/log_cleaner.py) in a real Broker over TCP: cleaning in
steps off the event loop, Produce answered between the steps, the result fetched, the
cleaner's figures in /metrics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.broker_conn import Conn
from tmqgate.broker.apis import ApiKey
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol.records import build_batch, decode_records, iter_batches
from tmqgate.storage.group_log import ACTIVE

CONFIGS = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}


def _produce(topic: str, records: bytes) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def _fetch(topic: str) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 30, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 0, "last_fetched_epoch": -1,
                                                        "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 30}]}],
            "forgotten_topics_data": [], "rack_id": ""}


async def scenario(data_dir: str) -> None:
    # A step reads one batch (io buffer 1 byte: at least one entry per step).
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir, log_cleaner_enable=False,
                                 log_cleaner_io_buffer_size=1))
    await broker.start()
    try:
        broker.topics.create("t", 1, dict(CONFIGS))
        conn = await Conn.open(broker.port)
        t0 = int(time.time() * 1000) - 600_000
        for r in range(50):
            batch = build_batch([(b"k%d" % k, b"v%d-%d" % (k, r), [], t0 + r) for k in range(5)])
            resp = await conn.call(ApiKey.PRODUCE, 9, _produce("t", batch))
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        head = build_batch([(b"k0", b"head")])
        await conn.call(ApiKey.PRODUCE, 9, _produce("t", head))  # offset 250: the head

        cleaning = asyncio.create_task(broker.log_cleaner.clean_once())
        await asyncio.sleep(0)  # the round has started: its first step is in a worker thread
        resp = await conn.call(ApiKey.PRODUCE, 9, _produce("t", build_batch([(b"k9", b"during")])))
        assert resp["responses"][0]["partition_responses"][0]["base_offset"] == 251
        assert not cleaning.done()  # Produce was answered while the cleaning went on, step by step
        [stats] = await cleaning
        assert stats.cleaned_to == 250 and stats.entries_deleted == 49

        resp = await conn.call(ApiKey.FETCH, 12, _fetch("t"))
        data = resp["responses"][0]["partitions"][0]["records"]
        got = [(r.offset, r.key, r.value) for h in iter_batches(data)
               for r in decode_records(data[h.offset:h.offset + h.size])]
        assert got == [(245 + k, b"k%d" % k, b"v%d-49" % k) for k in range(5)] + [
            (250, b"k0", b"head"), (251, b"k9", b"during")]
        text = broker.metrics.exposition().decode()
        assert "kafka_log_logcleaner_max_clean_time_secs" in text
        assert "tmqgate_log_cleaner_read_bytes_total" in text
        conn.close()
    finally:
        await broker.stop()


def test_cleaner_runs_in_steps_and_produce_goes_on(tmp_path: Path) -> None:
    asyncio.run(scenario(str(tmp_path / "data")))


def test_a_cleaner_round_compacts_the_consumer_offsets_log(tmp_path: Path) -> None:
    """The cleaner's round also compacts __consumer_offsets' log: of 1,030 commits of one
    partition's one key the first 30 go (superseded), the last 1,000 (the head, Kafka's active
    segment) stay at their offsets."""

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "d"), log_cleaner_enable=False))
        await broker.start()
        try:
            store = broker.store
            for i in range(ACTIVE + 30):
                store.commit_offset("grp", "t", 0, i, commit_ms=1000 + i)
            p = store.group_log.partition_of("grp")
            before = store.group_log.read(p, 0, 1 << 30)
            assert len(before) == ACTIVE + 30
            await broker.log_cleaner.clean_once()
            after = store.group_log.read(p, 0, 1 << 30)
            offsets = [r.offset for batch in after for h in iter_batches(batch)
                       for r in decode_records(batch[h.offset:h.offset + h.size])]
            assert offsets == list(range(30, ACTIVE + 30)) and store.group_log.next_offset(p) == ACTIVE + 30
        finally:
            await broker.stop()

    asyncio.run(go())
