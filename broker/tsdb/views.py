"""A TDengine topic's view, evaluated over a vnode's WAL inside Fetch.

TDengine reads the WAL from the consumer's version and runs the topic's filter and projection
with its query engine; here each rows entry is an Arrow table, so the filter, projection, JSON
values and Kafka record batch are all computed column-wise (no per-row Python). Offsets are WAL
versions: every returned batch spans the versions it read, so rows filtered out, entries of
other supertables and meta entries a topic does not deliver still move the consumer forward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from broker.tsdb.catalog import STABLE_METADATA_KEY, TsdbCatalog
from broker.tsdb.encode import json_objects, records_batch
from broker.tsdb.rows import TBNAME, conform, decode_rows

if TYPE_CHECKING:
    from broker.tsdb.types import StableSchema
    from storage import Store
    from storage.model import WalEntry

TYPE_DATA = b"data"
TYPE_META = b"meta"


@dataclass(frozen=True)
class TopicDef:
    """A TDengine topic as stored in the catalog (see broker/sql/executor.py)."""

    name: str
    kind: str  # "database" | "stable" | "select"
    db: str
    stable: str | None
    meta: str | None  # None | "with" | "only"
    statement: str

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> TopicDef:
        return cls(name, data["kind"], data["db"], data.get("stable"), data.get("meta"), data["statement"])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "db": self.db, "stable": self.stable, "meta": self.meta,
                "statement": self.statement}


class _Compiled:
    """A topic's filter and projection compiled against one version of a supertable's schema."""

    def __init__(self, topic: TopicDef, schema: StableSchema) -> None:
        from broker.sql.expr import compile_filter, compile_projection
        from broker.sql.parser import parse

        self.schema = schema
        self.filter = None
        self.projection = None
        if topic.kind == "database":
            return
        stmt = parse(topic.statement)
        if topic.kind == "select":
            self.projection = compile_projection(stmt.select, schema)
            self.filter = self.projection.where
        elif stmt.where is not None:
            self.filter = compile_filter(stmt.where, schema, tags_only=True)


class View:
    """Turns a vnode's WAL entries into the Kafka record batches of one topic."""

    def __init__(self, topic: TopicDef, store: Store, catalog: TsdbCatalog) -> None:
        self.topic = topic
        self._store = store
        self._catalog = catalog
        self._compiled: dict[str, _Compiled] = {}
        self._db_header = topic.db.encode()

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
        (at least one batch when any entry exists there)."""
        entries = self._store.read_entries(self.topic.db, vnode, from_version, max(max_bytes, 1))
        out: list[bytes] = []
        size = 0
        skipped_from: int | None = None  # start of a run of versions that yield no records
        skipped_to = -1
        for entry in entries:
            start = max(from_version, entry.version)
            last = entry.version + entry.count - 1
            batch = self._evaluate(entry, start, last)
            if batch is None:
                if skipped_from is None:
                    skipped_from = start
                skipped_to = last
                continue
            if skipped_from is not None:
                out.append(_empty(skipped_from, skipped_to))
                skipped_from = None
            out.append(batch)
            size += len(batch)
            if size >= max_bytes:
                break
        if skipped_from is not None:
            out.append(_empty(skipped_from, skipped_to))
        return out

    def _evaluate(self, entry: WalEntry, start: int, last: int) -> bytes | None:
        """The batch for one entry, or None when it delivers no record to this topic."""
        if entry.kind == "rows":
            if self.topic.meta == "only":
                return None
            return self._rows(entry, start, last)
        if entry.kind == "meta":
            if self.topic.meta is None:
                return None
            return self._meta(entry, last)
        return None

    def _rows(self, entry: WalEntry, start: int, last: int) -> bytes | None:
        table = decode_rows(entry.data)
        stable = (table.schema.metadata or {}).get(STABLE_METADATA_KEY, b"").decode()
        if self.topic.stable is not None and stable != self.topic.stable:
            return None
        compiled = self._compiled_for(stable)
        if compiled is None:
            return None
        skip = start - entry.version
        if skip:
            table = table.slice(skip)
        table = self._catalog.with_tags(self.topic.db, stable, conform(table, compiled.schema))
        offsets = pc.add(pa.array(range(len(table)), pa.int64()), start) if len(table) else pa.array([], pa.int64())
        if compiled.filter is not None:
            mask = compiled.filter.mask(table)
            table = table.filter(mask)
            offsets = offsets.filter(mask)
        if len(table) == 0:
            return None
        ts_name = compiled.schema.columns[0].name
        if compiled.projection is not None:
            values_table = compiled.projection.evaluate(table)
        else:
            values_table = table.drop_columns([TBNAME])
        tbnames = table.column(TBNAME)
        return records_batch(
            base_offset=start, last_offset=last, offsets=offsets,
            timestamps=table.column(ts_name), keys=tbnames, values=json_objects(values_table),
            headers=[("tmq.db", self._db_header), ("tmq.stable", stable.encode()),
                     ("tmq.table", tbnames), ("tmq.type", TYPE_DATA)])

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


def _empty(first: int, last: int) -> bytes:
    """A batch with no records spanning versions first..last, so the consumer moves past them."""
    empty = pa.array([], pa.int64())
    return records_batch(base_offset=first, last_offset=last, offsets=empty, timestamps=empty,
                         keys=pa.array([], pa.binary()), values=pa.array([], pa.binary()), headers=[])
