"""The broker's view of the TDengine catalog: supertable schemas, child tables and their
tags as Arrow tables, and where a child table lives.

Storage keeps the catalog as opaque JSON; this module turns it into `StableSchema`s and keeps
per-supertable tag tables (tbname + tag columns) cached for the Fetch path, where a view joins
them onto rows by table name. Every catalog change goes through `invalidate`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tmqgate.broker.tsdb.rows import TBNAME
from tmqgate.broker.tsdb.types import Column, StableSchema, parse_type
from tmqgate.protocol import clock
from tmqgate.protocol.partitioner import murmur2

if TYPE_CHECKING:
    from tmqgate.storage import Store

STABLE_METADATA_KEY = b"tmq.stable"


def schema_to_json(schema: StableSchema) -> dict[str, Any]:
    return {"name": schema.name,
            "columns": [[c.name, str(c.type)] for c in schema.columns],
            "tags": [[t.name, str(t.type)] for t in schema.tags]}


def schema_from_json(data: dict[str, Any]) -> StableSchema:
    return StableSchema(data["name"],
                        [Column(n, parse_type(t)) for n, t in data["columns"]],
                        [Column(n, parse_type(t)) for n, t in data["tags"]])


def home_vnode(table: str, vgroups: int) -> int:
    """A child table's vnode for SQL writes: murmur2(name) mod n, the hash the Java client's
    default partitioner applies to a record key, so keying records by table name agrees."""
    return (murmur2(table.encode()) & 0x7FFFFFFF) % vgroups


def meta_payload(kind: str, table_type: str, name: str, **details: Any) -> bytes:
    """The JSON body of a meta entry, in the spirit of TDengine's tmq meta messages."""
    body = {"type": kind, "tableType": table_type, "tableName": name, "time": clock.now_ms()}
    body.update(details)
    return json.dumps(body, separators=(",", ":")).encode()


def rename_child_tag(tx: Any, children: Any, db: str, stable: str, old: str, new: str | None,
                     vnode: int | None = None) -> None:
    """Stage each child table of `stable` (on `vnode`, if given) with its tag `old` named `new`
    (None: the tag dropped, so one added again later under its name starts NULL)."""
    for child in children:
        if child.stable == stable and (vnode is None or child.vnode == vnode) and old in child.tags:
            tags = {(new if k == old else k): v for k, v in child.tags.items() if k != old or new is not None}
            tx.set_child_tags(db, child.name, tags, merge=False)


class TsdbCatalog:
    """Cached schemas and tag tables over the storage catalog."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._schemas: dict[tuple[str, str], StableSchema] = {}
        self._tags: dict[tuple[str, str], pa.Table] = {}

    def invalidate(self, db: str, stable: str | None = None) -> None:
        """Forget cached schemas/tag tables of a database (or one supertable) after a change."""
        for cache in (self._schemas, self._tags):
            for key in [k for k in cache if k[0] == db and (stable is None or k[1] == stable)]:
                del cache[key]

    def schema(self, db: str, stable: str) -> StableSchema | None:
        key = (db, stable)
        found = self._schemas.get(key)
        if found is None:
            data = self._store.stable(db, stable)
            if data is None:
                return None
            found = self._schemas[key] = schema_from_json(data)
        return found

    def stable_names(self, db: str) -> list[str]:
        return sorted(self._store.stables(db))

    def find_stable(self, db: str, name: str) -> str | None:
        """The supertable's stored name for `name`, matched case-insensitively as TDengine does."""
        names = self._store.stables(db)
        if name in names:
            return name
        low = name.lower()
        return next((n for n in names if n.lower() == low), None)

    def tag_table(self, db: str, stable: str) -> pa.Table:
        """tbname plus one column per tag, for every child table of `stable`."""
        key = (db, stable)
        table = self._tags.get(key)
        if table is None:
            schema = self.schema(db, stable)
            assert schema is not None
            children = [c for c in self._store.child_tables(db).values() if c.stable == stable]
            arrays = [pa.array([c.name for c in children], pa.string())]
            for tag in schema.tags:
                arrays.append(pa.array([c.tags.get(tag.name) for c in children], tag.type.arrow))
            names = [TBNAME] + [t.name for t in schema.tags]
            table = self._tags[key] = pa.Table.from_arrays(arrays, names=names)
        return table

    def with_tags(self, db: str, stable: str, rows: pa.Table) -> pa.Table:
        """`rows` with the tag columns of each row's child table appended (vectorised join)."""
        return join_tags(rows, self.tag_table(db, stable))


def join_tags(rows: pa.Table, tags: pa.Table) -> pa.Table:
    """`rows` with the columns of `tags` (a `tag_table`) of each row's child table appended;
    pure, so it may run off the event loop."""
    index = pa.compute.index_in(rows.column(TBNAME), value_set=tags.column(TBNAME))
    # one new table (appending a column at a time copies the schema each time: quadratic in
    # the tag count, 8,000 tags took 8 s a row; issue 25)
    taken = [column.take(index) for column in tags.columns[1:]]
    return pa.Table.from_arrays([*rows.columns, *taken], names=[*rows.column_names, *tags.column_names[1:]])
