"""SELECT over the rows stored in a database's vnodes, run by DuckDB (issue 29).

Why this shape: the rows entries are Arrow IPC already, so DuckDB scans them where they lie
(zero-copy), and its vectorised, multi-threaded engine does the filtering, aggregation and
windows; TDengine's syntax becomes DuckDB SQL in broker/sql/translate.py.

Rules:
- The loop only reads the WAL (in chunks of READ_CHUNK_BYTES, yielding between them), and
  only the entries that can hold a matching row: from the first entry the time index says
  reaches the WHERE's lower time bound, and of those only the ones whose header's min and max
  timestamps meet the bounds. Every vnode is read: a child table's rows lie where its producers put them (a
  Kafka producer picks the partition), so the vnode it was made on may hold only some of
  them. Rows of aborted transactions and of open ones (past the last stable offset) are never
  read, as a read_committed consumer.
- Decoding, the engine and the answer's values run in the query pool, off the loop.
- Bounded: at most `max_bytes` of entries are read, DuckDB works within `memory_limit`
  (refusing past it), a query is interrupted after `timeout_s`, and an answer has at most
  MAX_RESULT_ROWS rows; each failure is a SqlError saying which bound was hit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SelectLimits, SqlContext, find_database
from tmqgate.broker.sql.result import Result
from tmqgate.broker.sql.translate import Plan, translate
from tmqgate.broker.tsdb.catalog import STABLE_METADATA_KEY
from tmqgate.broker.tsdb.rows import arrow_schema, conform, schema_message
from tmqgate.broker.tsdb.types import (
    BIGINT,
    BOOL,
    DOUBLE,
    FLOAT,
    INT,
    SMALLINT,
    TINYINT,
    UBIGINT,
    UINT,
    USMALLINT,
    UTINYINT,
    StableSchema,
    TDType,
    varchar,
)

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog

READ_CHUNK_BYTES = 1 << 20  # ~1.5 ms of LevelDB reading on the loop per step
MAX_RESULT_ROWS = 1_000_000
QUERY_THREADS = 2

Payload = bytes  # a rows entry's Arrow IPC bytes, as the WAL hands them out

#: a result column's TDengine type from its Arrow type, where TDengine does not fix it
_ARROW_TYPES: dict[pa.DataType, TDType] = {t.arrow: t for t in (BOOL, TINYINT, SMALLINT, INT, BIGINT, UTINYINT,
                                                                  USMALLINT, UINT, UBIGINT, FLOAT, DOUBLE)}

_pool: ThreadPoolExecutor | None = None


def query_pool() -> ThreadPoolExecutor:
    """The SELECTs' own threads (made on first use), apart from the views' and the loop's."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="tmqgate-select")
    return _pool


def _table(sql: SqlContext, db: str, name: str) -> tuple[StableSchema, str | None]:
    """(supertable schema, child table or None) of the table a SELECT names."""
    catalog: TsdbCatalog = sql.catalog
    stable = catalog.find_stable(db, name)
    if stable is not None:
        schema = catalog.schema(db, stable)
        assert schema is not None
        return schema, None
    child = sql.store.child_table(db, name)
    if child is None:
        low = name.lower()
        child = next((c for n, c in sql.store.child_tables(db).items() if n.lower() == low), None)
    if child is None:
        raise SqlError(f"Table does not exist: {name}", code=0x2662)
    schema = catalog.schema(db, child.stable)
    assert schema is not None
    return schema, child.name


_engines: dict[tuple[int, int], duckdb.DuckDBPyConnection] = {}
_engines_lock = threading.Lock()


def _engine(limits: SelectLimits) -> duckdb.DuckDBPyConnection:
    """The process's in-memory DuckDB for these bounds (opening one takes ~25 ms; a query
    takes a connection of its own from it, ~1 ms). Its memory limit holds for the queries
    running at once (at most QUERY_THREADS); nothing reaches files or the network."""
    key = (limits.memory_bytes, limits.threads)
    with _engines_lock:
        found = _engines.get(key)
        if found is None:
            found = _engines[key] = duckdb.connect(config={
                "memory_limit": f"{limits.memory_bytes}B", "threads": limits.threads,
                "enable_external_access": False})
        return found


