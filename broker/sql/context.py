"""What every statement runs against: `SqlContext`, the broker's collaborators the statement
handlers (ddl, insert, show, users, tmq_topics) share, and the catalog look-ups they all make.

It holds no statement's or session's state (that is passed along in each call), so the
broker's one `Executor` — a `SqlContext` with entry points — serves every caller. Its
`cluster` is always set: this node's `LocalSql` (broker/sql/local.py) unless the broker
replaces it with its cluster's, so each statement has one code path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.broker.sql.access import Access
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.local import LocalSql
from tmqgate.broker.sql.ports import GroupQueries, PlacementQueries, SqlCluster, TopicNames
from tmqgate.broker.tsdb.types import StableSchema

if TYPE_CHECKING:
    from tmqgate.broker.tsdb.catalog import TsdbCatalog
    from tmqgate.storage import Store


def find_database(store: Store, name: str | None) -> Any:
    """SQL database `name`'s info (SqlError: none named, or none such)."""
    if name is None:
        raise SqlError("Database not specified or available (USE db, or qualify the name as db.table)")
    info = store.get_database(name)
    if info is None or info.kind != "tsdb":
        raise SqlError(f"Database not exist: {name}")
    return info


def find_stable(catalog: TsdbCatalog, db: str, name: str) -> StableSchema:
    """Supertable `name` of database `db` (SqlError: none such)."""
    found = catalog.find_stable(db, name)
    if found is None:
        raise SqlError(f"STable not exist: {db}.{name}")
    schema = catalog.schema(db, found)
    assert schema is not None
    return schema


@dataclass(frozen=True)
class SelectLimits:
    """A SELECT's bounds (the broker's `sql_select_*` settings; broker/sql/select.py)."""

    max_bytes: int = 1 << 30
    memory_bytes: int = 1 << 30
    timeout_s: float = 60.0
    threads: int = max(1, os.cpu_count() or 1)


class SqlContext:
    """The store, the catalog, the topic registry, the data notifier's `notify`, the group and
    placement queries, the authorizer's `access` and the `cluster` (see the module docstring)."""

    def __init__(self, store: Store, catalog: TsdbCatalog, topics: TopicNames,
                 notify: Callable[[str, int], None], groups: GroupQueries,
                 access: Access | None, placement: PlacementQueries | None,
                 cluster: SqlCluster | None = None) -> None:
        self.store = store
        self.catalog = catalog
        self.topics = topics
        self.notify = notify
        self.groups = groups
        # SHOW DNODES / SHOW VGROUPS ask the broker (broker/cluster/dnodes.py); None: not answered
        self.placement = placement
        # The broker's authorizer when one is on (broker/sql/access.py): every statement is
        # checked for its caller; None: nothing is checked.
        self.access = access
        # The databases this node holds alone, and the cluster (where each database is led,
        # the DDL that goes through etcd): this node's (a cluster of one) unless one is given.
        self.local = LocalSql(topics, notify)
        self.cluster: SqlCluster = cluster or self.local
        # A SELECT's bounds (the broker sets them from its config)
        self.select_limits = SelectLimits()

    def cluster_of(self, db: str) -> SqlCluster:
        """Who makes and drops what is over database `db`: the cluster if it shares `db`, else
        this node (a database it holds alone)."""
        return self.cluster if self.cluster.leader(db) is not None else self.local

    def placement_queries(self) -> PlacementQueries:
        if self.placement is None:
            raise SqlError("This executor does not know the broker's nodes")
        return self.placement

    def name_free(self, name: str) -> None:
        """Databases are Kafka topics too, so a database, a Kafka topic and a TDengine topic
        may not share a name."""
        if self.topics.get(name) is not None:
            raise SqlError(f"Name already used by a topic or database: {name}")

    def changed(self, db: str, stable: str | None = None) -> None:
        self.catalog.invalidate(db, stable)
        self.topics.invalidate_views(db)
