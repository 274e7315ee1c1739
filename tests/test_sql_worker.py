"""Long SQL texts are parsed in a worker process, and what runs on the event loop runs in
bounded steps (issue 11: CPU-heavy work never blocks the Kafka listener for more than a few
ms; bench/listener_stall.py measures it).

What a user would check: the statements are those the in-process parser makes, errors keep
their message and position, a parse that takes too long or a worker that dies fails that
one text only and the next gets a new worker, and a long INSERT or a view read gives exactly
what it gave before.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.sql import ast
from tmqgate.broker.sql.insert import insert_async
from tmqgate.broker.sql.parser import MAX_QUERY_NODES, parse_script
from tmqgate.broker.sql.views import View
from tmqgate.broker.sql.worker import ParseTimeout, ParseWorker, ParseWorkerDied
from tmqgate.broker.tdengine import SqlError
from tmqgate.broker.tsdb.rows import decode_rows

# Every statement kind, an INSERT with NOW arithmetic and USING TAGS, topics with trees.
SCRIPT = """
CREATE DATABASE IF NOT EXISTS w VGROUPS 3 WAL_RETENTION_PERIOD 60 PRECISION 'ms';
USE w;
CREATE STABLE st (ts TIMESTAMP, v DOUBLE, s NCHAR(8)) TAGS (g INT, loc BINARY(16));
CREATE TABLE c1 USING st TAGS (1, 'x');
CREATE TABLE c2 USING st (g) TAGS (2) c3 USING st TAGS (3, 'y');
ALTER STABLE st ADD COLUMN k BIGINT;
ALTER STABLE st ADD TAG z INT;
INSERT INTO c1 VALUES (NOW, 1.5, 'a', 1) (NOW + 1s, -2, NULL, 2)
  w.c4 USING w.st TAGS (4, 'z', 9) (ts, v) VALUES (1700000000000, 3.25);
