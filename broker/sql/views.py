"""A TDengine topic's view, evaluated over a vnode's WAL inside Fetch.

TDengine reads the WAL from the consumer's version and runs the topic's filter and projection
with its query engine; here each rows entry is an Arrow table, so the filter, projection, JSON
values and Kafka record batch are all computed column-wise (no per-row Python). Offsets are WAL
versions: every returned batch spans the versions it read, so rows filtered out, entries of
other supertables and meta entries a topic does not deliver still move the consumer forward.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from tmqgate.broker.tsdb.catalog import STABLE_METADATA_KEY, TsdbCatalog, join_tags
from tmqgate.broker.tsdb.encode import EncodingStopped, arange, json_objects, records_batch
from tmqgate.broker.tsdb.rows import TBNAME, arrow_schema, conform, decode_rows, decode_run, schema_message

if TYPE_CHECKING:
    from tmqgate.broker.sql.expr import Filter, Projection
    from tmqgate.broker.tsdb.types import StableSchema
    from tmqgate.storage import Store
    from tmqgate.storage.model import WalEntry

TYPE_DATA = b"data"
TYPE_META = b"meta"
#: A Fetch reads a view's WAL in chunks of partition_max_bytes, at most this many per partition.
SCAN_CHUNKS = 4
#: A run of rows entries is evaluated in steps of at most this many cells (rows x columns and
#: tags; at least one row), so a step of the widest schema TDengine allows (4,096 columns and
#: tags) is short, and a Fetch can stop between steps.
CELLS_PER_STEP = 1 << 20
#: A Fetch's evaluation of one partition stops after this long (at least one step is done),
#: answering what it has: the consumer fetches the rest next, as with a partial Kafka fetch.
EVALUATION_BUDGET_S = 1.0
#: A Fetch's read of a view evaluates steps of about this share of the bytes asked for (by
#: the bytes a row made in the last step), and no step it expects to go past them: a later
#: partition's batches past its limit are dropped from the answer (only the first may exceed).
STEP_FILL = 0.8
#: Threads of the evaluation pool (its own, so evaluation never holds the loop's default
#: executor, where password hashing for SASL PLAIN and HTTP Basic runs; issue 25).
EVALUATION_THREADS = min(4, os.cpu_count() or 1)
#: While a step runs, the Fetch asks this often whether its client is gone (and then tells the
#: step to stop: it stops at its next few columns).
WATCH_S = 0.05
#: A view remembers the supertable of at most this many schema messages (schema versions).
KNOWN_SCHEMAS = 256
#: A run's entries are combined into one chunk where they average fewer rows than this.
COMBINE_BELOW = 2048

_pool: ThreadPoolExecutor | None = None


def evaluation_pool() -> ThreadPoolExecutor:
    """The views' own bounded thread pool (made on first use)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=EVALUATION_THREADS, thread_name_prefix="tmqgate-view")
    return _pool


# What the evaluation of a run sends back to `View._scan`: each step's record batch (None: no
# row passed) with the versions it covers, and whether the whole run was evaluated.
_Evaluated = tuple[list[tuple[bytes | None, int, int]], bool]


@dataclass(frozen=True)
class TopicDef:
    """A TDengine topic as stored in the catalog (see broker/sql/tmq_topics.py)."""

    name: str
    kind: str  # "database" | "stable" | "select"
    db: str
    stable: str | None
    meta: str | None  # None | "with" | "only"
    statement: str
    # Who made it (principal, host): with an authorizer on, a Fetch of the view needs the
    # owner's READ on `db` then too (broker/sql/access.py). None: a topic made before owners
    # were kept, or a database's own topic.
    owner: str | None = None
    owner_host: str = ""

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicDef:
        return cls(name, data["kind"], data["db"], data.get("stable"), data.get("meta"), data["statement"],
                   data.get("owner"), data.get("owner_host", ""))

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "db": self.db, "stable": self.stable, "meta": self.meta,
               "statement": self.statement}
        if self.owner is not None:
            out.update(owner=self.owner, owner_host=self.owner_host)
        return out


