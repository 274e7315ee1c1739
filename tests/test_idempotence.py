"""Sequence checks of idempotent producers, against the cases Kafka's ProducerStateManager names,
and the window they are checked against."""

import asyncio

from tests.broker_conn import Conn
from tmqgate.broker.apis import ApiKey
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import build_batch
from tmqgate.storage.producers import (
    INT32_MAX,
    BatchMeta,
    ProducerAppend,
    ProducerWindow,
    check_sequence,
)


def state(epoch, *batches):
    return ProducerWindow(epoch, tuple(BatchMeta(*b) for b in batches))


def test_unknown_producer_accepts_any_sequence():
    assert check_sequence(None, 0, 17, 3) == (ErrorCode.NONE, None)


def test_next_in_order_is_written():
    s = state(0, (0, 9, 100, 109))
    assert check_sequence(s, 0, 10, 5) == (ErrorCode.NONE, None)


def test_exact_retry_returns_original_offset():
    s = state(0, (0, 9, 100, 109), (10, 14, 110, 114))
    assert check_sequence(s, 0, 0, 10) == (ErrorCode.NONE, 100)
    assert check_sequence(s, 0, 10, 5) == (ErrorCode.NONE, 110)


def test_gap_is_out_of_order():
    s = state(0, (0, 9, 100, 109))
    assert check_sequence(s, 0, 12, 5).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_than_window_is_out_of_order():
    # Kafka's checkSequence: anything but the next sequence (and no remembered batch) is out of
    # order; Kafka never answers DUPLICATE_SEQUENCE_NUMBER.
    s = state(0, *[(i * 10, i * 10 + 9, i * 10, i * 10 + 9) for i in range(5, 10)])
    assert check_sequence(s, 0, 0, 10).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_partial_overlap_inside_window_is_out_of_order():
    s = state(0, (0, 9, 100, 109), (10, 19, 110, 119))
    assert check_sequence(s, 0, 5, 10).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_fenced_epoch_and_new_epoch():
    s = state(3, (0, 9, 100, 109))
    assert check_sequence(s, 2, 10, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert check_sequence(s, 4, 0, 1) == (ErrorCode.NONE, None)
    assert check_sequence(s, 4, 10, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_at_int32_max():
    s = state(0, (INT32_MAX - 4, INT32_MAX, 100, 104))
    assert check_sequence(s, 0, 0, 5) == (ErrorCode.NONE, None)
    s = state(0, (INT32_MAX - 1, 2, 100, 104))
    assert check_sequence(s, 0, INT32_MAX - 1, 5) == (ErrorCode.NONE, 100)


def test_window_keeps_the_last_five_batches_of_the_epoch():
    window = None
    for i in range(7):
        window = ProducerAppend(5, 1, 2 * i, 2, window).window_at(3 * i)
    assert window == state(1, *[(2 * i, 2 * i + 1, 3 * i, 3 * i + 1) for i in range(2, 7)])
    assert check_sequence(window, 1, 8, 2) == (ErrorCode.NONE, 12)
    assert check_sequence(window, 1, 2, 2).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # evicted
    # a new epoch starts a fresh window; the last sequence wraps at Int32.MAX
    window = ProducerAppend(5, 2, INT32_MAX - 1, 3, window).window_at(21)
    assert window == state(2, (INT32_MAX - 1, 0, 21, 23))
    assert check_sequence(window, 2, 1, 1) == (ErrorCode.NONE, None)


# What a producer sees, over TCP from a real Broker -------------------------------------------


def _produce_body(records: bytes) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]}


def _batch(first_seq: int, n: int, epoch: int = 0) -> bytes:
    return build_batch([(None, b"v%d" % (first_seq + i)) for i in range(n)],
                       producer_id=4242, producer_epoch=epoch, base_sequence=first_seq)


async def _produce(conn: Conn, records: bytes) -> tuple[int, int, int]:
    resp = await conn.call(ApiKey.PRODUCE, 9, _produce_body(records))
    p = resp["responses"][0]["partition_responses"][0]
    return p["error_code"], p["base_offset"], p["log_start_offset"]