CREATE TOPIC tq AS SELECT ts, v * 2 AS v2, loc FROM w.st WHERE v > 1 AND loc MATCH '^x';
CREATE TOPIC IF NOT EXISTS ts_topic WITH META AS STABLE w.st WHERE g > 1;
CREATE TOPIC td AS DATABASE w;
SELECT ts, v FROM w.st WHERE v > 0;
SHOW TABLES; DESCRIBE w.c1;
DROP TOPIC IF EXISTS tq; DROP CONSUMER GROUP IF EXISTS cg ON td;
DROP TABLE IF EXISTS c3; DROP STABLE IF EXISTS st; DROP DATABASE IF EXISTS w
"""


def long_insert(rows: int, table: str = "w.c1", ts0: int = 1_700_000_000_000) -> str:
    values = " ".join(f"({ts0 + i}, {i * 0.5}, 's{i % 7}')" for i in range(rows))
    return f"INSERT INTO {table} USING w.st TAGS (1, 'loc') VALUES {values}"


def slow_text(kib: int) -> str:
    """A long select list: ~10 ms of parsing per KiB."""
    return "SELECT " + ",".join(f"c{i}" for i in range(kib * 128)) + " FROM d.t"


def test_statements_and_errors_pickle() -> None:
    """The worker sends statements and SqlErrors back pickled: every statement kind comes
    back equal, the query trees too, and an error keeps message, position and code."""
    statements = parse_script(SCRIPT)
    assert {type(s).__name__ for s in statements} >= {
        "CreateDatabase", "UseDatabase", "CreateStable", "CreateTable", "CreateTables",
        "AlterStableAddColumn", "AlterStableAddTag", "Insert", "CreateTopic", "Select", "Show",
        "Describe", "DropTopic", "DropConsumerGroup", "DropTable", "DropStable", "DropDatabase"}
    back = pickle.loads(pickle.dumps(statements, pickle.HIGHEST_PROTOCOL))
    assert back == statements
    trees = [(s.select, s.where) for s in statements if isinstance(s, ast.CreateTopic)]
    trees_back = [(s.select, s.where) for s in back if isinstance(s, ast.CreateTopic)]
    assert [tuple(t and t.sql() for t in pair) for pair in trees_back] == \
        [tuple(t and t.sql() for t in pair) for pair in trees]
    for text in ("SELECT FROM", "CREATE DATABASE `a b`", "INSERT INTO t VALUES (1, 'x"):
        with pytest.raises(SqlError) as caught:
            parse_script(text)
        err = pickle.loads(pickle.dumps(caught.value))
        assert (type(err), err.message, err.position, err.code) == \
            (SqlError, caught.value.message, caught.value.position, caught.value.code)


def test_long_text_is_parsed_in_the_worker_process() -> None:
    """The statements come from another process and equal the in-process parse (a 6,000-row
    INSERT travels back in pieces); a parse error comes back as the same SqlError."""
    text = SCRIPT + ";" + long_insert(6000)

    async def go() -> None:
        worker = ParseWorker(timeout_s=60)
        try:
            pid = await worker.pid()
            assert pid != os.getpid()
            got = await worker.parse(text)
            assert got == parse_script(text)
            assert await worker.pid() == pid  # one worker, reused
            bad = text + " garbage"
            with pytest.raises(SqlError) as in_process:
                parse_script(bad)
            with pytest.raises(SqlError) as in_worker:
                await worker.parse(bad)
            assert (in_worker.value.message, in_worker.value.position) == \
                (in_process.value.message, in_process.value.position)
        finally:
            worker.close()

    asyncio.run(go())


def test_parse_timeout_stops_the_worker_and_the_next_text_gets_a_new_one() -> None:
    async def go() -> None:
        worker = ParseWorker(timeout_s=0.3)
        try:
            pid = await worker.pid()
            with pytest.raises(ParseTimeout, match="over 300 ms"):
                await worker.parse(slow_text(600))  # seconds of parsing
            with pytest.raises(ProcessLookupError):  # the timed-out worker was stopped
                os.kill(pid, 0)
            assert await worker.parse("SHOW DATABASES;" * 100) == parse_script("SHOW DATABASES;" * 100)
            assert await worker.pid() != pid
        finally:
            worker.close()

    asyncio.run(go())


def test_killed_worker_is_replaced_and_the_text_parsed_again() -> None:
    """kill -9 of the worker while it parses: a new worker parses the text again; a text on
    which the worker dies twice (here: it aborts) is answered ParseWorkerDied; the next text
    is parsed."""

    async def go() -> None:
        worker = ParseWorker(timeout_s=60)
        try:
            pid = await worker.pid()
            text = long_insert(20_000)
            parsing = asyncio.ensure_future(worker.parse(text))
            await asyncio.sleep(0.3)
            os.kill(pid, signal.SIGKILL)
            assert await parsing == parse_script(text)
            second = await worker.pid()
            assert second not in (pid, os.getpid())
            os.kill(second, signal.SIGKILL)  # idle: the next text is not lost either
            small = long_insert(100)
            assert await worker.parse(small) == parse_script(small)
            with pytest.raises(ParseWorkerDied, match="died twice on this text .*exit code -6"):
                await worker.run(os.abort)
            assert await worker.parse(small) == parse_script(small)
        finally:
            worker.close()

    asyncio.run(go())


def test_a_text_left_pending_in_a_dead_pool_goes_to_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """pebble's race: an idle worker dies and a text is scheduled just before the pool notices;
    the pool stops with the text queued and its future is never settled. The text is taken
    back and parsed by a new pool (here the first schedule hands out a future nobody settles
    and the pool is stopped under it)."""
    from pebble import ProcessFuture, ProcessPool

    async def go() -> None:
        worker = ParseWorker(timeout_s=60)
        try:
            first = await worker.pid()
            pool = worker._get_pool()
            real_schedule = ProcessPool.schedule

            def lost(self: ProcessPool, *args: object, **kwargs: object) -> ProcessFuture:
                monkeypatch.setattr(ProcessPool, "schedule", real_schedule)
                self.stop()
                return ProcessFuture()

            monkeypatch.setattr(ProcessPool, "schedule", lost)
            small = long_insert(100)
            assert await asyncio.wait_for(worker.parse(small), 30) == parse_script(small)
            assert worker._get_pool() is not pool
            assert await worker.pid() not in (first, os.getpid())
        finally:
            worker.close()

    asyncio.run(go())


def test_query_trees_are_bounded() -> None:
    """A query of more than MAX_QUERY_NODES nodes is refused where it starts (its tree would
    be rebuilt and compiled on the event loop); a topic's usual query is far below."""
    small = f"CREATE TOPIC t AS SELECT {', '.join(f'c{i}' for i in range(100))} FROM d.st WHERE c1 > 0"
    assert isinstance(parse_script(small)[0], ast.CreateTopic)
    big = "CREATE TOPIC t AS SELECT " + ", ".join(f"c{i}" for i in range(MAX_QUERY_NODES)) + " FROM d.st"
    with pytest.raises(SqlError, match=f"query too complex at position 18: more than {MAX_QUERY_NODES}"):
        parse_script(big)


