"""The plain-topic Fetch path in a real Broker over TCP: stored batches sent unjoined (one writev,
the socket's remainder through the transport), the shared partition check of Produce, Fetch,
ListOffsets and DeleteRecords, and the codecs built in the background from start-up."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from tests.broker_conn import Conn
from tmqgate.broker.apis import ApiKey
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.network.connection import write_parts
from tmqgate.broker.server import PRECOMPILED_APIS, Broker
from tmqgate.protocol.codec import codec_for
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch, iter_batches

E = ErrorCode


def fetch_body(topic: str | None, topic_id: bytes, partitions: list[int], max_bytes: int = 50 << 20) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                 "partition_max_bytes": 20 << 20} for p in partitions]}],
            "forgotten_topics_data": [], "rack_id": ""}


def produce_body(topic: str, partition: int, records: bytes) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


async def scenario(data_dir: str) -> None:
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:
        topic = broker.topics.create("t", 2, {})
        conn = await Conn.open(broker.port)
        sent: dict[int, list[bytes]] = {0: [], 1: []}
        for i in range(200):  # 100 batches of ~50 KiB per partition: a 10 MB Fetch response, more
            # than loopback's socket buffers (4 MiB) take at once
            p = i % 2
            batch = build_batch([(b"k%d" % i, os.urandom(50_000))])
            resp = await conn.call(ApiKey.PRODUCE, 9, produce_body("t", p, batch))
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
            sent[p].append(batch)
        stored = {p: b"".join(broker.store.read("t", p, 0, 1 << 30)) for p in (0, 1)}
        assert [h.record_count for h in iter_batches(stored[0])] == [1] * 100

        # Fetch answers are the stored batches byte for byte, small receive window or not
        small = await Conn.open(broker.port, rcvbuf=16 * 1024)
        for c, version in ((conn, 12), (small, 12), (small, 16), (small, 4)):
            by_id = version >= 13
            body = fetch_body(None if by_id else "t", topic.topic_id if by_id else b"\0" * 16, [0, 1])
            resp = await c.call(ApiKey.FETCH, version, body, pause=0.05)
            parts = resp["responses"][0]["partitions"]
            assert [p["error_code"] for p in parts] == [0, 0]
            assert [p["records"] for p in parts] == [stored[0], stored[1]]
            assert [p["high_watermark"] for p in parts] == [100, 100]

        # max_bytes: the first batch whole, then only batches that fit
        resp = await conn.call(ApiKey.FETCH, 12, fetch_body("t", b"\0" * 16, [0, 1], max_bytes=1))
        parts = resp["responses"][0]["partitions"]
        assert len(list(iter_batches(parts[0]["records"]))) == 1 and parts[1]["records"] == b""

        # the partition check, as before in every handler
        unknown_id = b"\x07" * 16
        for name, tid, index, version, want in (
                ("t", b"\0" * 16, 2, 12, E.UNKNOWN_TOPIC_OR_PARTITION),
                ("t", b"\0" * 16, -1, 12, E.UNKNOWN_TOPIC_OR_PARTITION),
                ("nope", b"\0" * 16, 0, 12, E.UNKNOWN_TOPIC_OR_PARTITION),
                (None, unknown_id, 0, 16, E.UNKNOWN_TOPIC_ID),
                (None, topic.topic_id, 5, 16, E.UNKNOWN_TOPIC_OR_PARTITION)):
            resp = await conn.call(ApiKey.FETCH, version, fetch_body(name, tid, [index]))
            assert resp["responses"][0]["partitions"][0]["error_code"] == want
        batch = build_batch([(b"k", b"v")])
        for name, index in (("t", 2), ("nope", 0)):
            resp = await conn.call(ApiKey.PRODUCE, 9, produce_body(name, index, batch))
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        resp = await conn.call(ApiKey.PRODUCE, 13, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                                                    "topic_data": [{"topic_id": unknown_id, "partition_data": [
                                                        {"index": 0, "records": batch}]}]})
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == E.UNKNOWN_TOPIC_ID
        for name, index, want in (("t", 2, E.UNKNOWN_TOPIC_OR_PARTITION), ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION),
                                  ("t", 1, E.NONE)):
            resp = await conn.call(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": index, "current_leader_epoch": -1,
                                               "timestamp": -1}]}]})
            part = resp["topics"][0]["partitions"][0]
            assert part["error_code"] == want and part["offset"] == (100 if want == E.NONE else -1)
            resp = await conn.call(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 1000, "topics": [
                {"name": name, "partitions": [{"partition_index": index, "offset": 3}]}]})
            part = resp["topics"][0]["partitions"][0]
            assert part["error_code"] == want and part["low_watermark"] == (3 if want == E.NONE else -1)

        # the codecs of the data path's APIs, newest version, get built in the background
        await asyncio.wait_for(broker._tasks[-1], 60)
        misses = codec_for.cache_info().misses
        for key in PRECOMPILED_APIS:
            codec_for(key, broker.apis[key].max_version, "request")
            codec_for(key, broker.apis[key].max_version, "response")
        assert codec_for.cache_info().misses == misses
        conn.close()
        small.close()
    finally:
        await broker.stop()


def test_fetch_path_over_tcp(tmp_path: Any) -> None:
    asyncio.run(scenario(str(tmp_path / "data")))


class FakeTransport(asyncio.WriteTransport):
    """A transport that records writes and has `queued` bytes pending."""

    def __init__(self, queued: int = 0) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.queued = queued

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.queued

    def is_closing(self) -> bool:
        return False


def test_write_parts_remainder_goes_to_the_transport_in_order() -> None:
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        parts = [b"head", os.urandom(300_000), b"mid", os.urandom(300_000), b"tail"]
        transport = FakeTransport()
        write_parts(transport, a.fileno(), parts)
        sent = bytearray()
        b.setblocking(False)
        while True:
            try:
                chunk = b.recv(1 << 20)
            except BlockingIOError:
                break
            sent += chunk
        assert 0 < len(sent) < sum(map(len, parts))  # the socket took some, the transport the rest
        assert bytes(sent) + b"".join(transport.written) == b"".join(parts)
        # data already queued in the transport: everything goes behind it, nothing to the socket
        queued = FakeTransport(queued=10)
        write_parts(queued, a.fileno(), parts)
        assert queued.written == parts
        # no socket (fd -1): the transport gets each part as it is
        nosock = FakeTransport()
        write_parts(nosock, -1, parts)
        assert nosock.written == parts
    finally:
        a.close()
        b.close()