class _Compiled:
    """A topic's filter and projection compiled against one version of a supertable's schema."""

    def __init__(self, topic: TopicDef, schema: StableSchema) -> None:
        self.schema = schema
        self.arrow = arrow_schema(schema)  # what rows entries are conformed to
        self.filter: Filter | None = None
        self.projection: Projection | None = None
        if topic.kind != "database":
            self._compile(topic, schema)
        tags = {t.name for t in schema.tags}
        self.filter_needs_tags = self.filter is not None and bool(tags & set(self.filter.columns))
        # database and supertable topics deliver every column and tag
        self.values_need_tags = self.projection is None or bool(tags & set(self.projection.columns))

    def _compile(self, topic: TopicDef, schema: StableSchema) -> None:
        from tmqgate.broker.sql.ast import CreateTopic
        from tmqgate.broker.sql.expr import compile_filter, compile_projection
        from tmqgate.broker.sql.parser import parse

        stmt = parse(topic.statement)
        assert isinstance(stmt, CreateTopic)
        if topic.kind == "select":
            assert stmt.select is not None
            self.projection = compile_projection(stmt.select, schema)
            self.filter = self.projection.where
        elif stmt.where is not None:
            self.filter = compile_filter(stmt.where, schema, tags_only=True)


@dataclass(frozen=True)
class _Piece:
    """The rows a run reads of one rows entry: its stored bytes (decoded where the run is
    evaluated, off the loop: decoding grows with the columns), rows skipped, rows read, and
    its schema message (`rows.schema_message`; None: not framed as entries are written)."""

    data: bytes
    skip: int
    rows: int
    head: bytes | None = None


@dataclass
class _Run:
    """Consecutive rows entries of one supertable, evaluated as one table: versions first..last."""

    stable: str
    compiled: _Compiled
    pieces: list[_Piece]
    first: int
    last: int
    db_header: bytes = b""

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.pieces)