def _prepare(sql: SqlContext, stmt: ast.Select, db: str | None) -> tuple[Any, StableSchema, Plan, list[int]]:
    """(database, supertable schema, plan, vnodes to read) of a SELECT."""
    info = find_database(sql.store, stmt.db or db)
    schema, child = _table(sql, info.name, stmt.table)
    plan = translate(stmt, schema, child)
    # every vnode: a child table's rows are where its producers put them (a Kafka producer
    # picks the partition), not only on the vnode it was made on
    return info, schema, plan, list(range(info.vgroups))


async def select_async(sql: SqlContext, stmt: ast.Select, db: str | None, _caller: Caller) -> Result:
    """Run a SELECT: the WAL read here in chunks (the loop serves others between them), the
    entries then decoded and the engine run in the query pool. (Decoding each chunk in the
    pool while the loop read the next was measured slower: the threads fought over the GIL.)"""
    info, schema, plan, vnodes = _prepare(sql, stmt, db)
    limits = sql.select_limits
    payloads: list[Payload] = []
    for chunk in _read(sql, info, vnodes, plan, limits):
        payloads += chunk
        await asyncio.sleep(0)
    tags = sql.catalog.tag_table(info.name, schema.name) if plan.needs_tags else None
    cancelled = threading.Event()
    try:
        return await asyncio.get_running_loop().run_in_executor(
            query_pool(), run, plan, schema, payloads, tags, limits, cancelled)
    finally:
        cancelled.set()


def select(sql: SqlContext, stmt: ast.Select, db: str | None, _caller: Caller) -> Result:
    """`select_async` in the caller's thread (`Executor.execute`, off any loop)."""
    info, schema, plan, vnodes = _prepare(sql, stmt, db)
    payloads = [p for chunk in _read(sql, info, vnodes, plan, sql.select_limits) for p in chunk]
    tags = sql.catalog.tag_table(info.name, schema.name) if plan.needs_tags else None
    return run(plan, schema, payloads, tags, sql.select_limits)


def _read(sql: SqlContext, info: Any, vnodes: list[int], plan: Plan, limits: SelectLimits) -> Iterator[list[Payload]]:
    """The payloads of the rows entries the query may need, a chunk of about READ_CHUNK_BYTES
    at a time."""
    total = 0
    store = sql.store
    db: str = info.name
    for vnode in vnodes:
        upto = store.last_stable_offset(db, vnode)
        version = store.log_start(db, vnode)
        if plan.ts_low is not None:
            # the time index: every entry before the first whose running max timestamp reaches
            # ts_low holds only older rows, so the read starts there (not even their headers)
            found = store.offset_for_timestamp(db, vnode, plan.ts_low)
            if found is None:
                continue
            version = max(version, found[0])
        aborted = store.aborted_rows(db, vnode, version, upto) if upto > version else set()
        while version < upto:
            if store.get_database(db) is not info:  # dropped (and made again) meanwhile
                raise SqlError(f"Database not exist: {db}")
            entries, version = store.rows_in_range(db, vnode, version, upto, plan.ts_low, plan.ts_high,
                                                   READ_CHUNK_BYTES)
            chunk: list[Payload] = []
            for base, data in entries:
                if base in aborted:
                    continue
                total += len(data)
                if total > limits.max_bytes:
                    raise SqlError(f"the query would read more than {limits.max_bytes} bytes of rows "
                                   "(sql_select_max_bytes): narrow it by time range or tbname")
                chunk.append(data)
            yield chunk


def run(plan: Plan, schema: StableSchema, payloads: list[Payload], tags: pa.Table | None,
        limits: SelectLimits | None = None, cancelled: threading.Event | None = None) -> Result:
    """Decode the entries of `schema`'s supertable, run the plan, answer (pure: no store)."""
    target = arrow_schema(schema)
    return execute(plan, target, decode(schema, target, payloads, cancelled), tags, limits)


