"""Schemaless ingestion through Kafka Produce: records sent to a SQL database's topic carry
InfluxDB line protocol or OpenTSDB JSON, and become rows (TDengine's schemaless writing).

As in TDengine, a measurement becomes a supertable, the tag set its child table's tags and the
field set its columns; a missing supertable, child table, column or tag is created first, each
change logged as a meta entry. Rows are stored in the partition the producer chose, as Kafka
does. Everything is parsed and checked before anything is written, so a bad record fails its
batch alone and leaves the catalog and the WAL as they were; so does a batch that would take
a supertable past TDengine's schema limits (tsdb/limits.py: 4,096 columns and tags, 128 tags,
row and tag lengths), refused with TDengine's text (Produce answers INVALID_RECORD).

A record's key, when present, names the child table; otherwise the name is derived from the
measurement and tags as TDengine does. Timestamps are in nanoseconds unless the record has a `tmq.precision` header (ns,
us, ms, s), TDengine's default for line protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.tsdb.ingest_rules import SchemalessError, SchemalessRow
from tmqgate.broker.tsdb.limits import schema_problem
from tmqgate.broker.tsdb.line_columns import stable_batches
from tmqgate.broker.tsdb.line_protocol import parse_line_protocol
from tmqgate.broker.tsdb.opentsdb import parse_opentsdb_json
from tmqgate.broker.tsdb.rows import RowsError
from tmqgate.broker.tsdb.schema_plan import SchemaPlan, StableBatch, child_table_tags, group_rows, plan_schema
from tmqgate.broker.tsdb.types import Column, StableSchema
from tmqgate.protocol.records import CorruptRecord, DecompressedTooLarge, decode_records

if TYPE_CHECKING:
    import pyarrow as pa

    from tmqgate.broker.sql.executor import Executor
    from tmqgate.storage import ProducerAppend

PRECISION_HEADER = "tmq.precision"
PRECISIONS = ("ns", "us", "ms", "s")


class IngestError(ValueError):
    """A record that is not valid line protocol / JSON, or does not fit the schema."""


class _Text(NamedTuple):
    """One record's rows as text, with what its header and key say about them."""

    offset: int  # the record's offset delta (errors name it)
    text: str
    precision: str
    table: str | None  # the key: the child table's name


def _texts(batch: bytes, decompressed: bytes | None) -> list[_Text]:
    """The batch's records with a value, decoded and checked (IngestError)."""
    try:
        records = decode_records(batch, decompressed=decompressed)
    except DecompressedTooLarge as exc:
        raise IngestError(f"the record batch is too large once decompressed: {exc}") from None
    except CorruptRecord as exc:
        raise IngestError(f"the record batch is corrupt: {exc}") from None
    texts: list[_Text] = []
    for record in records:
        if not record.value:
            continue
        precision = "ns"
        for name, value in record.headers:
            if name == PRECISION_HEADER and value is not None:
                precision = value.decode(errors="replace").strip().lower()
        if precision not in PRECISIONS:
            raise IngestError(f"record at offset delta {record.offset}: {PRECISION_HEADER} must be one of "
                              f"{', '.join(PRECISIONS)}, not {precision!r}")
        try:
            text = record.value.decode()
        except UnicodeDecodeError:
            raise IngestError(f"record at offset delta {record.offset} is not UTF-8 text") from None
        table = None
        if record.key:
            # The record key names the child table (as smlChildTableName would), so a producer
            # keying by table name chooses both the table and, through the partitioner, its vnode.
            try:
                table = record.key.decode()
            except UnicodeDecodeError:
                raise IngestError(f"record at offset delta {record.offset}: key is not UTF-8") from None
        texts.append(_Text(record.offset, text, precision, table))
    return texts


def _is_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def parse_records(batch: bytes, decompressed: bytes | None = None) -> list[SchemalessRow]:
    """Every row in a record batch, line by line: each record value is one or more lines, or
    JSON. ``decompressed``: the records section of a compressed batch as Produce's validation
    decompressed it (so it is not decompressed twice).

    A batch that cannot be decoded (corrupt, or decompressing past the bound) is an
    IngestError like a bad line, so the caller answers it instead of dropping the connection."""
    return _parsed(_texts(batch, decompressed))


