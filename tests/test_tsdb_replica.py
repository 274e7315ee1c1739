"""A replica of a SQL database's vnode (broker/tsdb/replica.py): the leader's meta entries, stored
as they are, make the same catalog changes on the follower — supertables created, altered
(ADD COLUMN / TAG, schemaless add and widen) and dropped, child tables created with their tags
and dropped — in the same write as the entry; a meta entry it does not know changes nothing."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tmqgate.broker.tsdb.catalog import TsdbCatalog, meta_payload, schema_from_json
from tmqgate.broker.tsdb.replica import append_replicated
from tmqgate.storage import Store

META = 1


def _entry(payload: bytes, ts: int = 1234) -> bytes:
    return struct.pack(">q", ts) + payload


def _schema(store: Store, name: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    data = store.stable("db", name)
    assert data is not None
    schema = schema_from_json(data)
    return [(c.name, str(c.type)) for c in schema.columns], [(t.name, str(t.type)) for t in schema.tags]


def test_a_followers_catalog_follows_the_meta_entries(tmp_path: Path) -> None:
    with Store(tmp_path / "f") as store:
        store.create_database("db", 2, kind="tsdb")
        catalog = TsdbCatalog(store)
        version = {0: 0, 1: 0}

        def apply(vnode: int, payload: bytes) -> None:
            append_replicated(store, catalog, "db", vnode, version[vnode], META, _entry(payload), 1)
            version[vnode] += 1

        create = meta_payload("create", "super", "st", stable="st",
                              columns=[{"name": "ts", "type": "TIMESTAMP"}, {"name": "v", "type": "INT"}],
                              tags=[{"name": "loc", "type": "VARCHAR(8)"}])
        apply(0, create)
        apply(1, create)  # logged on every vnode: the second changes nothing
        assert _schema(store, "st") == ([("ts", "TIMESTAMP"), ("v", "INT")], [("loc", "VARCHAR(8)")])
        assert catalog.schema("db", "st") is not None
        apply(0, meta_payload("alter", "super", "st", stable="st", alterType="add_column", colName="w",
                              colType="DOUBLE"))
        apply(1, meta_payload("alter", "super", "st", stable="st", alterType="add_tag", colName="grp",
                              colType="INT"))
        apply(0, meta_payload("alter", "super", "st", stable="st", alterType="schemaless", changes=[
            {"name": "loc", "type": "VARCHAR(32)", "tag": True, "change": "modify"},
            {"name": "note", "type": "NCHAR(4)", "tag": False, "change": "add"}]))
        assert _schema(store, "st") == ([("ts", "TIMESTAMP"), ("v", "INT"), ("w", "DOUBLE"), ("note", "NCHAR(4)")],
                                        [("loc", "VARCHAR(32)"), ("grp", "INT")])
        cached = catalog.schema("db", "st")
        assert cached is not None and [c.name for c in cached.columns] == ["ts", "v", "w", "note"]  # not stale

        apply(1, meta_payload("create", "child", "d1", stable="st", using="st",
                              tags=[{"name": "loc", "type": "VARCHAR(32)", "value": "sf"},
                                    {"name": "grp", "type": "INT", "value": 3}]))
        child = store.child_table("db", "d1")
        assert child is not None and (child.stable, child.tags, child.vnode) == ("st", {"loc": "sf", "grp": 3}, 1)
        apply(0, b'{"type":"rename","tableType":"child","tableName":"d1"}')  # unknown: stored, nothing changed
        apply(0, b"not json")
        # a newer leader's type or a field missing: stored, nothing changed (refused, this copy
        # would stop at it for ever)
        apply(0, meta_payload("create", "super", "s2", stable="s2", columns=[{"name": "ts", "type": "TIMESTAMP"},
                              {"name": "v", "type": "DECIMAL128(38)"}], tags=[]))
        apply(0, meta_payload("alter", "super", "st", stable="st", alterType="add_column", colName="x"))
        apply(0, b'["create"]')
        assert store.stable("db", "s2") is None and [c for c, _ in _schema(store, "st")[0]] == ["ts", "v", "w", "note"]
        assert store.child_table("db", "d1") is not None
        apply(1, meta_payload("drop", "child", "d1", stable="st", tableNameList=["d1"]))
        assert store.child_table("db", "d1") is None
        apply(1, meta_payload("create", "child", "d2", stable="st", using="st", tags=[]))
        apply(0, meta_payload("drop", "super", "st", stable="st"))
        assert store.stable("db", "st") is None and store.child_table("db", "d2") is None  # with its tables
        apply(1, meta_payload("drop", "super", "st", stable="st"))  # again on the other vnode: nothing
        assert [store.next_version("db", v) for v in (0, 1)] == [version[0], version[1]]  # every entry stored
        assert [e.version for e in store.read_entries("db", 0, 0, 1 << 20)] == list(range(version[0]))


def test_an_entry_that_does_not_follow_the_log_changes_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "f") as store:
        store.create_database("db", 1, kind="tsdb")
        catalog = TsdbCatalog(store)
        create = meta_payload("create", "super", "st", stable="st", columns=[{"name": "ts", "type": "TIMESTAMP"}],
                              tags=[])
        with pytest.raises(ValueError, match="replica append at 3, the log ends at 0"):
            append_replicated(store, catalog, "db", 0, 3, META, _entry(create), 1)
        assert store.stable("db", "st") is None and store.next_version("db", 0) == 0
