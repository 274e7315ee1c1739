"""The catalog: databases (with their vnodes), supertables, child tables, TDengine topics.

Why in memory: the whole catalog — 100k child tables included — is loaded into dicts at
open, so lookups on the data plane (every produce and fetch names a database and a vnode)
never touch LevelDB. Catalog changes are always written with sync=True: they are rare and
losing one is worse than losing the tail of a WAL. Supertables, child tables and TDengine
topics change only through ``storage.txn`` (a change and the meta entry that logs it go in
one WriteBatch); this module holds what the transaction reads and, once it is written,
``apply``s it to memory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.model import (
    ChildTable,
    DatabaseExists,
    DatabaseInfo,
    TmqTopic,
    UnknownDatabase,
    UnknownVnode,
)
from tmqgate.storage.wal import Vnode

if TYPE_CHECKING:
    from tmqgate.storage.core import Core, WriteBatch

_T = TypeVar("_T")
# The most vnodes one database may have: a bound far above any real layout (the broker's own
# max_partitions is lower), so that an absurd count is refused before a loop over it.
MAX_VNODES = 1 << 20



class Database:
    """A database as the store holds it: its catalog entry and its vnodes' state."""

    __slots__ = ("info", "vnodes")

    def __init__(self, info: DatabaseInfo, vnodes: list[Vnode]) -> None:
        self.info = info
        self.vnodes = vnodes