def _parsed(texts: list[_Text]) -> list[SchemalessRow]:
    rows: list[SchemalessRow] = []
    for t in texts:
        try:
            parsed = parse_opentsdb_json(t.text) if _is_json(t.text) else parse_line_protocol(t.text, t.precision)
        except SchemalessError as exc:
            raise IngestError(f"record at offset delta {t.offset}: {exc}") from None
        if t.table is not None:
            parsed = [row._replace(tbname=t.table) for row in parsed]
        rows.extend(parsed)
    return rows


def grouped_rows(batch: bytes, decompressed: bytes | None = None) -> dict[str, StableBatch]:
    """The batch's rows grouped per supertable: column-wise by Arrow where the batch is line
    protocol of the common shape (tsdb/line_columns.py), else as ``group_rows`` groups
    ``parse_records``' rows. IngestError as theirs."""
    texts = _texts(batch, decompressed)
    if texts and not any(_is_json(t.text) for t in texts):
        grouped = stable_batches([(t.text, t.precision, t.table) for t in texts])
        if grouped is not None:
            return grouped
    rows = _parsed(texts)
    if not rows:
        raise IngestError("the record batch holds no rows")
    try:
        return group_rows(rows)
    except SchemalessError as exc:
        raise IngestError(str(exc)) from None


def _apply_plan(current: StableSchema | None, name: str, plan: SchemaPlan) -> StableSchema:
    """The supertable's schema after the plan's additions and widenings."""
    new_columns, new_tags, widen_columns, widen_tags = plan
    if current is None:
        return StableSchema(name, list(new_columns), list(new_tags))
    widened_c = {c.name: c for c in widen_columns}
    widened_t = {t.name: t for t in widen_tags}
    columns: list[Column] = [widened_c.get(c.name, c) for c in current.columns] + list(new_columns)
    tags: list[Column] = [widened_t.get(t.name, t) for t in current.tags] + list(new_tags)
    return StableSchema(current.name, columns, tags)


def ingest(executor: Executor, db: str, vnode: int, batch: bytes,
           decompressed: bytes | None = None, producer: ProducerAppend | None = None,
           txn_producer: tuple[int, int] | None = None) -> int:
    """Write a record batch's rows into database `db` on `vnode` through `executor` (which
    logs the catalog changes they need); returns the first version the rows took (the
    produce response's base offset). `decompressed`: see ``parse_records``; `txn_producer`:
    (producer id, epoch) of a transactional batch (its rows join the producer's transaction).

    The catalog changes are written first, then all the batch's rows entries (one per
    supertable) in one WriteBatch at consecutive versions, with the idempotent `producer`'s
    window when given: a retried batch is then either wholly written or not at all (a crash
    between the two leaves only catalog changes, which the retry finds made)."""
    groups = grouped_rows(batch, decompressed)
    catalog = executor.catalog
    info = executor.store.get_database(db)
    children = executor.store.child_tables(db)
    # Plan every change and build every table before writing anything.
    planned: list[tuple[StableSchema | None, StableSchema, bool, list[tuple[str, dict[str, Any]]], pa.Table]] = []
    try:
        for name, stable_rows in groups.items():
            stored = catalog.find_stable(db, name)
            current = catalog.schema(db, stored) if stored else None
            plan = plan_schema(current, stable_rows)
            schema = current if plan.empty and current is not None else _apply_plan(current, name, plan)
            if schema is not current and (problem := schema_problem(schema)) is not None:
                raise SchemalessError.limit(problem, 0)  # TDengine's limits, before any write
            new_children = []
            for table, tags in stable_rows.tables.items():
                child = children.get(table)
                if child is None:
                    new_children.append((table, child_table_tags(schema, tags)))
                elif child.stable != schema.name:
                    raise IngestError(f"table {table} belongs to supertable {child.stable}, not {schema.name}")
            planned.append((current, schema, not plan.empty, new_children, stable_rows.to_table(schema)))
    except (SchemalessError, RowsError) as exc:
        raise IngestError(str(exc)) from None
    try:
        for current, schema, changed, new_children, _table in planned:
            if changed:
                executor.write_stable_change(info, current, schema)
            for name, tags in new_children:
                executor.create_child(info, name, schema, tags, vnode=vnode)
        return executor.append_rows_many(db, vnode, [(schema.name, table) for _, schema, _, _, table in planned],
                                         producer, txn_producer)
    except SqlError as exc:
        raise IngestError(exc.message) from None