def _rows(broker: Broker, db: str) -> list[dict]:
    """Every row in the database's WAL, as dicts, in WAL order (tbname aside)."""
    out = []
    for vnode in range(broker.store.get_database(db).vgroups):
        for entry in broker.store.read_entries(db, vnode, 0, 1 << 30):
            if entry.kind == "rows":
                out += [{k: v for k, v in row.items() if k != "tbname"}
                        for row in decode_rows(entry.data).to_pylist()]
    return out


def test_long_insert_writes_what_it_wrote_in_place(tmp_path: Path) -> None:
    """A 30,000-row INSERT, and one of 6,000 VALUES clauses that create 3,000 child tables,
    through execute_async (parsed in the worker, checked in steps) write the same rows and
    tables as the same INSERTs run in place; a failed one writes nothing."""

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            for db in ("w", "w2"):
                ex.execute(f"CREATE DATABASE {db} VGROUPS 2")
                ex.execute(f"CREATE STABLE {db}.st (ts TIMESTAMP, v DOUBLE, s NCHAR(8)) TAGS (g INT, loc BINARY(16))")
            text = long_insert(30_000)
            assert (await ex.execute_async(text)).rows == [[30_000]]
            assert ex.execute(text.replace("w.", "w2.")).rows == [[30_000]]
            assert _rows(broker, "w") == _rows(broker, "w2")
            assert len(_rows(broker, "w")) == 30_000
            # 3,000 VALUES clauses, each creating its child table (and one more row for each)
            many = "INSERT INTO " + " ".join(
                f"w.m{i} USING w.st TAGS ({i}, 'x') VALUES ({1_600_000_000_000 + i}, {i}, 'a') "
                f"w.m{i} VALUES ({1_600_000_000_001 + i}, -{i}, 'b')" for i in range(3000))
            assert (await ex.execute_async(many)).rows == [[6000]]
            assert ex.execute(many.replace("w.", "w2.")).rows == [[6000]]
            assert _rows(broker, "w") == _rows(broker, "w2")
            assert broker.store.child_tables("w2").keys() == broker.store.child_tables("w").keys()
            assert len(broker.store.child_tables("w")) == 3001
            # a failed long INSERT writes nothing, and says which value
            bad = long_insert(5000, "w.c9").replace("'s3'", "'much too long for nchar 8'", 1)
            with pytest.raises(SqlError, match="Invalid value for column s"):
                await ex.execute_async(bad)
            assert "c9" not in broker.store.child_tables("w")
        finally:
            await broker.stop()

    asyncio.run(go())


