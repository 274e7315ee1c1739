"""A follower's copy of a replicated SQL database's vnode (issue 16, step 5): the leader's meta
and rows entries stored as they are, at the leader's versions, and each meta entry's catalog
change made here in the same write — as a TDengine vnode replays its WAL — so a follower that
becomes the leader has the supertables, child tables and tags its rows need.

The meta entries are the ones the executor logs (broker/sql/ddl.py, TDengine's tmq meta):
- ``create`` of a ``super`` table: its columns and tags (name, type); made, or its schema
  replaced if it exists (a supertable's meta is logged on every vnode, so it arrives once per
  vnode: applying it again changes nothing);
- ``alter`` of a ``super`` table: ``add_column`` / ``add_tag`` / ``modify_column`` (colName,
  colType), ``drop_column`` / ``drop_tag`` (colName), ``rename_tag`` (colName, colNewName: the
  child tables of this vnode take the new name too) or ``schemaless`` (changes: name, type,
  tag, add | modify) applied to the schema here;
- ``create`` of a ``child`` table: its supertable (``using``) and tag values, on this vnode;
- ``drop`` of a ``super`` table (with its child tables) or of a ``child`` table.
A meta entry this code does not know or cannot read (a newer leader's: a type or field it
does not have) is stored and changes nothing, logged: refusing it would stop this copy at that
entry for ever.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from tmqgate.broker.tsdb.catalog import rename_child_tag, schema_from_json, schema_to_json
from tmqgate.broker.tsdb.types import Column, StableSchema, parse_type

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog
    from tmqgate.storage import Store
    from tmqgate.storage.txn import Transaction

log = logging.getLogger("tmqgate.replication")
KIND_META = 1  # storage.keys.KIND_META: the stored value is i64 append time ms + the meta JSON


def append_replicated(store: Store, catalog: TsdbCatalog, db: str, vnode: int, version: int, kind: int,
                      value: bytes, count: int, *, txn_producer: tuple[int, int] | None = None,
                      producer_batch: tuple[int, int, Any] | None = None) -> None:
    """Store the leader's entry (``Store.raw_entries``' form) at ``version`` and, for a meta
    entry, make its catalog change, in one write; ValueError if it does not follow this log.
    ``txn_producer`` and ``producer_batch``: what the leader knows of it beside
    (``Transaction.append_raw``)."""
    changed: str | None = None
    with store.transaction() as tx:
        if kind == KIND_META:
            changed = _apply(store, tx, db, vnode, value[8:])
        tx.append_raw(db, vnode, version, kind, value, count, txn_producer=txn_producer,
                      producer_batch=producer_batch)
    if changed is not None:
        catalog.invalidate(db, changed)


def _apply(store: Store, tx: Transaction, db: str, vnode: int, payload: bytes) -> str | None:
    """Stage the catalog change of one meta entry; the supertable it touches (None: none)."""
    try:
        return _change(store, tx, db, vnode, json.loads(payload))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # TypeError_ is a ValueError
        log.warning("%s-%d: a replicated meta entry this broker cannot read changes nothing here (%s: %s)",
                    db, vnode, type(exc).__name__, exc)
        return None


def _change(store: Store, tx: Transaction, db: str, vnode: int, meta: dict[str, Any]) -> str | None:
    kind, table_type, name = meta["type"], meta["tableType"], str(meta["tableName"])
    if table_type == "super":
        current = store.stable(db, name)
        if kind == "create":
            schema = StableSchema(name, _columns(meta["columns"]), _columns(meta["tags"]))
        elif kind == "alter" and current is not None:
            schema = _altered(schema_from_json(current), meta)
            if meta.get("alterType") in ("rename_tag", "drop_tag"):
                new = str(meta["colNewName"]) if meta["alterType"] == "rename_tag" else None
                rename_child_tag(tx, store.child_tables(db).values(), db, name, str(meta["colName"]), new, vnode)
        elif kind == "drop" and current is not None:
            tx.drop_stable(db, name)
            return name
        else:
            return None
        if current is None:
            tx.create_stable(db, name, schema_to_json(schema))
        else:
            tx.alter_stable(db, name, schema_to_json(schema))
        return name
    if table_type == "child":
        child = store.child_table(db, name)
        if kind == "create" and child is None:
            tags = {t["name"]: t.get("value") for t in meta.get("tags") or []}
            tx.create_child_table(db, name, str(meta["using"]), tags, vnode)
            return str(meta["using"])
        if kind == "drop" and child is not None:
            tx.drop_child_table(db, name)
            return child.stable
    return None


def _columns(items: list[dict[str, Any]]) -> list[Column]:
    return [Column(str(c["name"]), parse_type(str(c["type"]))) for c in items]


def _altered(schema: StableSchema, meta: dict[str, Any]) -> StableSchema:
    """``schema`` with an ``alter`` meta entry's change (see the module docstring)."""
    columns, tags = list(schema.columns), list(schema.tags)
    how = meta.get("alterType")
    name = meta.get("colName")
    if how in ("drop_column", "drop_tag"):
        return StableSchema(schema.name, [c for c in columns if c.name != name], [t for t in tags if t.name != name])
    if how == "rename_tag":
        return StableSchema(schema.name, columns, [Column(str(meta["colNewName"]), t.type) if t.name == name else t
                                                   for t in tags])
    if how == "modify_column":
        changes = [{"name": name, "type": meta["colType"], "tag": False, "change": "modify"}]
    elif how in ("add_column", "add_tag"):
        changes = [{"name": meta["colName"], "type": meta["colType"], "tag": how == "add_tag", "change": "add"}]
    elif how == "schemaless":
        changes = list(meta.get("changes") or [])
    else:
        return schema
    for change in changes:
        column = Column(str(change["name"]), parse_type(str(change["type"])))
        target = tags if change.get("tag") else columns
        if change.get("change") == "modify":
            target[:] = [column if c.name == column.name else c for c in target]
        elif all(c.name != column.name for c in (*columns, *tags)):
            target.append(column)
    return StableSchema(schema.name, columns, tags)
