"""Transaction: catalog changes and WAL entries staged into one LevelDB WriteBatch.

TDengine logs DDL (create/alter/drop of a supertable or table) as a meta entry in the WAL of
the vnodes concerned. The catalog row and that meta entry must agree after a crash: both or
neither. So the broker writes them through one transaction::

    with store.transaction() as tx:
        tx.create_stable("db", "st", schema)
        for vnode in range(vgroups):
            tx.append_meta("db", vnode, meta_json)

Everything staged goes to disk in one ``WriteBatch`` when the ``with`` block ends (synced:
catalog changes are always synced) — the WAL entries' bytes just before it, in one batch to
the payload log, with the same sync flag (``storage.keys``: a payload nothing indexes is
dropped at open) — and only then is the in-memory state (catalog dicts, vnode counters, hot
tail) updated. An exception inside the block discards the batch:
nothing reaches disk or memory. Reads inside the block (``tx.stable``, ``tx.child_table``)
see the transaction's own staged changes; ``store.*`` reads do not until it commits.

The broker is single-threaded: do not ``await`` inside the block. If another writer appends
to a vnode the transaction appended to before it commits, ``commit`` raises
``TransactionConflict`` and keeps nothing (versions would otherwise collide).

An idempotent producer's batch that became rows (a database topic's Produce) is recorded with
``tx.producer_batch(db, vnode, producer)``: the producer's window after it is staged in the
same WriteBatch as the rows entries at commit — once the versions they take are known — so a
crash keeps both or neither, and a retried batch finds the window that answers it.

Store's single-object catalog methods (``create_stable`` ...) and ``append_rows`` /
``append_meta`` are one-operation transactions, so there is one implementation of each rule;
``commit`` writes through the same write path as ``Store.append`` (``Core.write_entries``).
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tmqgate.protocol import clock
from tmqgate.storage import keys
from tmqgate.storage.core import NewEntry
from tmqgate.storage.model import (
    ChildTable,
    StableExists,
    StorageError,
    TableExists,
    TmqTopic,
    TopicExists,
    TransactionConflict,
    UnknownStable,
    UnknownTable,
    UnknownTopic,
    UnknownVnode,
)
from tmqgate.storage.producers import WINDOW_BATCHES, ProducerWindow

if TYPE_CHECKING:
    from tmqgate.storage.catalog import Catalog
    from tmqgate.storage.core import Core
    from tmqgate.storage.producers import BatchMeta, ProducerAppend, Producers
    from tmqgate.storage.wal import Vnode
    from tmqgate.storage.wal_txns import OpenTxn, WalTxns

_DELETED = None
_I64 = struct.Struct(">q")
#: A JSONEncoder built once: json.dumps with options builds a new one per call (5x slower).
_encode = json.JSONEncoder(separators=(",", ":")).encode
_new_tuple = tuple.__new__



def ctable_value(t: ChildTable) -> bytes:
    """CTABLE value: the ChildTable as a compact JSON array [name, stable, tags, vnode], so
    open() parses all child tables of a database with one loads() and no key decoding."""
    return _encode(t).encode()


class _Draft:
    """A vnode's counters as the transaction will leave them, plus the entries it adds."""

    __slots__ = ("dbid", "vnode", "vs", "start", "next", "size", "entries", "max_ts", "max_ts_base", "added")

    def __init__(self, dbid: int, vnode: int, vs: Vnode) -> None:
        self.dbid = dbid
        self.vnode = vnode
        self.vs = vs
        self.start = (vs.next, vs.log_start, vs.size)
        self.next = vs.next
        self.size = vs.size
        self.entries = vs.entries
        self.max_ts = vs.max_ts
        self.max_ts_base = vs.max_ts_base
        self.added: list[tuple[int, int, bytes]] = []