class Catalog:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._dbs: dict[str, Database] = {}
        self._by_id: dict[int, Database] = {}
        self._stables: dict[int, dict[str, dict[str, Any]]] = {}
        self._ctables: dict[int, dict[str, ChildTable]] = {}
        self._topics: dict[str, TmqTopic] = {}

    def load(self) -> None:
        """Read databases (vnodes left empty for ``Wal.load_vnodes``), supertables, child
        tables and TDengine topics."""
        db = self._core.db
        by_id: dict[int, Database] = {}
        for key, value in db.iterator(prefix=keys.DBINFO):
            dbid = keys.read_u32(key[1:])
            meta = json.loads(value)
            conf = db.get(keys.dbconf_key(dbid))
            info = DatabaseInfo(
                name=meta["name"],
                vgroups=meta["vgroups"],
                topic_id=bytes.fromhex(meta["topic_id"]),
                configs=json.loads(conf) if conf else {},
                created_ms=meta["created_ms"],
                id=dbid,
                kind=meta.get("kind", "kafka"),
                options=meta.get("options", {}),
            )
            by_id[dbid] = Database(info, [Vnode() for _ in range(info.vgroups)])
        self._dbs = {d.info.name: d for d in by_id.values()}
        self._by_id = by_id
        self._stables = {dbid: {} for dbid in by_id}
        self._ctables = {dbid: {} for dbid in by_id}
        for key, value in db.iterator(prefix=keys.STABLE):
            stables = self._stables.get(keys.catalog_key_db(key))
            if stables is not None:
                stables[keys.catalog_key_name(key)] = json.loads(value)
        self._load_child_tables()
        for key, value in db.iterator(prefix=keys.TMQTOPIC):
            t = json.loads(value)
            self._topics[key[1:].decode()] = TmqTopic(
                bytes.fromhex(t["topic_id"]), t["definition"], t["created_ms"]
            )

    def _load_child_tables(self) -> None:
        """All child tables into dicts: per database one json.loads of a JSON array joined
        from the stored values ([name, stable, tags, vnode] each) and one C-level tuple
        construction per table — 100k tables load in a fraction of a second."""
        new = tuple.__new__
        for dbid, ctables in self._ctables.items():
            p = keys.db_prefix(keys.CTABLE, dbid)
            values = list(self._core.db.iterator(prefix=p, include_key=False))
            if values:
                parsed = json.loads(b"[" + b",".join(values) + b"]")
                ctables.update({t[0]: new(ChildTable, t) for t in parsed})

    # databases -----------------------------------------------------------------------------

    def create_database(
        self,
        name: str,
        vgroups: int,
        configs: dict[str, str] | None = None,
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
        kind: str = "kafka",
        options: dict[str, Any] | None = None,
    ) -> DatabaseInfo:
        """Create a database of ``vgroups`` empty vnodes with a fresh numeric id and topic id.

        ``kind`` "kafka" (plain topics) or "tsdb" (SQL databases); ``options`` are stored as
        given (JSON-able) — retention reads wal_retention_period / wal_retention_size.
        """
        if name in self._dbs:
            raise DatabaseExists(name)
        if not 1 <= vgroups <= MAX_VNODES:
            raise ValueError(f"vgroups must be in 1..{MAX_VNODES}, not {vgroups}")
        if kind not in ("kafka", "tsdb"):
            raise ValueError("kind must be 'kafka' or 'tsdb'")
        core = self._core
        raw = core.db.get(keys.NEXTDB)
        dbid = keys.read_u32(raw) if raw else 1
        info = DatabaseInfo(
            name=name,
            vgroups=vgroups,
            topic_id=topic_id if topic_id is not None else uuid.uuid4().bytes,
            configs={str(k): str(v) for k, v in (configs or {}).items()},
            created_ms=clock.now_ms() if created_ms is None else created_ms,
            id=dbid,
            kind=kind,
            options=dict(options or {}),
        )
        if len(info.topic_id) != 16:
            raise ValueError("topic_id must be 16 bytes")
        wb = core.batch(sync=True)
        wb.put(keys.NEXTDB, keys.u32(dbid + 1))
        wb.put(keys.name_key(name), keys.u32(dbid))
        wb.put(keys.dbinfo_key(dbid), _dbinfo_json(info))
        wb.put(keys.dbconf_key(dbid), json.dumps(info.configs).encode())
        wb.put(keys.topic_id_key(info.topic_id), keys.u32(dbid))
        for v in range(vgroups):
            wb.put(keys.vnode_key(dbid, v), keys.pack_vnode_state(0, 0, 0, 0))
        core.write(wb)
        d = Database(info, [Vnode() for _ in range(vgroups)])
        self._dbs[name] = d
        self._by_id[dbid] = d
        self._stables[dbid] = {}
        self._ctables[dbid] = {}
        return info

    def stage_drop(self, wb: WriteBatch, d: Database) -> None:
        """Put the deletion of ``d``'s catalog entry into ``wb`` (the caller adds what else
        goes with it, writes it, then calls ``forget``)."""
        wb.delete(keys.name_key(d.info.name))
        wb.delete(keys.dbinfo_key(d.info.id))
        wb.delete(keys.dbconf_key(d.info.id))
        wb.delete(keys.topic_id_key(d.info.topic_id))

    def forget(self, d: Database) -> None:
        """Drop ``d`` from memory once its catalog deletion is written."""
        del self._dbs[d.info.name]
        del self._by_id[d.info.id]
        self._stables.pop(d.info.id, None)
        self._ctables.pop(d.info.id, None)

    def databases(self) -> list[DatabaseInfo]:
        return sorted((d.info for d in self._dbs.values()), key=lambda i: i.name)

    def get_database(self, name: str) -> DatabaseInfo | None:
        d = self._dbs.get(name)
        return d.info if d else None

    def database_by_topic_id(self, topic_id: bytes) -> DatabaseInfo | None:
        """For Fetch/Metadata versions that address topics by id."""
        for d in self._dbs.values():
            if d.info.topic_id == topic_id:
                return d.info
        return None

    def add_vnodes(self, name: str, new_count: int) -> DatabaseInfo:
        """CreatePartitions: grow the database to ``new_count`` vnodes (never shrinks)."""
        d = self.database(name)
        old = d.info.vgroups
        if new_count <= old:
            raise ValueError(f"new vnode count {new_count} must exceed {old}")
        if new_count > MAX_VNODES:  # refused before one key is written or one vnode built
            raise ValueError(f"new vnode count {new_count} is over the limit of {MAX_VNODES} per database")
        info = replace(d.info, vgroups=new_count)
        wb = self._core.batch(sync=True)
        wb.put(keys.dbinfo_key(info.id), _dbinfo_json(info))
        for v in range(old, new_count):
            wb.put(keys.vnode_key(info.id, v), keys.pack_vnode_state(0, 0, 0, 0))
        self._core.write(wb)
        d.info = info
        d.vnodes.extend(Vnode() for _ in range(old, new_count))
        return info

    def set_configs(self, name: str, configs: dict[str, str | None], *, merge: bool = False) -> DatabaseInfo:
        """Replace the database's configs (AlterConfigs), or with ``merge`` update them
        (a value of None then removes that config)."""
        d = self.database(name)
        merged = dict(d.info.configs) if merge else {}
        for k, v in configs.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[str(k)] = str(v)
        self._core.db.put(keys.dbconf_key(d.info.id), json.dumps(merged).encode(), sync=True)
        info = replace(d.info, configs=merged)
        d.info = info
        return info

    def set_options(self, name: str, options: dict[str, Any], *, merge: bool = True) -> DatabaseInfo:
        """ALTER DATABASE: update the TDengine options (a value of None removes one), or with
        ``merge=False`` replace them all."""
        d = self.database(name)
        merged = dict(d.info.options) if merge else {}
        for k, v in options.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        info = replace(d.info, options=merged)
        self._core.db.put(keys.dbinfo_key(info.id), _dbinfo_json(info), sync=True)
        d.info = info
        return info

    # lookups for the other parts -----------------------------------------------------------

    def database(self, name: str) -> Database:
        """The database, or UnknownDatabase."""
        d = self._dbs.get(name)
        if d is None:
            raise UnknownDatabase(name)
        return d

    def by_id(self, dbid: int) -> Database | None:
        return self._by_id.get(dbid)

    def all_databases(self) -> Iterable[Database]:
        """Every database (a live view: copy it before dropping databases while iterating)."""
        return self._dbs.values()

    def vnode(self, name: str, vnode: int) -> tuple[int, Vnode]:
        """(db id, vnode state) or UnknownDatabase / UnknownVnode."""
        d = self._dbs.get(name)
        if d is None:
            raise UnknownDatabase(name)
        if not 0 <= vnode < len(d.vnodes):
            raise UnknownVnode(f"{name} vnode {vnode}")
        return d.info.id, d.vnodes[vnode]

    def vnode_by_id(self, dbid: int, vnode: int) -> Vnode | None:
        """The vnode's current state, or None once its database is gone."""
        d = self._by_id.get(dbid)
        if d is None or vnode >= len(d.vnodes):
            return None
        return d.vnodes[vnode]

    # supertables, child tables, TDengine topics --------------------------------------------

    def stables(self, db: str) -> Mapping[str, dict[str, Any]]:
        """Supertable name -> schema JSON: a read-only live view (do not mutate the schemas)."""
        return MappingProxyType(self._stables[self.database(db).info.id])

    def stable(self, db: str, name: str) -> dict[str, Any] | None:
        return self._stables[self.database(db).info.id].get(name)

    def child_tables(self, db: str) -> Mapping[str, ChildTable]:
        """Child table name -> ChildTable: a read-only live view, no copy (100k tables)."""
        return MappingProxyType(self._ctables[self.database(db).info.id])

    def child_table(self, db: str, name: str) -> ChildTable | None:
        return self._ctables[self.database(db).info.id].get(name)

    def stables_of(self, dbid: int) -> Mapping[str, dict[str, Any]]:
        """``stables`` by db id (for the transaction, which has resolved the name)."""
        return self._stables[dbid]

    def child_tables_of(self, dbid: int) -> Mapping[str, ChildTable]:
        """``child_tables`` by db id (for the transaction, which has resolved the name)."""
        return self._ctables[dbid]

    def tmq_topics(self) -> dict[str, TmqTopic]:
        """name -> (topic_id, definition, created_ms)."""
        return dict(self._topics)

    def tmq_topic(self, name: str) -> TmqTopic | None:
        return self._topics.get(name)

    def tmq_topic_by_id(self, topic_id: bytes) -> tuple[str, TmqTopic] | None:
        for name, t in self._topics.items():
            if t.topic_id == topic_id:
                return name, t
        return None

    def apply(
        self,
        stables: Mapping[tuple[int, str], dict[str, Any] | None],
        ctables: Mapping[tuple[int, str], ChildTable | None],
        topics: Mapping[str, TmqTopic | None],
    ) -> None:
        """Take a committed transaction's changes into memory (None = dropped); changes to
        a database dropped meanwhile are ignored."""
        for (dbid, name), schema in stables.items():
            if dbid in self._stables:
                _set_or_pop(self._stables[dbid], name, schema)
        for (dbid, name), t in ctables.items():
            if dbid in self._ctables:
                _set_or_pop(self._ctables[dbid], name, t)
        for name, topic in topics.items():
            _set_or_pop(self._topics, name, topic)


def _set_or_pop(objects: dict[str, _T], name: str, value: _T | None) -> None:
    if value is None:
        objects.pop(name, None)
    else:
        objects[name] = value


def _dbinfo_json(info: DatabaseInfo) -> bytes:
    return json.dumps(
        {
            "name": info.name,
            "vgroups": info.vgroups,
            "topic_id": info.topic_id.hex(),
            "created_ms": info.created_ms,
            "kind": info.kind,
            "options": info.options,
        }
    ).encode()