async def _retried_batches_scenario(data_dir: str) -> None:
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:
        broker.topics.create("t", 1, {})
        conn = await Conn.open(broker.port)
        assert await _produce(conn, _batch(0, 2)) == (0, 0, 0)
        assert await _produce(conn, _batch(2, 3)) == (0, 2, 0)
        # a retried batch gets its original offset and is not stored again
        assert await _produce(conn, _batch(0, 2)) == (0, 0, 0)
        assert await _produce(conn, _batch(2, 3)) == (0, 2, 0)
        assert broker.store.next_version("t", 0) == 5
        assert (await _produce(conn, _batch(9, 1)))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await _produce(conn, _batch(5, 1, epoch=-1)))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        # the log start offset answered is the one after the append
        broker.store.delete_before("t", 0, 2)
        assert await _produce(conn, _batch(5, 1)) == (0, 5, 2)
        assert await _produce(conn, _batch(5, 1)) == (0, 5, 2)
        conn.close()
    finally:
        await broker.stop()
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:  # the window survives a restart
        conn = await Conn.open(broker.port)
        assert await _produce(conn, _batch(2, 3)) == (0, 2, 2)
        assert await _produce(conn, _batch(6, 1)) == (0, 6, 2)
        assert broker.store.next_version("t", 0) == 7
        conn.close()
    finally:
        await broker.stop()


def test_retried_batches_get_their_original_offsets(tmp_path) -> None:
    asyncio.run(_retried_batches_scenario(str(tmp_path / "data")))


# A database topic: the batch becomes rows, the window records the versions they took ---------


def _lines_batch(first_seq: int, lines: list[bytes], epoch: int = 0) -> bytes:
    return build_batch([(None, v, [("tmq.precision", b"ms")]) for v in lines],
                       producer_id=4343, producer_epoch=epoch, base_sequence=first_seq)


def _rows(broker: Broker) -> int:
    """The rows stored on power's vnode (what SELECT COUNT(*) over all supertables counts)."""
    return sum(e.count for e in broker.store.read_entries("power", 0, 0, 1 << 30) if e.kind == "rows")


async def _database_topic_scenario(data_dir: str) -> None:
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:
        broker.executor.execute("CREATE DATABASE power VGROUPS 1")
        conn = await Conn.open(broker.port)

        async def produce(records: bytes) -> tuple[int, int, int]:
            resp = await conn.call(ApiKey.PRODUCE, 9, {
                "transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
                    {"name": "power", "partition_data": [{"index": 0, "records": records}]}]})
            p = resp["responses"][0]["partition_responses"][0]
            return p["error_code"], p["base_offset"], p["log_start_offset"]

        # 2 records, 3 rows in two supertables: two meta entries each (stable, child) first
        first = _lines_batch(0, [b"m,t=a v=1i64 1700000000000\nm,t=a v=2i64 1700000000001",
                                 b"n,t=b w=1i64 1700000000000"])
        code, base, _ = await produce(first)
        assert code == 0
        after_first = broker.store.next_version("power", 0)
        assert after_first == base + 3
        assert await produce(first) == (0, base, 0)  # the retry: same answer, nothing written
        assert broker.store.next_version("power", 0) == after_first
        assert _rows(broker) == 3
        second = _lines_batch(2, [b"m,t=a v=3i64 1700000000002"])
        assert await produce(second) == (0, after_first, 0)
        assert await produce(first) == (0, base, 0)  # still in the window
        assert (await produce(_lines_batch(9, [b"m,t=a v=9i64 1700000000009"])))[0] == \
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await produce(_lines_batch(3, [b"m,t=a v=4i64 1700000000003"], epoch=-1)))[0] == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        assert _rows(broker) == 4
        conn.close()
    finally:
        await broker.stop()
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:  # the window survives a restart with the rows
        conn = await Conn.open(broker.port)
        resp = await conn.call(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 1000, "topic_data": [
                {"name": "power", "partition_data": [{"index": 0, "records": second}]}]})
        assert resp["responses"][0]["partition_responses"][0]["base_offset"] == after_first
        assert _rows(broker) == 4
        conn.close()
    finally:
        await broker.stop()


def test_retried_database_topic_batches_write_their_rows_once(tmp_path) -> None:
    asyncio.run(_database_topic_scenario(str(tmp_path / "data")))
