"""Transactions over a TDengine database (issue 14, point 3): rows produced in a transaction
to a database topic (line protocol) are held back from read_committed readers until the
commit, and a database topic or query topic read with read_committed never shows the rows of
an aborted transaction (rows carry no producer id, so the view drops them itself); markers
are data-plane entries the views skip. tmqgate-only: Kafka has no databases."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .raw import RawConn
from .tdengine_helpers import TdBroker, td_broker_fixture, unique

pytestmark = pytest.mark.tmqgate_only

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-txn")


def _fetch(c: RawConn, topic: str, isolation: int) -> dict[str, Any]:
    body = c.request(1, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })
    [t] = body["responses"]
    [p] = t["partitions"]
    assert p["error_code"] == 0, p
    return p


def _currents(p: dict[str, Any]) -> list[float]:
    """The `current` column of the data rows a view returned (meta records left out)."""
    from tmqgate.protocol.records import decode_records, iter_batches

    data = p.get("records") or b""
    out = []
    for h in iter_batches(data):
        for r in decode_records(data[h.offset:h.offset + h.size]):
            value = json.loads(r.value) if r.value else {}
            if "current" in value:
                out.append(value["current"])
    return sorted(out)


def _produce_line(c: RawConn, db: str, text: str, txn: tuple[str, int, int] | None) -> None:
    from tmqgate.protocol.records import build_batch

    record = (b"d1", text.encode(), [("tmq.precision", b"ms")], int(time.time() * 1000))
    if txn is None:
        batch = build_batch([record])
    else:
        batch = build_batch([record], producer_id=txn[1], producer_epoch=txn[2], base_sequence=0,
                            is_transactional=True)
    body = c.request(0, 9, {
        "transactional_id": None if txn is None else txn[0], "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": db, "partition_data": [{"index": 0, "records": batch}]}]})
    p = body["responses"][0]["partition_responses"][0]
    assert p["error_code"] == 0, p


def _begin(c: RawConn, db: str) -> tuple[str, int, int]:
    """A transactional producer (its own transactional id) with partition 0 of `db` added to
    its transaction: (transactional id, producer id, epoch)."""
    tid = unique("td-txn")
    init = c.request(22, 4, {"transactional_id": tid, "transaction_timeout_ms": 60_000,
                             "producer_id": -1, "producer_epoch": -1})
    assert init["error_code"] == 0, init
    pid, epoch = init["producer_id"], init["producer_epoch"]
    add = c.request(24, 3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                            "v3_and_below_producer_epoch": epoch,
                            "v3_and_below_topics": [{"name": db, "partitions": [0]}]})
    assert add["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0, add
    return tid, pid, epoch


def _end(c: RawConn, txn: tuple[str, int, int], commit: bool) -> None:
    body = c.request(26, 4, {"transactional_id": txn[0], "producer_id": txn[1], "producer_epoch": txn[2],
                             "committed": commit})
    assert body["error_code"] == 0, body


def test_read_committed_views_hide_open_and_aborted_transactions(td: TdBroker) -> None:
    db = unique("txndb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    query = f"{db}_big"
    with RawConn(td.bootstrap) as c:
        _produce_line(c, db, "meters,location=a,groupid=1 current=1.5 1700000000000", None)
        td.sql(f"CREATE TOPIC {query} AS SELECT * FROM {db}.meters WHERE current > 0")
        aborted, committed = _begin(c, db), _begin(c, db)
        _produce_line(c, db, "meters,location=a,groupid=1 current=2.5 1700000001000", aborted)
        _produce_line(c, db, "meters,location=a,groupid=1 current=3.5 1700000002000", committed)
        _produce_line(c, db, "meters,location=a,groupid=1 current=4.5 1700000003000", None)
        for topic in (db, query):  # both transactions open: read_committed stops at the first
            assert _currents(_fetch(c, topic, READ_COMMITTED)) == [1.5]
            assert _currents(_fetch(c, topic, READ_UNCOMMITTED)) == [1.5, 2.5, 3.5, 4.5]
        _end(c, aborted, False)
        _end(c, committed, True)
        for topic in (db, query):
            p = _fetch(c, topic, READ_COMMITTED)
            assert p["last_stable_offset"] == p["high_watermark"]
            assert _currents(p) == [1.5, 3.5, 4.5]
            assert _currents(_fetch(c, topic, READ_UNCOMMITTED)) == [1.5, 2.5, 3.5, 4.5]