def test_view_read_async_returns_what_read_returns(tmp_path: Path) -> None:
    """A view read in steps off the loop (read_async, what Fetch uses) returns the same
    records as the in-place read, for a query topic and a database topic, from any version
    and any size — all of them, read on from where each read stopped (its steps are sized to
    the bytes asked for, so it may stop inside a run where the in-place read goes on), and
    the same batches byte for byte when the size does not bound it; and it stops at the
    version it is given."""

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            ex.execute("CREATE DATABASE w VGROUPS 2")
            ex.execute("CREATE STABLE w.st (ts TIMESTAMP, v DOUBLE, s NCHAR(8)) TAGS (g INT, loc BINARY(16))")
            for i in range(30):  # 30 entries of 1,000 rows, and a second supertable between
                ex.execute(long_insert(1000, ts0=1_700_000_000_000 + i * 1000))
                if i == 10:
                    ex.execute("CREATE STABLE w.other (ts TIMESTAMP, x INT) TAGS (g INT)")
                    ex.execute("INSERT INTO w.c1x USING w.other TAGS (1) VALUES (1700000000000, 1)")
            ex.execute("CREATE TOPIC q AS SELECT ts, v * 2 AS v2, loc FROM w.st WHERE v > 100")
            ex.execute("CREATE TOPIC a AS DATABASE w")
            for name in ("q", "a"):
                topic = broker.topics.get(name)
                vnode = broker.store.child_tables("w")["c1"].vnode
                end = broker.store.next_version("w", vnode)
                for start, max_bytes in ((0, 1 << 20), (0, 1 << 12), (end - 10, 1 << 20)):
                    expect = topic.view.read(vnode, start, max_bytes)
                    assert expect, (name, start)
                    want = _records(expect)
                    have: list[tuple[int, bytes | None, bytes | None]] = []
                    offset = start
                    while len(have) < len(want):
                        got = await topic.view.read_async(vnode, offset, max_bytes, budget_s=None)
                        assert got, (name, offset)
                        have += _records(got)
                        offset = max(_last_offsets(got)) + 1
                    assert have[:len(want)] == want, (name, start, max_bytes)
                assert await topic.view.read_async(vnode, 0, 1 << 30, budget_s=None) == topic.view.read(
                    vnode, 0, 1 << 30)
                # `end` (the Fetch's high watermark): what was appended from there is not read
                before = topic.view.read(vnode, 0, 1 << 30)
                ex.execute(long_insert(10, ts0=1_800_000_000_000))
                assert await topic.view.read_async(vnode, 0, 1 << 30, end, budget_s=None) == before
                assert max(_last_offsets(before)) == end - 1
                assert max(_last_offsets(await topic.view.read_async(vnode, 0, 1 << 30))) == end + 9
        finally:
            await broker.stop()

    asyncio.run(go())


