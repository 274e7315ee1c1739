"""TDengine rows under idempotence: an idempotent producer's line-protocol or JSON batch sent to a
database topic writes its rows once, however often it is retried (issue 14, point 4).

A database topic is tmqgate's own (a TDengine database written with schemaless records), so
these tests run against tmqgate only. The sequence rules are Kafka's (the same as on a plain
topic): a retried batch is answered with its first base offset, a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .proxy import RecordingProxy
from .raw import RawConn
from .tdengine_helpers import BASE_TS, TdBroker, read_kafka_python, td_broker_fixture, unique

pytestmark = pytest.mark.tmqgate_only

PRODUCE, INIT_PRODUCER_ID = 0, 22
OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 45, 47


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-idempotence")


def _database(td: TdBroker) -> str:
    db = unique("idem")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1 PRECISION 'ms'")
    return db


def _rows(td: TdBroker, db: str) -> list[tuple[int, str]]:
    """(timestamp, location) of every row of the database (one supertable), read back from its
    topic by a consumer (one record per row), sorted: SELECT ts, location FROM the supertable."""
    return sorted((row["_ts"], row["location"])
                  for row in (r.json() for r in read_kafka_python(td.bootstrap, db, partitions=1)))


def _expected(records: range) -> list[tuple[int, str]]:
    """The rows of records `records` of `_line_values` / `_json_values`, each once."""
    return sorted((BASE_TS + i, loc) for i in records for loc in ("SF", "LA"))


def _init_producer_id(conn: RawConn, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    body = conn.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                              "producer_id": producer_id, "producer_epoch": epoch})
    assert body["error_code"] == 0, body
    return body["producer_id"], body["producer_epoch"]


def _line_values(first: int, n: int) -> list[bytes]:
    """n records of line protocol, two lines (two rows) each, supertable `meters`."""
    return [b"meters,location=SF,groupid=2i current=%d.5,voltage=%di %d\nmeters,location=LA,groupid=3i "
            b"current=%d.25,voltage=%di %d" % (i, 200 + i, BASE_TS + i, i, 210 + i, BASE_TS + i)
            for i in range(first, first + n)]


def _json_values(first: int, n: int) -> list[bytes]:
    """n records of OpenTSDB JSON, two data points (two rows) each, supertable `meters_current`."""
    return [json.dumps([{"metric": "meters_current", "timestamp": BASE_TS + i, "value": i + 0.5,
                         "tags": {"location": loc, "groupid": 2}} for loc in ("SF", "LA")]).encode()
            for i in range(first, first + n)]


PAYLOADS = {"line": _line_values, "json": _json_values}


def _batch(values: list[bytes], producer_id: int, epoch: int, base_sequence: int) -> bytes:
    from tmqgate.protocol.records import build_batch

    return build_batch([(None, v, [("tmq.precision", b"ms")]) for v in values],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=base_sequence)


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_a_retried_batch_writes_its_rows_once(td: TdBroker, payload: str) -> None:
    values = PAYLOADS[payload]
    db = _database(td)
    with RawConn(td.bootstrap) as conn:
        pid, epoch = _init_producer_id(conn)
        first = _batch(values(0, 3), pid, epoch, 0)  # 3 records, 6 rows
        answer = conn.produce(db, 0, first)
        assert answer["error_code"] == 0, answer
        base = answer["base_offset"]
        assert _rows(td, db) == _expected(range(3))
        # the same batch again (a lost answer): the first answer, no row written
        again = conn.produce(db, 0, first)
        assert (again["error_code"], again["base_offset"]) == (0, base)
        assert _rows(td, db) == _expected(range(3))
        # the next batch is written, and the first, sent again, still gets its base offset
        second = conn.produce(db, 0, _batch(values(3, 2), pid, epoch, 3))
        assert second["error_code"] == 0 and second["base_offset"] == base + 6, second
        assert _rows(td, db) == _expected(range(5))
        assert conn.produce(db, 0, first)["base_offset"] == base
        # a gap in the sequence
        gap = conn.produce(db, 0, _batch(values(9, 1), pid, epoch, 9))
        assert gap["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER, gap
        # a bumped epoch (KIP-360: idempotent clients bump it themselves) starts again at 0;
        # the old epoch is fenced
        epoch2 = epoch + 1
        bumped = conn.produce(db, 0, _batch(values(5, 1), pid, epoch2, 0))
        assert bumped["error_code"] == 0, bumped
        old = conn.produce(db, 0, _batch(values(6, 1), pid, epoch, 5))
        assert old["error_code"] == INVALID_PRODUCER_EPOCH, old
    # records 0-4 and the bumped epoch's record 5, each row once
    assert _rows(td, db) == _expected(range(6))


def test_confluent_idempotent_producer_survives_a_lost_produce_answer(td: TdBroker) -> None:
    from confluent_kafka import Producer

    db = _database(td)
    n = 20
    reports: list[tuple[Any, int]] = []
    with RecordingProxy(td.bootstrap, drop_first_response_of=PRODUCE) as proxy:
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True,
                             "linger.ms": 50, "retry.backoff.ms": 50, "client.id": "idem-rows"})
        for v in _line_values(0, n):
            producer.produce(db, value=v, partition=0, headers=[("tmq.precision", b"ms")],
                             on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        assert producer.flush(60) == 0
        del producer  # destroyed (librdkafka's threads stop) before the proxy goes
        produced = [f for f in proxy.capture.requests if int.from_bytes(f[:2], "big") == PRODUCE]
    assert proxy.dropped, "no Produce answer was lost"
    assert len(produced) >= 2, "the producer never sent its batch again"
    assert [err for err, _ in reports] == [None] * n
    # every record delivered, its rows written once
    assert _rows(td, db) == _expected(range(n))
    # the offsets reported are the versions the rows took (a retry answered with the first)
    assert len({offset for _, offset in reports}) == n