def decode(schema: StableSchema, target: pa.Schema, payloads: list[Payload],
           cancelled: threading.Event | None = None) -> list[pa.RecordBatch]:
    """The rows of `schema`'s supertable in `payloads` (entries of others skipped), each
    conformed to the schema of now (`target`: its Arrow schema).

    An entry is an IPC stream of a schema message and one record batch, and the entries of a
    supertable share a handful of schema messages: each is read once (by its bytes), then
    every batch is read against it alone — 7 µs an entry against 20 µs for a stream reader
    and 37 µs for reading a table (measured, 1,000-row entries)."""
    name = schema.name.encode()
    plain = target.remove_metadata()
    schemas: dict[bytes, pa.Schema | None] = {}  # schema message → its schema; None: another supertable's
    batches = []
    for data in payloads:
        if cancelled is not None and cancelled.is_set():
            raise SqlError("the query was cancelled")
        head = schema_message(data)
        if head is None:  # not the stream format entries are written in
            raise SqlError("a rows entry is not an Arrow IPC stream")
        start = len(head)  # the record batch's message
        if head not in schemas:
            found = pa.ipc.open_stream(data).schema
            schemas[head] = found if (found.metadata or {}).get(STABLE_METADATA_KEY) == name else None
        written = schemas[head]
        if written is None:
            continue
        if written.equals(target):
            batches.append(pa.ipc.read_record_batch(pa.py_buffer(data).slice(start), plain))
        else:  # written under an older schema
            batch = pa.ipc.read_record_batch(pa.py_buffer(data).slice(start), written)
            batches.extend(conform(pa.Table.from_batches([batch]), schema, target).to_batches())
    return batches


def execute(plan: Plan, target: pa.Schema, batches: list[pa.RecordBatch], tags: pa.Table | None,
            limits: SelectLimits | None = None) -> Result:
    """Run the plan over the decoded rows in DuckDB; the answer."""
    limits = limits or SelectLimits()
    rows = pa.Table.from_batches(batches, schema=target.remove_metadata())
    con = _engine(limits).cursor()  # its own connection: `rows` and `tags` are its alone
    timer = threading.Timer(limits.timeout_s, con.interrupt)
    try:
        con.register("rows", rows)
        if tags is not None:
            con.register("tags", tags)
        timer.start()
        try:
            reader = con.sql(plan.sql).to_arrow_reader()
            batches = []
            count = 0
            for batch in reader:
                count += batch.num_rows
                if count > MAX_RESULT_ROWS:
                    raise SqlError(f"the result has more than {MAX_RESULT_ROWS} rows: add LIMIT or narrow the query")
                batches.append(batch)
            result = pa.Table.from_batches(batches, schema=reader.schema)
        except duckdb.InterruptException:
            raise SqlError(f"the query ran longer than {limits.timeout_s:g} s (sql_select_timeout_ms)") from None
        except duckdb.OutOfMemoryException:
            raise SqlError(f"the query needs more memory than {limits.memory_bytes} bytes "
                           "(sql_select_memory_bytes)") from None
        except duckdb.Error as e:
            raise SqlError(f"query failed: {str(e).splitlines()[0]}") from None
    finally:
        timer.cancel()
        con.close()
    return _answer(plan, result)


def _answer(plan: Plan, result: pa.Table) -> Result:
    """The result as TDengine's REST answer: names as written, TDengine's types."""
    columns: list[tuple[str, str, int]] = []
    values: list[list[Any]] = []
    for i, name in enumerate(plan.names):
        col = result.column(i)
        t = plan.types[i]
        if t is None or (t.is_numeric and col.type not in _ARROW_TYPES) or (
                t.is_string and not pa.types.is_string(col.type)):
            t = DOUBLE if pa.types.is_decimal(col.type) else _ARROW_TYPES.get(col.type)
            if t is None:
                t = varchar(max([len(str(v)) for v in col.to_pylist() if v is not None] + [1]))
        values.append(_values(col, t))
        columns.append((name, t.name, t.length or t.bytes))
    rows = [list(r) for r in zip(*values, strict=True)] if values else []
    return Result(columns, rows)


def _values(col: pa.ChunkedArray, t: TDType) -> list[Any]:
    """Python values of a result column as TDengine's JSON shows them: FLOAT at float32's
    shortest repr, integers as ints, strings as text."""
    if t.is_string and not pa.types.is_string(col.type):
        return [None if v is None else str(v) for v in col.to_pylist()]
    target = t.arrow
    if col.type != target:
        try:
            col = col.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return list(col.to_pylist())
    if t.name == "FLOAT":  # Arrow prints a float32 at its shortest repr
        return [None if v is None else float(v) for v in col.cast(pa.string()).to_pylist()]
    return list(col.to_pylist())
