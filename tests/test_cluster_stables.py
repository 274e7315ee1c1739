"""A broker that holds no replica of a shared SQL database keeps the supertables the cluster
records in etcd (``TopicRegistry.set_stables``, applied by broker/cluster/topics.py): made,
altered and dropped to match, the cached schemas forgotten."""

from __future__ import annotations

from pathlib import Path

from tmqgate.broker.topics import TopicRegistry
from tmqgate.broker.tsdb.catalog import TsdbCatalog
from tmqgate.storage import Store


def _schema(name: str, *columns: str) -> dict[str, object]:
    return {"name": name, "columns": [["ts", "TIMESTAMP"], *([c, "INT"] for c in columns)], "tags": [["k", "INT"]]}


def test_the_supertables_of_a_database_follow_the_clusters(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.create_database("db", 2, kind="tsdb")
        catalog = TsdbCatalog(store)
        registry = TopicRegistry(store, catalog)
        registry.set_stables("db", {"a": _schema("a", "v"), "b": _schema("b", "w")})
        assert dict(store.stables("db")) == {"a": _schema("a", "v"), "b": _schema("b", "w")}
        schema = catalog.schema("db", "a")
        assert schema is not None and [c.name for c in schema.columns] == ["ts", "v"]
        registry.set_stables("db", {"a": _schema("a", "v", "x")})  # a altered, b dropped
        assert dict(store.stables("db")) == {"a": _schema("a", "v", "x")}
        schema = catalog.schema("db", "a")
        assert schema is not None and [c.name for c in schema.columns] == ["ts", "v", "x"]  # not the cached one
        assert store.next_version("db", 0) == store.next_version("db", 1) == 0  # no meta entry logged