class Transaction:
    """See the module docstring. Obtain one from ``Store.transaction()``."""

    def __init__(
        self,
        core: Core,
        catalog: Catalog,
        *,
        sync: bool,
        tail_cache_bytes: int,
        producers: Producers | None = None,
        txns: WalTxns | None = None,
    ) -> None:
        self._core = core
        self._producers = producers
        # (db id, vnode) -> the idempotent producer's batch these entries are (producer_batch)
        self._producer_batches: dict[tuple[int, int], ProducerAppend] = {}
        # (db id, vnode) -> a leader's producer batch that a replicated entry ends (append_raw)
        self._replica_windows: dict[tuple[int, int], tuple[int, int, BatchMeta]] = {}
        self._txns = txns
        # Rows entries of transactional producers: (db id, vnode, producer id) -> the open
        # transaction as this WriteBatch leaves it (storage.wal_txns).
        self._txn_rows: dict[tuple[int, int, int], OpenTxn] = {}
        self._catalog = catalog
        self._sync = sync
        self._tail_cache_bytes = tail_cache_bytes
        self._wb = core.batch(sync=sync)
        # WAL entries in staging order; their index keys are put at commit, once the
        # payloads have sequences.
        self._entries: list[NewEntry] = []
        self._stables: dict[tuple[int, str], dict[str, Any] | None] = {}
        self._ctables: dict[tuple[int, str], ChildTable | None] = {}
        self._topics: dict[str, TmqTopic | None] = {}
        self._drafts: dict[tuple[int, int], _Draft] = {}
        self._open = True

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    # reads through the overlay -------------------------------------------------------------

    def _dbid(self, db: str) -> int:
        return self._catalog.database(db).info.id

    def _stable(self, dbid: int, name: str) -> dict[str, Any] | None:
        k = (dbid, name)
        if k in self._stables:
            return self._stables[k]
        return self._catalog.stables_of(dbid).get(name)

    def _ctable(self, dbid: int, name: str) -> ChildTable | None:
        k = (dbid, name)
        if k in self._ctables:
            return self._ctables[k]
        return self._catalog.child_tables_of(dbid).get(name)

    def _topic(self, name: str) -> TmqTopic | None:
        if name in self._topics:
            return self._topics[name]
        return self._catalog.tmq_topic(name)

    def stable(self, db: str, name: str) -> dict[str, Any] | None:
        """The supertable's schema JSON as this transaction sees it."""
        return self._stable(self._dbid(db), name)

    def child_table(self, db: str, name: str) -> ChildTable | None:
        """The child table as this transaction sees it."""
        return self._ctable(self._dbid(db), name)

    def _check_open(self) -> None:
        if not self._open:
            raise StorageError("transaction already finished")

    # supertables ---------------------------------------------------------------------------

    def create_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        self._check_open()
        dbid = self._dbid(db)
        if self._stable(dbid, name) is not None:
            raise StableExists(f"{db}.{name}")
        if self._ctable(dbid, name) is not None:
            raise TableExists(f"{db}.{name} is a child table")
        self._wb.put(keys.stable_key(dbid, name), json.dumps(schema_json).encode())
        self._stables[(dbid, name)] = schema_json

    def alter_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        """Replace the supertable's schema (ADD COLUMN/TAG ...: the broker sends the new one)."""
        self._check_open()
        dbid = self._dbid(db)
        if self._stable(dbid, name) is None:
            raise UnknownStable(f"{db}.{name}")
        self._wb.put(keys.stable_key(dbid, name), json.dumps(schema_json).encode())
        self._stables[(dbid, name)] = schema_json

    def drop_stable(self, db: str, name: str) -> int:
        """Drop the supertable and, as TDengine does, all its child tables; returns how many."""
        self._check_open()
        dbid = self._dbid(db)
        if self._stable(dbid, name) is None:
            raise UnknownStable(f"{db}.{name}")
        children = [
            n
            for n, t in self._catalog.child_tables_of(dbid).items()
            if t.stable == name and (dbid, n) not in self._ctables
        ]
        children += [
            n for (d, n), t in self._ctables.items() if d == dbid and t is not None and t.stable == name
        ]
        for n in children:
            self._wb.delete(keys.ctable_key(dbid, n))
            self._ctables[(dbid, n)] = _DELETED
        self._wb.delete(keys.stable_key(dbid, name))
        self._stables[(dbid, name)] = _DELETED
        return len(children)

    # child tables --------------------------------------------------------------------------

    def create_child_table(
        self, db: str, name: str, stable: str, tags_json: dict[str, Any], vnode: int
    ) -> ChildTable:
        self.create_child_tables(db, ((name, stable, tags_json, vnode),))
        return self._ctables[(self._dbid(db), name)]  # type: ignore[return-value]

    def create_child_tables(self, db: str, tables: Iterable[tuple[str, str, dict[str, Any], int]]) -> int:
        """Many (name, stable, tags, vnode) at once; returns how many were staged.

        The per-table path is kept lean (lookups hoisted, one shared encoder): schemaless
        writers create tables by the ten thousand.
        """
        self._check_open()
        d = self._catalog.database(db)
        dbid = d.info.id
        nvnodes = len(d.vnodes)
        existing = self._catalog.child_tables_of(dbid)
        staged = self._ctables
        stables = self._catalog.stables_of(dbid)
        staged_stables = self._stables
        put = self._wb.put
        prefix = keys.db_prefix(keys.CTABLE, dbid)
        known: set[str] = set()
        n = 0
        for name, stable, tags, vnode in tables:
            k = (dbid, name)
            if (staged[k] if k in staged else existing.get(name)) is not None:
                raise TableExists(f"{db}.{name}")
            if (staged_stables[k] if k in staged_stables else stables.get(name)) is not None:
                raise StableExists(f"{db}.{name} is a supertable")
            if stable not in known:
                if self._stable(dbid, stable) is None:
                    raise UnknownStable(f"{db}.{stable}")
                known.add(stable)
            if not 0 <= vnode < nvnodes:
                raise UnknownVnode(f"{db} vnode {vnode}")
            t = _new_tuple(ChildTable, (name, stable, dict(tags), vnode))
            put(prefix + name.encode(), _encode(t).encode())
            staged[k] = t
            n += 1
        return n

    def drop_child_table(self, db: str, name: str) -> ChildTable:
        self._check_open()
        dbid = self._dbid(db)
        t = self._ctable(dbid, name)
        if t is None:
            raise UnknownTable(f"{db}.{name}")
        self._wb.delete(keys.ctable_key(dbid, name))
        self._ctables[(dbid, name)] = _DELETED
        return t

    def set_child_tags(
        self, db: str, name: str, tags_json: dict[str, Any], *, merge: bool = True
    ) -> ChildTable:
        """ALTER TABLE ... SET TAG: update the given tags (``merge``) or replace them all."""
        self._check_open()
        dbid = self._dbid(db)
        t = self._ctable(dbid, name)
        if t is None:
            raise UnknownTable(f"{db}.{name}")
        tags = {**t.tags, **tags_json} if merge else dict(tags_json)
        new = t._replace(tags=tags)
        self._wb.put(keys.ctable_key(dbid, name), ctable_value(new))
        self._ctables[(dbid, name)] = new
        return new

    # TDengine topics -----------------------------------------------------------------------

    def create_tmq_topic(
        self,
        name: str,
        definition: dict[str, Any],
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
    ) -> bytes:
        self._check_open()
        if self._topic(name) is not None:
            raise TopicExists(name)
        tid = uuid.uuid4().bytes if topic_id is None else topic_id
        if len(tid) != 16:
            raise ValueError("topic_id must be 16 bytes")
        t = TmqTopic(tid, definition, clock.now_ms() if created_ms is None else created_ms)
        value = {"topic_id": tid.hex(), "definition": definition, "created_ms": t.created_ms}
        self._wb.put(keys.tmq_topic_key(name), json.dumps(value).encode())
        self._topics[name] = t
        return tid

    def drop_tmq_topic(self, name: str) -> TmqTopic:
        self._check_open()
        t = self._topic(name)
        if t is None:
            raise UnknownTopic(name)
        self._wb.delete(keys.tmq_topic_key(name))
        self._topics[name] = _DELETED
        return t

    # WAL -----------------------------------------------------------------------------------

    def _draft(self, db: str, vnode: int) -> _Draft:
        dbid, vs = self._catalog.vnode(db, vnode)
        d = self._drafts.get((dbid, vnode))
        if d is None:
            d = self._drafts[(dbid, vnode)] = _Draft(dbid, vnode, vs)
        return d

    def _stage(
        self, d: _Draft, kind: int, value: bytes, count: int, age_ts: int, index_ts: int | None
    ) -> int:
        base = d.next
        wb = self._wb
        self._entries.append(NewEntry(keys.wal_key(d.dbid, d.vnode, base, kind), value, age_ts, index_ts or 0))
        d.next = base + count
        d.size += len(value)
        d.entries += 1
        if index_ts is not None and (d.max_ts is None or index_ts > d.max_ts):
            wb.put(keys.time_key(d.dbid, d.vnode, index_ts), keys.u64(base))
            d.max_ts, d.max_ts_base = index_ts, base
        # Put once per entry; the last put of a key in a WriteBatch wins.
        wb.put(
            keys.vnode_key(d.dbid, d.vnode),
            keys.pack_vnode_state(d.next, d.vs.log_start, d.size, d.entries),
        )
        d.added.append((base, kind, value))
        return base

    def append_meta(self, db: str, vnode: int, payload: bytes, timestamp_ms: int | None = None) -> int:
        """A meta entry (one version) in this transaction; returns its version."""
        self._check_open()
        d = self._draft(db, vnode)
        ts = clock.now_ms() if timestamp_ms is None else timestamp_ms
        value = _I64.pack(ts) + bytes(payload)
        return self._stage(d, keys.KIND_META, value, 1, ts, None)

    def append_raw(self, db: str, vnode: int, version: int, kind: int, value: bytes, count: int, *,
                   txn_producer: tuple[int, int] | None = None,
                   producer_batch: tuple[int, int, BatchMeta] | None = None) -> None:
        """A follower's copy of its leader's meta or rows entry, stored as the leader stored it
        (``Wal.raw_entries``) at the leader's version, which must be where this vnode's log
        ends (ValueError otherwise, or for another kind or a malformed value). What the
        leader knows of it beside (``Store.replica_marks``): ``txn_producer``, the (producer
        id, epoch) of the open or aborted transaction a rows entry is in (it joins that
        transaction here, as ``append_rows``'); ``producer_batch``, the (producer id, epoch,
        batch) of an idempotent producer's batch that ends with this entry (the producer's
        window here takes it, so this replica deduplicates a retry as its leader would)."""
        self._check_open()
        d = self._draft(db, vnode)
        if version != d.next:
            raise ValueError(f"replica append at {version}, the log ends at {d.next}")
        if kind == keys.KIND_META and len(value) >= 8 and count == 1:
            self._stage(d, kind, bytes(value), 1, _I64.unpack_from(value)[0], None)
        elif kind == keys.KIND_ROWS and len(value) >= keys.ROWS_HEADER.size and count >= 1:
            ts, max_timestamp, _ = keys.ROWS_HEADER.unpack_from(value)
            self._stage(d, kind, bytes(value), count, ts, max_timestamp)
            if txn_producer is not None and self._txns is not None:
                pid, epoch = txn_producer
                k = (d.dbid, d.vnode, pid)
                self._txn_rows[k] = self._txns.stage_rows(self._wb, d.dbid, d.vnode, pid, epoch, version, count,
                                                          self._txn_rows.get(k))
        else:
            raise ValueError(f"not a meta or rows entry (kind {kind}, {len(value)} bytes, {count} versions)")
        if producer_batch is not None:
            self._replica_windows[(d.dbid, d.vnode)] = producer_batch

    def append_rows(
        self,
        db: str,
        vnode: int,
        payload: bytes | bytearray | memoryview,
        row_count: int,
        max_timestamp: int,
        min_timestamp: int,
        timestamp_ms: int | None = None,
        txn_producer: tuple[int, int] | None = None,
    ) -> int:
        """A rows entry taking ``row_count`` versions in this transaction; returns its base.
        ``txn_producer``: (producer id, epoch) of the transactional producer whose rows these
        are (the entry opens or joins its transaction on the vnode, ``storage.wal_txns``)."""
        self._check_open()
        if row_count < 1:
            raise ValueError("row_count must be >= 1")
        d = self._draft(db, vnode)
        ts = clock.now_ms() if timestamp_ms is None else timestamp_ms
        value = b"".join((keys.ROWS_HEADER.pack(ts, max_timestamp, min_timestamp), payload))
        base = self._stage(d, keys.KIND_ROWS, value, row_count, ts, max_timestamp)
        if txn_producer is not None:
            if self._txns is None:
                raise RuntimeError("this store keeps no transactions")
            pid, epoch = txn_producer
            k = (d.dbid, d.vnode, pid)
            self._txn_rows[k] = self._txns.stage_rows(self._wb, d.dbid, d.vnode, pid, epoch, base, row_count,
                                                      self._txn_rows.get(k))
        return base

    def producer_batch(self, db: str, vnode: int, producer: ProducerAppend) -> None:
        """Record that the entries this transaction adds to ``vnode`` are one idempotent
        producer's batch (``check_sequence`` accepted it): at commit the producer's window
        after it is staged in the same WriteBatch, the batch's offsets being the versions the
        transaction adds to the vnode, first to last (a duplicate is answered with the first).
        Add the batch's entries, and only them, to that vnode in this transaction."""
        self._check_open()
        if self._producers is None:
            raise StorageError("this transaction cannot record producer batches")
        dbid, _ = self._catalog.vnode(db, vnode)
        if (dbid, vnode) in self._producer_batches:
            raise StorageError(f"vnode {vnode} of {db} already has a producer batch in this transaction")
        self._producer_batches[(dbid, vnode)] = producer

    def _stage_producer_windows(self) -> list[tuple[int, int, int, ProducerWindow]]:
        """Each recorded producer batch's window, put into the WriteBatch; (db id, vnode,
        producer id, window) to cache once written."""
        staged: list[tuple[int, int, int, ProducerWindow]] = []
        for (dbid, vnode), (pid, epoch, batch) in self._replica_windows.items():
            assert self._producers is not None
            before = self._producers.window(dbid, vnode, pid)
            kept = before.batches if before is not None and before.epoch == epoch else ()
            window = ProducerWindow(epoch, (*kept, batch)[-WINDOW_BATCHES:],
                                    -1 if before is None else before.coordinator_epoch)
            self._producers.stage(self._wb, dbid, vnode, pid, window)
            staged.append((dbid, vnode, pid, window))
        if not self._producer_batches:
            return staged
        assert self._producers is not None
        for (dbid, vnode), producer in self._producer_batches.items():
            d = self._drafts.get((dbid, vnode))
            if d is None or d.start[0] == d.next:
                self._wb.clear()
                raise StorageError(f"producer {producer.producer_id}'s batch added no entry to vnode {vnode}")
            window = producer.window_at(d.start[0], d.next - 1)
            self._producers.stage(self._wb, dbid, vnode, producer.producer_id, window)
            staged.append((dbid, vnode, producer.producer_id, window))
        return staged

    # end -----------------------------------------------------------------------------------

    def abort(self) -> None:
        """Discard everything staged."""
        self._open = False
        self._wb.clear()
        self._entries.clear()
        self._txn_rows.clear()

    def commit(self) -> None:
        """Write the batch (through the one write path, ``Core.write_entries``), then apply
        the staged state to memory."""
        self._check_open()
        self._open = False
        for d in self._drafts.values():
            vs = d.vs
            alive = self._catalog.vnode_by_id(d.dbid, d.vnode) is vs
            if not alive or (vs.next, vs.log_start, vs.size) != d.start:
                self._wb.clear()
                raise TransactionConflict(f"vnode {d.vnode} of db id {d.dbid} changed during the transaction")
        windows = self._stage_producer_windows()
        if not (self._stables or self._ctables or self._topics or self._drafts):
            return
        self._core.write_entries(self._wb, self._entries, self._sync)
        if self._producers is not None:
            for dbid, vnode, producer_id, window in windows:
                self._producers.remember(dbid, vnode, producer_id, window)
        self._catalog.apply(self._stables, self._ctables, self._topics)
        cap = self._tail_cache_bytes
        for d in self._drafts.values():
            vs = d.vs
            vs.next = d.next
            vs.size = d.size
            vs.entries = d.entries
            vs.max_ts, vs.max_ts_base = d.max_ts, d.max_ts_base
            for base, kind, value in d.added:
                vs.cache(base, kind, value, cap)
        if self._txns is not None:
            for (dbid, vnode, pid), txn in self._txn_rows.items():
                self._txns.opened(dbid, vnode, pid, txn)