class View:
    """Turns a vnode's WAL entries into the Kafka record batches of one topic."""

    def __init__(self, topic: TopicDef, store: Store, catalog: TsdbCatalog,
                 rows: dict[str, list[int]] | None = None) -> None:
        self.topic = topic
        self._store = store
        self._catalog = catalog
        # [rows scanned, rows delivered] since start, in `rows` under the topic's name: the
        # owner's dict outlives the View (the registry rebuilds views on DDL); metrics read it
        self.rows = (rows if rows is not None else {}).setdefault(topic.name, [0, 0])
        self._compiled: dict[str, _Compiled] = {}
        self._db_header = topic.db.encode()
        #: bytes of record batch a scanned row made in the last evaluated step (None: none yet):
        #: `read_async` sizes its steps by it to the bytes asked for (see there)
        self._bytes_per_row: float | None = None
        #: schema message → (that message, its supertable), of the rows entries read (at most
        #: KNOWN_SCHEMAS)
        self._stables: dict[bytes, tuple[bytes, str]] = {}

    def invalidate(self) -> None:
        """Forget compiled expressions (a supertable's schema changed)."""
        self._compiled.clear()

    def _compiled_for(self, stable: str) -> _Compiled | None:
        schema = self._catalog.schema(self.topic.db, stable)
        if schema is None:
            return None
        found = self._compiled.get(stable)
        if found is None or found.schema is not schema:
            found = self._compiled[stable] = _Compiled(self.topic, schema)
        return found

    def read(self, vnode: int, from_version: int, max_bytes: int) -> list[bytes]:
        """Record batches covering versions from `from_version` on, about `max_bytes` of them
        (at least one batch when any entry exists there).

        Consecutive rows entries of one supertable are evaluated together as one table and
        become one record batch: the filter, projection and encoding then run once per run of
        entries, not once per entry (ingestion writes an entry per produced batch, often a few
        hundred rows). As Kafka's partition_max_bytes bounds what a Fetch returns, the WAL is
        read in chunks of about `max_bytes` until the batches reach `max_bytes`, so a selective
        topic fills a response; at most SCAN_CHUNKS chunks."""
        scan = self._scan(vnode, from_version, max_bytes, None)
        try:
            run = next(scan)
            while True:
                tags = self._tags_for(run)
                run = scan.send(([(self._counted(step, _run_batch(step, tags)), step.first, step.last)
                                  for step in _steps(run)], True))
        except StopIteration as done:
            result: list[bytes] = done.value
            return result

    async def read_async(self, vnode: int, from_version: int, max_bytes: int, end: int | None = None,
                         committed: bool = False, gone: Callable[[], bool] | None = None,
                         budget_s: float | None = EVALUATION_BUDGET_S) -> list[bytes]:
        """`read` for the event loop, which it holds only for short steps (issue 11): each run
        of rows entries is evaluated (filter, projection, JSON, record batch: Arrow kernels,
        which release the GIL) in steps of CELLS_PER_STEP cells in the views' own thread pool,
        the WAL reads and the catalog lookups stay here, and versions from `end` on (the high
        watermark the Fetch answers with) are not read. The loop serves other requests
        meanwhile; if the database is dropped (or dropped and made again) during the read,
        what was read before is returned. `committed` (read_committed): the rows entries of
        aborted transactions are skipped (`end` is then the last stable offset).

        Bounded (issue 25): between steps the read stops, returning what it has, once its
        batches reach `max_bytes` or `budget_s` seconds have passed (after one step at least;
        None: no time bound), or at once when `gone()` says the client has left: an abandoned
        Fetch frees the pool within one step.

        Steps are sized to `max_bytes` by the bytes a scanned row made in the last step
        (STEP_FILL), and a step expected to go past them is left to the next Fetch: a Fetch
        keeps only the first partition's batches past the partition's limit (as Kafka's), so
        evaluating far more than asked was work thrown away and done again by the next Fetch.
        """
        scan = self._scan(vnode, from_version, max_bytes, end, committed, self._expected)
        deadline = time.monotonic() + budget_s if budget_s is not None else float("inf")
        produced, evaluated = 0, False
        stop = threading.Event()  # set: a step still running in the pool stops
        try:
            run = next(scan)
            while True:
                tags = self._tags_for(run)
                pieces: list[tuple[bytes | None, int, int]] = []
                complete = True
                per_row = self._bytes_per_row
                for step in _steps(run, None if not per_row else max(1, int(STEP_FILL * max_bytes / per_row))):
                    per_row = self._bytes_per_row
                    if (gone is not None and gone()) or (evaluated and (
                            produced >= max_bytes or time.monotonic() >= deadline
                            or (per_row is not None and produced + step.rows * per_row > max_bytes))):
                        complete = False
                        break
                    try:
                        batch = self._counted(step, await _evaluated(step, tags, gone, stop))
                    except EncodingStopped:  # the client left during the step
                        complete = False
                        break
                    evaluated = True
                    made = len(batch) if batch is not None else 0
                    self._bytes_per_row = made / step.rows if step.rows else per_row
                    produced += made
                    pieces.append((batch, step.first, step.last))
                run = scan.send((pieces, complete))
        except StopIteration as done:
            result: list[bytes] = done.value
            return result
        finally:
            stop.set()  # cancelled (the broker stops, the client's task ends): the step ends too

    def _counted(self, run: _Run, batch: bytes | None) -> bytes | None:
        """Count a run's rows (scanned) and its batch's records (delivered: bytes 57..61 of a
        v2 batch are its record count); `batch` is returned."""
        rows = self.rows
        rows[0] += run.rows
        if batch is not None:
            rows[1] += int.from_bytes(batch[57:61], "big")
        return batch

    def _tags_for(self, run: _Run) -> pa.Table | None:
        """The tag table a run's evaluation joins (looked up here: the catalog is the loop's)."""
        compiled = run.compiled
        if compiled.filter_needs_tags or compiled.values_need_tags:
            return self._catalog.tag_table(self.topic.db, run.stable)
        return None

    def _expected(self, rows: int) -> float | None:
        """The bytes of record batch `rows` scanned rows are expected to make (at the rate of
        the last evaluated step); None before the first."""
        per_row = self._bytes_per_row
        return None if per_row is None else rows * per_row

    def _scan(self, vnode: int, from_version: int, max_bytes: int, end: int | None,
              committed: bool = False, expected: Callable[[int], float | None] | None = None,
              ) -> Generator[_Run, _Evaluated, list[bytes]]:
        """`read`'s walk over the WAL: yields each run of rows entries to be evaluated, and
        takes back its steps' record batches (None: no row passed) and whether the run was
        evaluated whole (if not, the walk ends there); returns the batches. Control
        batches (transaction markers, stored as data entries) are never rows: skipped as any
        data entry; `committed`: rows entries of aborted transactions are skipped too.

        `expected` (read_async's, from the bytes a row made in its last step) lets a run go on
        from one chunk into the next while the run and as many rows again are expected to fit
        in one step (STEP_FILL of `max_bytes`): a selective topic then evaluates a few long
        runs instead of one per chunk, and each step's fixed cost (about 1.5 ms of Arrow calls,
        measured at 10 % selectivity) is paid fewer times. Without it, or where the response
        would not hold that much more, the run is evaluated at the end of its chunk."""
        out = _Batches()
        run: _Run | None = None
        info = self._store.get_database(self.topic.db)
        aborted: set[int] = set()
        if committed and info is not None:
            upper = end if end is not None else self._store.next_version(self.topic.db, vnode)
            aborted = self._store.aborted_rows(self.topic.db, vnode, from_version, upper)
        version = from_version
        for chunk in range(SCAN_CHUNKS):
            if self._store.get_database(self.topic.db) is not info:
                break  # dropped while a read_async waited
            entries = self._store.read_entries(self.topic.db, vnode, version, max(max_bytes, 1))
            if end is not None:
                entries = [e for e in entries if e.version < end]
            if not entries:
                if run is not None and not out.add((yield run)):
                    return out.finish()
                break
            for entry in entries:
                start = max(version, entry.version)
                last = entry.version + entry.count - 1
                rows = (self._rows_of(entry, start) if entry.kind == "rows" and entry.version not in aborted
                        else None)
                if rows is not None:
                    stable, compiled, piece = rows
                    if run is not None and run.stable == stable and run.compiled is compiled:
                        run.pieces.append(piece)
                        run.last = last
                        continue
                    if run is not None and not out.add((yield run)):
                        return out.finish()  # stopped inside the run: the rest is the next Fetch's
                    run = _Run(stable, compiled, [piece], start, last, self._db_header)
                else:
                    if run is not None:
                        if not out.add((yield run)):
                            return out.finish()
                        run = None
                    meta = entry.kind == "meta" and self.topic.meta is not None
                    out.emit(self._meta(entry, last) if meta else None, start, last)
                if out.size >= max_bytes:
                    break
            else:
                carry = False
                if run is not None and expected is not None and chunk < SCAN_CHUNKS - 1:
                    guess = expected(run.rows + run.last - max(run.first, version) + 1)
                    carry = guess is not None and out.size + guess <= STEP_FILL * max_bytes
                if run is not None and not carry:
                    if not out.add((yield run)):
                        return out.finish()
                    run = None
                version = entries[-1].version + entries[-1].count
                if out.size < max_bytes:
                    continue
            break
        # a run still pending when the response filled up is left for the next Fetch
        return out.finish()

    def _rows_of(self, entry: WalEntry, start: int) -> tuple[str, _Compiled, _Piece] | None:
        """(supertable, compiled view, its rows from `start`) of a rows entry this topic
        reads, or None when it delivers nothing here. Only the entry's schema is read here
        (for its supertable); the rows are decoded where the run is evaluated."""
        if self.topic.meta == "only":
            return None
        head, stable = self._stable_of(entry.data)
        if self.topic.stable is not None and stable != self.topic.stable:
            return None
        compiled = self._compiled_for(stable)
        if compiled is None:
            return None
        skip = start - entry.version
        return stable, compiled, _Piece(entry.data, skip, entry.count - skip, head)

    def _stable_of(self, data: bytes) -> tuple[bytes | None, str]:
        """(schema message, supertable) of a rows entry: the supertable (its schema's metadata)
        known by the schema message's bytes after the first entry of each schema version, as
        reading the schema was the loop's main cost per entry where entries are small; the
        message returned is the one kept, so the entries of one version share it."""
        found = schema_message(data)
        known = self._stables.get(found) if found is not None else None
        if known is not None:
            return known
        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            stable = (reader.schema.metadata or {}).get(STABLE_METADATA_KEY, b"").decode()
        if found is not None:
            if len(self._stables) >= KNOWN_SCHEMAS:
                self._stables.clear()
            self._stables[found] = (found, stable)
        return found, stable

    def _meta(self, entry: WalEntry, last: int) -> bytes | None:
        body = json.loads(entry.data)
        stable = body.get("stable") or (body["tableName"] if body.get("tableType") == "super" else None)
        if self.topic.stable is not None and stable != self.topic.stable:
            return None
        table = body["tableName"]
        return records_batch(
            base_offset=entry.version, last_offset=last, offsets=pa.array([entry.version], pa.int64()),
            timestamps=pa.array([body.get("time", -1)], pa.int64()), keys=pa.array([table]),
            values=pa.array([entry.data], pa.binary()),
            headers=[("tmq.db", self._db_header), ("tmq.stable", (stable or "").encode()),
                     ("tmq.table", table.encode()), ("tmq.type", TYPE_META)])


