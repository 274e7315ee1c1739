"""Which broker of a cluster runs a SQL text (broker/sql/routing.py ``led_elsewhere``): the
leader of the databases its statements use, as the parser reads them (issue 16, step 5)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from tmqgate.broker.cluster.outbox import Outboxes
from tmqgate.broker.cluster.sql import ClusterSql
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.parser import parse_script
from tmqgate.broker.sql.routing import databases_of, led_elsewhere


class _Cluster:
    """Databases' leaders as a cluster would have them: a (here 1), b and c (2), d (none live)."""

    node_id = 1
    leaders = {"a": 1, "b": 2, "c": 2, "d": -1}

    def leader(self, db: str) -> int | None:
        return self.leaders.get(db)

    async def refresh(self) -> None: ...

    async def forward(self, *_: Any) -> Any: ...

    async def create_database(self, *_: Any) -> None: ...

    async def create_topic(self, *_: Any) -> None: ...

    async def drop(self, *_: Any) -> None: ...


@pytest.mark.parametrize(("text", "db", "expected"), [
    ("SELECT ts FROM b.meters", None, {"b"}),
    ("SELECT ts FROM meters", "b", {"b"}),
    ("INSERT INTO a.t1 VALUES (now, 1) b.t2 VALUES (now, 2)", None, {"a", "b"}),
    ("CREATE TABLE t1 USING meters TAGS (1)", "c", {"c"}),
    ("CREATE TABLE a.t1 USING a.meters TAGS (1) b.t2 USING b.meters TAGS (2)", None, {"a", "b"}),
    ("CREATE STABLE b.st (ts TIMESTAMP, v INT) TAGS (g INT)", None, {"b"}),
    ("ALTER STABLE b.st ADD COLUMN w INT", None, {"b"}),
    ("DROP TABLE b.t1", None, {"b"}),
    ("DESCRIBE b.meters", None, {"b"}),
    ("SHOW b.STABLES", None, {"b"}),
    ("SHOW TABLES", "b", {"b"}),
    ("SHOW b.VGROUPS", None, {"b"}),
    ("CREATE TOPIC t AS SELECT ts FROM b.meters", None, {"b"}),
    # through etcd, or every broker's own answer: run where they arrive
    ("CREATE DATABASE b", None, set()),
    ("DROP DATABASE b", None, set()),
    ("DROP TOPIC t", "b", set()),
    ("SHOW DATABASES", "b", set()),
    ("SHOW TOPICS", "b", set()),
    ("SHOW DNODES", "b", set()),
])
def test_the_databases_a_statement_needs_the_leader_of(text: str, db: str | None, expected: set[str]) -> None:
    [stmt] = parse_script(text)
    assert databases_of(stmt, db) == expected


@pytest.mark.parametrize(("text", "db", "expected"), [
    ("SELECT ts FROM a.meters", None, None),  # led here
    ("SELECT ts FROM x.meters", None, None),  # not shared: this node's own
    ("SELECT ts FROM b.meters", None, 2),
    ("INSERT INTO b.t1 VALUES (now, 1) c.t2 VALUES (now, 2)", None, 2),  # both led by 2: sent whole
    ("USE b; INSERT INTO t1 VALUES (now, 1); SHOW TABLES", None, 2),  # USE takes the session's database
    ("SHOW DATABASES", None, None),
])
def test_a_text_goes_to_the_one_broker_leading_its_databases(text: str, db: str | None, expected: int | None) -> None:
    assert led_elsewhere(_Cluster(), parse_script(text), db) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("INSERT INTO a.t1 VALUES (now, 1) b.t2 VALUES (now, 2)",
     "The statements use databases led by different dnodes (b on dnode 2; a here): send them separately"),
    ("SELECT ts FROM d.meters", "Database d has no live leader now (its dnode is offline)"),
])
def test_a_text_that_no_one_broker_can_run_is_refused(text: str, message: str) -> None:
    with pytest.raises(SqlError) as err:
        led_elsewhere(_Cluster(), parse_script(text), None)
    assert err.value.message == message


@pytest.mark.parametrize(("answer", "message"), [
    ('{"code": 0, "data": []}', "not TDengine's REST shape"),  # no column_meta
    ('{"code": 0, "column_meta": [["ts"]], "data": []}', "not TDengine's REST shape"),
    ('{"code": 0, "column_meta": [["ts", "TIMESTAMP", "x"]], "data": []}', "not TDengine's REST shape"),
    ('[1, 2]', "not TDengine's REST shape"),
    ('not json', "did not answer"),
    ('{"code": 912, "desc": "Table does not exist"}', "Table does not exist"),
])
def test_a_leaders_answer_is_taken_only_in_tdengines_rest_shape(answer: str, message: str) -> None:
    """What the leading broker's HTTP front answers a forwarded text becomes this broker's
    answer: its error as it is, anything not in TDengine's REST shape an SqlError (never a
    broker fault answered as HTTP 500)."""
    async def run() -> None:
        app = web.Application()

        async def sql(_request: web.Request) -> web.Response:
            return web.Response(text=answer)

        app.router.add_post("/rest/sql/{db}", sql)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        membership = SimpleNamespace(view=SimpleNamespace(brokers={2: SimpleNamespace(http=f"127.0.0.1:{port}")}),
                                     on_change=[], outboxes=Outboxes())
        cluster = ClusterSql(1, membership, None, None, None, None, None, 5.0, 5.0)  # type: ignore[arg-type]
        try:
            with pytest.raises(SqlError, match=message) as raised:
                await cluster.forward(2, "SELECT * FROM t", "db", Caller())
            if "code" in answer and "912" in answer:
                assert raised.value.code == 912
        finally:
            await runner.cleanup()

    asyncio.run(run())
