"""Transactionally written TDengine rows (tmqgate only: TDengine topics).

A transactional producer (confluent-kafka) writes line-protocol rows into a database's topic
in four transactions: A committed, B aborted, C committed, D left open.  Then a query topic
(`CREATE TOPIC .. AS SELECT`) and a database topic over it, read with read_committed, must
hold exactly the rows of A and C — never B's (aborted) nor D's (not committed) — each once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import wait_until
from .tdengine_helpers import (
    METERS_DDL,
    CkConsumer,
    TdBroker,
    line,
    make_children,
    make_rows,
    td_broker_fixture,
    unique,
)
from .txn_helpers import TMQGATE_TXN_CONFIG, stable_end_offset, txn_id

pytestmark = pytest.mark.tmqgate_only

TABLES = [f"t{i:02d}" for i in range(6)]


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-txn", dict(TMQGATE_TXN_CONFIG))


def _read_committed(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    """(table, ts, voltage) of every record a read_committed consumer gets up to the LSO."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    c = CkConsumer(bootstrap, topic, **{"isolation.level": "read_committed"})
    try:
        c.c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        recs = c.drain({0: stable_end_offset(bootstrap, topic)}, timeout=60)
    finally:
        c.close()
    return [(r.key or "", r.json()["ts"], r.json()["voltage"]) for r in recs]


def test_query_topic_read_committed_sees_only_committed_rows(td: TdBroker) -> None:
    from confluent_kafka import Producer

    db = unique("txdb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 1")
    td.sql(METERS_DDL.format(db=db))
    children = make_children(TABLES, seed=14)
    batches = [make_rows(TABLES, 5, seed=i, ts_base=1_700_000_000_000 + i * 100_000) for i in range(4)]
    p = Producer({"bootstrap.servers": td.bootstrap, "transactional.id": txn_id("td"), "linger.ms": 5})
    p.init_transactions(60)
    for i, rows in enumerate(batches):
        p.begin_transaction()
        for r in rows:
            p.produce(db, key=r.table.encode(), value=line(r, children[r.table]).encode(), partition=0,
                      headers=[("tmq.precision", b"ms")])
        assert p.flush(30) == 0
        if i in (0, 2):
            p.commit_transaction(30)
        elif i == 1:
            p.abort_transaction(30)
        # i == 3: D stays open while the topics are read
    try:
        committed = sorted((r.table, r.ts, r.voltage) for r in batches[0] + batches[2])
        td.sql(f"CREATE TOPIC {db}_q AS SELECT ts, voltage, location FROM meters", db=db)
        td.sql(f"CREATE TOPIC {db}_all AS DATABASE {db}")
        wait_until(lambda: stable_end_offset(td.bootstrap, f"{db}_q") != 0, 60, 0.2, f"{db}_q's stable offset past 0")
        for topic in (f"{db}_q", f"{db}_all"):
            got = _read_committed(td.bootstrap, topic)
            assert sorted(got) == committed, topic
            assert len(got) == len(set(got)), f"{topic}: a row delivered twice"
    finally:
        p.abort_transaction(30)
