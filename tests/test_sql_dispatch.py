"""broker/sql/executor.py sends each statement to its handler by explicit tables (issue 27):
every statement class and SHOW kind has one (a new one cannot ship without), and one node runs
SQL as a cluster of one (broker/sql/local.py): one code path, with the answers of before."""

from __future__ import annotations

import asyncio
import inspect
import typing
from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.sql import ast, show
from tmqgate.broker.sql.executor import HANDLERS, THROUGH_CLUSTER
from tmqgate.broker.sql.local import LocalSql
from tmqgate.broker.sql.parser import parse_script
from tmqgate.broker.sql.routing import led_elsewhere
from tmqgate.broker.tdengine import SqlError

#: statements with no handler: USE is the loop's own (it changes the session's database)
_NOT_HANDLED = {ast.UseDatabase}


def test_every_statement_class_has_a_handler() -> None:
    classes = {cls for _, cls in inspect.getmembers(ast, inspect.isclass)
               if issubclass(cls, ast.Statement) and cls is not ast.Statement and cls.__module__ == ast.__name__}
    assert ast.CreateDatabase in classes and ast.DropConsumerGroup in classes  # the walk finds them
    assert set(HANDLERS) == classes - _NOT_HANDLED, set(HANDLERS) ^ (classes - _NOT_HANDLED)
    assert set(THROUGH_CLUSTER) == {ast.CreateDatabase, ast.DropDatabase, ast.CreateTopic, ast.DropTopic}


def test_every_show_kind_has_a_handler() -> None:
    kinds = set(typing.get_args(typing.get_type_hints(ast.Show)["what"]))
    assert kinds and kinds == set(show.SHOWS), kinds ^ set(show.SHOWS)


def test_one_node_is_a_cluster_of_one(tmp_path: Path) -> None:
    """The executor's cluster is this node's own: no database is led elsewhere, and a short
    text through execute_async runs without yielding to the loop (as `execute` does) and
    answers what `execute` answers, refusals included."""

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            # the one-node roles' LocalSql (broker/runtime/roles.py), as the executor's own
            assert isinstance(ex.cluster, LocalSql) and isinstance(ex.local, LocalSql)
            text = ("CREATE DATABASE w VGROUPS 2; CREATE STABLE w.st (ts TIMESTAMP, v INT) TAGS (g INT); "
                    "INSERT INTO w.t1 USING w.st TAGS (1) VALUES (1700000000000, 1); "
                    "CREATE TOPIC q AS SELECT ts, v FROM w.st; DROP TOPIC q; CREATE TOPIC q2 AS DATABASE w")
            assert led_elsewhere(ex.cluster, parse_script(text), None) is None
            assert ex.cluster.leader("w") is None and ex.cluster_of("w") is ex.local
            running = ex.execute_async(text)
            with pytest.raises(StopIteration) as done:  # finished at its first step: never suspended
                running.send(None)
            assert done.value.value.rows == [[0]]
            assert [r[0] for r in ex.execute("SHOW TOPICS").rows] == ["q2"]
            assert ex.execute("SHOW w.TABLES").rows == [["t1", "w", "st", 1]]
            for bad in ("SELECT ts FROM w.nope", "DROP DATABASE w", "CREATE DATABASE w", "DROP TOPIC nope", "USE x",
                        "SHOW TABLES", ""):
                with pytest.raises(SqlError) as in_place:
                    ex.execute(bad)
                with pytest.raises(SqlError) as on_loop:
                    await ex.execute_async(bad)
                assert (on_loop.value.message, on_loop.value.code) == (in_place.value.message, in_place.value.code)
            # a SELECT answers the same in place and on the loop (where it runs off the loop)
            query = "SELECT ts, v FROM w.st"
            assert (await ex.execute_async(query)).rows == ex.execute(query).rows == [[1700000000000, 1]]
            await ex.execute_async("DROP TOPIC q2; DROP DATABASE w")
            assert broker.store.get_database("w") is None and broker.topics.get("w") is None
            assert ex.execute("SHOW DATABASES").rows == []
        finally:
            await broker.stop()

    asyncio.run(go())