async def _evaluated(step: _Run, tags: pa.Table | None, gone: Callable[[], bool] | None,
                     stop: threading.Event) -> bytes | None:
    """`_run_batch(step, tags)` in the evaluation pool, told to stop (EncodingStopped) when
    `gone()` becomes true meanwhile (asked every WATCH_S) or `stop` is set."""
    future = asyncio.get_running_loop().run_in_executor(evaluation_pool(), _run_batch, step, tags, stop)
    # a step left behind (its Fetch cancelled) ends with EncodingStopped, which nobody awaits
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    while not future.done():
        await asyncio.wait([future], timeout=WATCH_S)
        if gone is not None and gone():
            stop.set()
    return future.result()


def _steps(run: _Run, max_rows: int | None = None) -> Iterator[_Run]:
    """A run as consecutive slices of at most CELLS_PER_STEP cells and ``max_rows`` rows (at
    least one row each), each covering its rows' versions (the last one up to the run's last
    version)."""
    schema = run.compiled.schema
    width = 1 + len(schema.columns) + len(schema.tags)
    n = run.rows
    per_step = max(1, CELLS_PER_STEP // width)
    if max_rows is not None:
        per_step = min(per_step, max_rows)
    if n <= per_step:
        yield run
        return
    pieces: list[_Piece] = []
    count = done = 0
    for piece in run.pieces:
        skip, left = piece.skip, piece.rows
        while left:
            take = min(left, per_step - count)
            pieces.append(_Piece(piece.data, skip, take, piece.head))
            skip, left, count = skip + take, left - take, count + take
            if count == per_step:
                first = run.first + done
                done += count
                yield _Run(run.stable, run.compiled, pieces, first, run.last if done == n else first + count - 1,
                           run.db_header)
                pieces, count = [], 0
    if pieces:
        yield _Run(run.stable, run.compiled, pieces, run.first + done, run.last, run.db_header)


def _table_of(run: _Run, stop: threading.Event | None = None) -> pa.Table:
    """A run's rows as one table under its view's schema: consecutive entries of one schema
    version decoded together (`decode_run`), each sliced to the rows read, then conformed;
    EncodingStopped once `stop` is set (asked once per group of entries, each group at most
    a step: CELLS_PER_STEP cells). Chunks (one per entry) averaging under
    COMBINE_BELOW rows are combined into one: the filter and the encoding cost about 10 µs
    a chunk, more than the copy for small entries (filtering 126,000 rows at 90 %: 17 ms in
    100-row chunks, 3 ms combined first; 1.5 ms in 4,500-row chunks, 2.2 ms combined)."""
    compiled = run.compiled
    pieces = run.pieces
    tables = []
    i = 0
    while i < len(pieces):
        if stop is not None and stop.is_set():
            raise EncodingStopped
        head = pieces[i].head
        j = i + 1
        if head is None:  # not framed as encode_rows frames entries: read alone
            table = decode_rows(pieces[i].data).slice(pieces[i].skip, pieces[i].rows)
        else:
            while j < len(pieces) and pieces[j].head == head:
                j += 1
            batches = decode_run([p.data for p in pieces[i:j]], head)
            table = pa.Table.from_batches([b if p.skip == 0 and p.rows == b.num_rows else b.slice(p.skip, p.rows)
                                           for b, p in zip(batches, pieces[i:j], strict=True)], batches[0].schema)
        tables.append(conform(table, compiled.schema, compiled.arrow).replace_schema_metadata(None))
        i = j
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    chunks = len(pieces)
    return table.combine_chunks() if chunks > 1 and len(table) < COMBINE_BELOW * chunks else table


def _run_batch(run: _Run, tags: pa.Table | None, stop: threading.Event | None = None) -> bytes | None:
    """The record batch of a run of rows entries, or None when no row passes the filter;
    `tags` is the supertable's tag table when the filter or the values need tags.

    Pure (Arrow kernels over the run's entries; no store, no catalog), so `View.read_async`
    runs it in a thread (`stop`: set when its answer is no longer wanted; the JSON encoding,
    the part that grows with the columns, then raises EncodingStopped). Tags are joined on
    only when the filter or the values need them, and then after the filter when only the
    values do (a selective filter on columns joins few rows)."""
    compiled = run.compiled
    table = _table_of(run, stop)
    offsets = _versions(run.first, len(table))
    with_tags = False
    if compiled.filter is not None:
        if compiled.filter_needs_tags:
            assert tags is not None
            table = join_tags(table, tags)
            with_tags = True
        mask = compiled.filter.mask(table)
        table = table.filter(mask)
        offsets = offsets.filter(mask)
    if len(table) == 0:
        return None
    if compiled.values_need_tags and not with_tags:
        assert tags is not None
        table = join_tags(table, tags)
    ts_name = compiled.schema.columns[0].name
    if compiled.projection is not None:
        values_table = compiled.projection.evaluate(table)
    else:
        values_table = table.drop_columns([TBNAME])
    tbnames = table.column(TBNAME)
    return records_batch(
        base_offset=run.first, last_offset=run.last, offsets=offsets,
        timestamps=table.column(ts_name), keys=tbnames,
        values=json_objects(values_table, stop=stop.is_set if stop is not None else None),
        headers=[("tmq.db", run.db_header), ("tmq.stable", run.stable.encode()),
                 ("tmq.table", tbnames), ("tmq.type", TYPE_DATA)])


class _Batches:
    """The batches a read returns: versions that yield no records are covered by empty
    batches (one per stretch), so the consumer moves past them."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.size = 0
        self._skipped_from: int | None = None  # start of a run of versions that yield no records
        self._skipped_to = -1

    def add(self, evaluated: _Evaluated) -> bool:
        """Emit a run's evaluated steps; whether the run was evaluated whole."""
        pieces, complete = evaluated
        for batch, first, last in pieces:
            self.emit(batch, first, last)
        return complete

    def emit(self, batch: bytes | None, first: int, last: int) -> None:
        if batch is None:
            if self._skipped_from is None:
                self._skipped_from = first
            self._skipped_to = last
            return
        if self._skipped_from is not None:
            self.out.append(_empty(self._skipped_from, self._skipped_to))
            self._skipped_from = None
        self.out.append(batch)
        self.size += len(batch)

    def finish(self) -> list[bytes]:
        if self._skipped_from is not None:
            self.out.append(_empty(self._skipped_from, self._skipped_to))
            self._skipped_from = None
        return self.out


def _versions(first: int, n: int) -> pa.Array:
    """Versions first, first + 1, …, first + n - 1 (int64): the offsets of a run's rows."""
    return pc.add(arange(n).cast(pa.int64()), first)


def _empty(first: int, last: int) -> bytes:
    """A batch with no records spanning versions first..last, so the consumer moves past them."""
    empty = pa.array([], pa.int64())
    return records_batch(base_offset=first, last_offset=last, offsets=empty, timestamps=empty,
                         keys=pa.array([], pa.binary()), values=pa.array([], pa.binary()), headers=[])