def test_a_selective_view_evaluates_runs_across_wal_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A selective query topic read as Fetch reads it (read_async, from where the last read
    stopped) lets a run of rows entries go on from one WAL chunk into the next while the
    response has room for it: fewer, longer evaluation steps than one per chunk, and still
    exactly the records the in-place read gives, every version covered once."""
    from tmqgate.broker.sql import views

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            ex.execute("CREATE DATABASE w VGROUPS 1")
            ex.execute("CREATE STABLE w.st (ts TIMESTAMP, v DOUBLE, s NCHAR(8)) TAGS (g INT, loc BINARY(16))")
            for i in range(48):  # 48 entries of 1,000 rows; v < 50 picks 100 rows of each
                ex.execute(long_insert(1000, ts0=1_700_000_000_000 + i * 1000))
            ex.execute("CREATE TOPIC sel AS SELECT ts, v FROM w.st WHERE v < 50")
            topic = broker.topics.get("sel")
            end = broker.store.next_version("w", 0)
            want = _records(topic.view.read(0, 0, 1 << 30))
            assert len(want) == 4800

            async def fetch_all(max_bytes: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
                topic.view.invalidate()
                topic.view._bytes_per_row = None  # as a new view: no step measured yet
                steps = 0
                evaluate = views._run_batch

                def counted(*args: object) -> bytes | None:
                    nonlocal steps
                    steps += 1
                    return evaluate(*args)  # type: ignore[arg-type]

                monkeypatch.setattr(views, "_run_batch", counted)
                have = await _read_on(topic.view, 0, 0, end, max_bytes)
                monkeypatch.setattr(views, "_run_batch", evaluate)
                return have, steps

            chunk = 1 << 17  # a WAL chunk of about four entries
            carried, carried_steps = await fetch_all(chunk)
            with monkeypatch.context() as m:
                m.setattr(views.View, "_expected", lambda self, rows: None)  # a run per chunk
                plain, plain_steps = await fetch_all(chunk)
            assert carried == plain == want
            assert plain_steps >= 12 and carried_steps < plain_steps, (carried_steps, plain_steps)
        finally:
            await broker.stop()

    asyncio.run(go())


def test_a_view_reads_small_entries_of_two_schema_versions_exactly(tmp_path: Path) -> None:
    """Rows entries of one to three rows (a source writing line by line), some written under an
    older schema of the supertable (without column k: it reads as null), with another
    supertable's entries between: a query topic delivers exactly the rows its filter picks,
    their versions as offsets, read from inside an entry on, in one read or in many small ones
    (consecutive entries of one schema version are decoded together, then conformed)."""
    import json

    from tmqgate.broker.tsdb.rows import build_rows_table
    from tmqgate.broker.tsdb.types import Column, StableSchema, parse_type

    ts_col, v_col, k_col = (Column(n, parse_type(t)) for n, t in (("ts", "TIMESTAMP"), ("v", "DOUBLE"),
                                                                  ("k", "BIGINT")))
    now, old = StableSchema("st", [ts_col, v_col, k_col], []), StableSchema("st", [ts_col, v_col], [])
    other = StableSchema("o", [ts_col, Column("x", parse_type("INT"))], [])

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            ex.execute("CREATE DATABASE w VGROUPS 1")
            ex.execute("CREATE STABLE w.st (ts TIMESTAMP, v DOUBLE, k BIGINT) TAGS (g INT)")
            ex.execute("CREATE STABLE w.o (ts TIMESTAMP, x INT) TAGS (g INT)")
            ex.execute("INSERT INTO w.c1 USING w.st TAGS (1) VALUES (1600000000000, 0.5, 1)")
            ex.execute("INSERT INTO w.d1 USING w.o TAGS (1) VALUES (1600000000000, 1)")
            ex.execute("CREATE TOPIC small AS SELECT ts, v, k FROM w.st WHERE v > 1")
            written: list[tuple[int, int, float, int | None]] = []  # version, ts, v, k
            first = None
            for i in range(300):
                n = 1 + i % 3
                schema = old if i % 7 in (2, 3) else now  # runs of the older schema among the newer
                ts = [1_700_000_000_000 + 10 * i + j for j in range(n)]
                v = [(i * 3 + j) % 8 * 0.5 for j in range(n)]
                cols: dict[str, list[int] | list[float]] = {"ts": ts, "v": v}
                if schema is now:
                    cols["k"] = [i * 10 + j for j in range(n)]
                base = ex.append_rows_many("w", 0, [("st", build_rows_table(schema, ["c1"] * n, cols))])
                first = base if first is None else first
                written += [(base + j, ts[j], v[j], cols["k"][j] if "k" in cols else None) for j in range(n)]
                if i % 11 == 5:  # another supertable's entry ends the run
                    ex.append_rows_many("w", 0, [("o", build_rows_table(other, ["d1"], {"ts": [ts[0]], "x": [i]}))])
            end = broker.store.next_version("w", 0)
            assert first is not None
            start = first + 1  # inside the first entry (three rows)
            want = [(ver, b"c1", json.dumps({"ts": ts, "v": v, "k": k}, separators=(",", ":")).encode())
                    for ver, ts, v, k in written if ver >= start and v > 1]
            assert {k is None for _, _, v, k in written if v > 1} == {True, False}
            view = broker.topics.get("small").view
            for max_bytes in (1 << 20, 300):
                assert await _read_on(view, 0, start, end, max_bytes) == want, max_bytes
        finally:
            await broker.stop()

    asyncio.run(go())


async def _read_on(view: View, vnode: int, start: int, end: int,
                   max_bytes: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """The records of a view from `start` to `end`, read as Fetch reads (read_async, each read
    from where the last one stopped); every read starts where it was asked and its batches
    follow one another, so every version is covered once."""
    from tmqgate.protocol.records import iter_batches

    have: list[tuple[int, bytes | None, bytes | None]] = []
    offset = start
    while offset < end:
        got = await view.read_async(vnode, offset, max_bytes, end, budget_s=None)
        spans = [(h.base_offset, h.base_offset + h.last_offset_delta) for b in got for h in iter_batches(b)]
        assert spans[0][0] == offset
        assert all(a[1] + 1 == b[0] for a, b in zip(spans, spans[1:], strict=False))
        have += _records(got)
        offset = spans[-1][1] + 1
    return have


def _records(batches: list[bytes]) -> list[tuple[int, bytes | None, bytes | None]]:
    from tmqgate.protocol.records import decode_records, iter_batches

    out = []
    for b in batches:
        for h in iter_batches(b):
            if h.record_count:
                out += [(r.offset, r.key, r.value) for r in decode_records(b)]
    return out


def _last_offsets(batches: list[bytes]) -> list[int]:
    from tmqgate.protocol.records import iter_batches

    return [h.base_offset + h.last_offset_delta for b in batches for h in iter_batches(b)]


def test_long_insert_checks_again_when_the_table_changes_meanwhile(tmp_path: Path) -> None:
    """The loop runs other statements while a long INSERT is checked: if one of them changes
    a table the INSERT writes to (here a column is added), the INSERT is checked again against
    the new schema before anything is written; if it drops the supertable, the INSERT is
    refused and writes nothing."""

    async def go() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
        await broker.start()
        try:
            ex = broker.executor
            ex.execute("CREATE DATABASE w VGROUPS 1")
            ex.execute("CREATE STABLE w.st (ts TIMESTAMP, v DOUBLE, s NCHAR(8)) TAGS (g INT, loc BINARY(16))")
            [stmt] = parse_script(long_insert(10_000).replace(" VALUES ", " (ts, v, s) VALUES "))
            assert isinstance(stmt, ast.Insert)
            inserting = asyncio.ensure_future(insert_async(ex, stmt, None))
            await asyncio.sleep(0)  # the INSERT has checked its first rows and yielded
            assert not inserting.done()
            ex.execute("ALTER STABLE w.st ADD COLUMN extra INT")
            assert (await inserting).rows == [[10_000]]
            [entry] = [e for e in broker.store.read_entries("w", 0, 0, 1 << 30) if e.kind == "rows"]
            table = decode_rows(entry.data)
            assert table.num_rows == 10_000 and "extra" in table.column_names
            assert table.column("extra").null_count == 10_000
            # a supertable dropped meanwhile: the INSERT is refused, nothing written
            [other] = parse_script(long_insert(10_000, "w.c2").replace(" VALUES ", " (ts, v, s) VALUES "))
            inserting = asyncio.ensure_future(insert_async(ex, other, None))
            await asyncio.sleep(0)
            ex.execute("DROP STABLE w.st")
            with pytest.raises(SqlError, match="STable not exist: w.st"):
                await inserting
            assert "c2" not in broker.store.child_tables("w")
            assert [e.kind for e in broker.store.read_entries("w", 0, 0, 1 << 30)].count("rows") == 1
        finally:
            await broker.stop()

    asyncio.run(go())
