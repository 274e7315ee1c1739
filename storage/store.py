"""Store: the facade that opens a data directory and composes the storage parts.

A store is two LevelDBs (layout in ``storage.keys``) shared by parts that each own one
concern, so that each can be read and changed alone:

* ``storage.core`` — the DB handles, the sync policy (wal_level / fsync period) and THE write
  path of WAL entries (payloads, then the index WriteBatch);
* ``storage.payloads`` — the payload log and its repair at open;
* ``storage.catalog`` — databases and their vnodes, supertables, child tables, TDengine topics;
* ``storage.wal`` — appending and reading entries, the in-memory vnode state, the time index;
* ``storage.txn`` — catalog changes and WAL entries in one WriteBatch;
* ``storage.retention`` — retention, DeleteRecords; ``storage.archiver`` — the archiver; both
  remove through ``storage.head_removal``, which records in ``storage.log_history``;
* ``storage.cleaner`` — the log cleaner of compacted topics;
* ``storage.producers`` — producer ids and idempotent producers' windows;
* ``storage.offsets`` — committed offsets and group metadata;
* ``storage.quotas`` — client quota entities and their values.
* ``storage.dynconfigs`` — dynamic BROKER and GROUP configs.
* ``storage.share_state`` — share groups' share-partition state.
* ``storage.users`` — users' SCRAM credentials (salt, iterations, StoredKey, ServerKey).
* ``storage.acls`` — the authorizer's ACL bindings.
* ``storage.txn_coordinator`` — the transaction coordinator's state per transactional id.

Callers (broker, coordinator, tests) talk to ``Store``; its methods delegate to the parts
(``store.catalog``, ``store.wal`` ... are there for code that wants a part directly). Only
what spans parts is written here: opening (in order: the payload log's repair, the catalog,
the vnodes, the log history, orphan data) and dropping a database. The broker is
single-threaded asyncio, so calls are plain and synchronous.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC
from tmqgate.storage import keys
from tmqgate.storage.acls import Acls
from tmqgate.storage.archiver import Archiver
from tmqgate.storage.catalog import Catalog
from tmqgate.storage.cleaner import Cleaner
from tmqgate.storage.core import Core
from tmqgate.storage.dynconfigs import ConfigResourceKey, DynamicConfigs
from tmqgate.storage.group_log import TXN_BASE, GroupLog, TransactionLog
from tmqgate.storage.head_removal import HeadRemoval
from tmqgate.storage.log_history import LogHistory
from tmqgate.storage.model import (
    ChildTable,
    CommittedOffset,
    DatabaseInfo,
    HistoryRecord,
    PendingOffset,
    RowsEntry,
    TmqTopic,
    WalEntry,
)
from tmqgate.storage.offsets import Offsets, StateOps
from tmqgate.storage.producers import ActiveProducer, BatchMeta, ProducerAppend, Producers, ProducerWindow
from tmqgate.storage.quotas import ClientQuotas
from tmqgate.storage.retention import Retention
from tmqgate.storage.share_state import ShareStates
from tmqgate.storage.txn import Transaction
from tmqgate.storage.txn_coordinator import TxnStates
from tmqgate.storage.users import Users
from tmqgate.storage.wal import Appended, Wal
from tmqgate.storage.wal_txns import WalTxns

__all__ = ["Store"]  # the model types are exported by the storage package

log = logging.getLogger("tmqgate.storage")


class Store:
    """The storage engine; see the module docstring and the parts' modules."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wal_level: int = 1,
        fsync_period_ms: int = 3000,
        *,
        write_buffer_size: int = 64 << 20,
        lru_cache_size: int = 64 << 20,
        tail_cache_bytes: int = 2 << 20,
        history_limit: int = 10_000,
        reserve_bytes: int = 0,
    ) -> None:
        if history_limit < 0:
            raise ValueError("history_limit must be >= 0")
        self.core = Core(
            path,
            wal_level,
            fsync_period_ms,
            write_buffer_size=write_buffer_size,
            lru_cache_size=lru_cache_size,
            reserve_bytes=reserve_bytes,
        )
        self.catalog = Catalog(self.core)
        self.producers = Producers(self.core)
        self.wal_txns = WalTxns(self.core)  # open transactions, aborted index (storage.wal_txns)
        self.wal = Wal(self.core, self.catalog, self.producers, tail_cache_bytes, self.wal_txns)
        self.history_log = LogHistory(self.core, self.catalog, history_limit)  # removals (storage.log_history)
        heads = HeadRemoval(self.core, self.catalog, self.history_log, self.wal_txns)
        self.retention = Retention(self.core, self.catalog, heads)
        self.archiver = Archiver(self.core, self.catalog, self.wal, heads)
        self.cleaner = Cleaner(self.core, self.catalog, self.wal_txns)  # compacted topics (storage.cleaner)
        self.group_log = GroupLog(self.core)  # __consumer_offsets as Kafka's records (storage.group_log)
        self.offsets = Offsets(self.core, self.group_log)
        self.client_quotas = ClientQuotas(self.core)
        self.dynamic_configs = DynamicConfigs(self.core)
        self.share_states = ShareStates(self.core, self.offsets)  # share groups' share-partitions (KIP-932)
        self.users = Users(self.core)  # SCRAM credentials (storage.users)
        self.acls = Acls(self.core)
        self.transaction_log = TransactionLog(self.group_log)  # __transaction_state's records
        self.txn_states = TxnStates(self.core, self.transaction_log)  # the txn coordinator's (storage.txn_coordinator)
        self.catalog.load()
        self.wal.load_vnodes()
        live = {d.info.id for d in self.catalog.all_databases()}
        self.history_log.load(live)
        self.wal_txns.load(live)
        self.core.delete_orphans(live)

    # lifecycle -----------------------------------------------------------------------------

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """Whether `path` holds a store (its LevelDB's CURRENT file), without opening it (so
        without creating one: ``Store(path)`` makes a new store where there is none)."""
        return os.path.isfile(os.path.join(path, "CURRENT"))

    @property
    def path(self) -> str:
        return self.core.path

    @property
    def created_ms(self) -> int:
        """When this data directory was made (epoch ms)."""
        return self.core.created_ms

    def joined_cluster(self) -> str | None:
        """The cluster whose ACLs and users this store holds (None: it never joined one)."""
        raw = self.core.db.get(keys.JOINED)
        return None if raw is None else raw.decode()

    def set_joined_cluster(self, cluster_id: str | None) -> None:
        """Record the cluster joined (None: offer what this store holds to it again at the next join)."""
        if cluster_id is None:
            self.core.db.delete(keys.JOINED, sync=True)
        else:
            self.core.db.put(keys.JOINED, cluster_id.encode(), sync=True)

    @property
    def wal_level(self) -> int:
        return self.core.wal_level

    @property
    def fsync_period_ms(self) -> int:
        return self.core.fsync_period_ms

    @property
    def needs_periodic_sync(self) -> bool:
        """True when the broker should call ``sync()`` every ``fsync_period_ms``."""
        return self.core.needs_periodic_sync

    def sync(self) -> None:
        self.core.sync()

    @property
    def read_only(self) -> str | None:
        """Why the store takes no new data (a full disk, ``storage.space``), or None."""
        return self.core.space.full_reason

    def check_space(self) -> bool:
        """Leave the read-only state if the disk has room again (reopening what a failed
        write left sticky, allocating the reserve); True when the store takes writes."""
        return self.core.space.check()

    def close(self) -> None:
        self.core.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # catalog: databases --------------------------------------------------------------------

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
        info = self.catalog.create_database(
            name, vgroups, configs, topic_id=topic_id, created_ms=created_ms, kind=kind, options=options
        )
        what = "topic" if kind == "kafka" else "database"
        log.info("created %s %s with %d partition(s)", what, name, vgroups,
                 extra={"event": f"{what}_created", "topic": name, "partitions": vgroups})
        return info

    def drop_database(self, name: str) -> None:
        """Remove a database: the catalog (and its log history) atomically first, then its
        data, supertables and child tables by range deletes (finished at open after a crash),
        then the deleted ranges are compacted so the disk space comes back now (LevelDB frees
        deleted keys only when it compacts them). Works on a full disk (``storage.space``)."""
        d = self.catalog.database(name)
        wb = self.core.batch(sync=True)
        self.catalog.stage_drop(wb, d)
        gone = self.history_log.stage_forget(wb, d.info.id)
        self.core.write(wb)
        self.catalog.forget(d)
        self.history_log.forget(gone)
        self.producers.forget_database(d.info.id)
        self.wal_txns.forget_database(d.info.id)
        self.core.delete_database_data(d.info.id, compact=True)
        what = "topic" if d.info.kind == "kafka" else "database"
        log.info("deleted %s %s", what, name, extra={"event": f"{what}_deleted", "topic": name})

    def databases(self) -> list[DatabaseInfo]:
        return self.catalog.databases()

    def get_database(self, name: str) -> DatabaseInfo | None:
        return self.catalog.get_database(name)

    def database_by_topic_id(self, topic_id: bytes) -> DatabaseInfo | None:
        return self.catalog.database_by_topic_id(topic_id)

    def add_vnodes(self, name: str, new_count: int) -> DatabaseInfo:
        return self.catalog.add_vnodes(name, new_count)

    def set_configs(self, name: str, configs: dict[str, str | None], *, merge: bool = False) -> DatabaseInfo:
        return self.catalog.set_configs(name, configs, merge=merge)

    def set_options(self, name: str, options: dict[str, Any], *, merge: bool = True) -> DatabaseInfo:
        return self.catalog.set_options(name, options, merge=merge)

    # catalog: supertables, child tables, TDengine topics -----------------------------------

    def transaction(self) -> Transaction:
        """Catalog changes and WAL entries written together in one synced WriteBatch; see
        ``storage.txn``. Use as ``with store.transaction() as tx: ...``."""
        return self.wal.transaction(sync=True)

    def stables(self, db: str) -> Mapping[str, dict[str, Any]]:
        return self.catalog.stables(db)

    def stable(self, db: str, name: str) -> dict[str, Any] | None:
        return self.catalog.stable(db, name)

    def create_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        with self.transaction() as tx:
            tx.create_stable(db, name, schema_json)

    def alter_stable(self, db: str, name: str, schema_json: dict[str, Any]) -> None:
        with self.transaction() as tx:
            tx.alter_stable(db, name, schema_json)

    def drop_stable(self, db: str, name: str) -> int:
        """Drops the supertable and its child tables; returns how many child tables went."""
        with self.transaction() as tx:
            return tx.drop_stable(db, name)

    def child_tables(self, db: str) -> Mapping[str, ChildTable]:
        return self.catalog.child_tables(db)

    def child_table(self, db: str, name: str) -> ChildTable | None:
        return self.catalog.child_table(db, name)

    def create_child_table(
        self, db: str, name: str, stable: str, tags_json: dict[str, Any], vnode: int
    ) -> ChildTable:
        with self.transaction() as tx:
            return tx.create_child_table(db, name, stable, tags_json, vnode)

    def create_child_tables(self, db: str, tables: Iterable[tuple[str, str, dict[str, Any], int]]) -> int:
        """Many (name, stable, tags, vnode) in one synced WriteBatch, all or none."""
        with self.transaction() as tx:
            return tx.create_child_tables(db, tables)

    def drop_child_table(self, db: str, name: str) -> ChildTable:
        with self.transaction() as tx:
            return tx.drop_child_table(db, name)

    def set_child_tags(
        self, db: str, name: str, tags_json: dict[str, Any], *, merge: bool = True
    ) -> ChildTable:
        with self.transaction() as tx:
            return tx.set_child_tags(db, name, tags_json, merge=merge)

    def create_tmq_topic(
        self,
        name: str,
        definition: dict[str, Any],
        *,
        topic_id: bytes | None = None,
        created_ms: int | None = None,
    ) -> bytes:
        """Store a TDengine topic (definition is the broker's opaque JSON); returns its id."""
        with self.transaction() as tx:
            tid = tx.create_tmq_topic(name, definition, topic_id=topic_id, created_ms=created_ms)
        log.info("created TDengine topic %s", name, extra={"event": "tmq_topic_created", "topic": name})
        return tid

    def drop_tmq_topic(self, name: str) -> TmqTopic:
        with self.transaction() as tx:
            topic = tx.drop_tmq_topic(name)
        log.info("deleted TDengine topic %s", name, extra={"event": "tmq_topic_deleted", "topic": name})
        return topic

    def tmq_topics(self) -> dict[str, TmqTopic]:
        return self.catalog.tmq_topics()

    def tmq_topic(self, name: str) -> TmqTopic | None:
        return self.catalog.tmq_topic(name)

    def tmq_topic_by_id(self, topic_id: bytes) -> tuple[str, TmqTopic] | None:
        return self.catalog.tmq_topic_by_id(topic_id)

    # WAL -----------------------------------------------------------------------------------

    def append(
        self,
        db: str,
        vnode: int,
        batch: bytes | bytearray | memoryview,
        record_count: int,
        max_timestamp: int,
        producer: ProducerAppend | None = None,
        leader_epoch: int | None = None,
    ) -> Appended:
        """See ``Wal.append``: returns (base version, log start)."""
        return self.wal.append(db, vnode, batch, record_count, max_timestamp, producer, leader_epoch)

    def append_replica(self, db: str, vnode: int, batch: bytes) -> None:
        """See ``Wal.append_replica`` (a follower's append at the leader's offset)."""
        self.wal.append_replica(db, vnode, batch)

    def truncate(self, db: str, vnode: int, offset: int) -> None:
        """See ``Wal.truncate`` (a follower's divergent tail removed)."""
        self.wal.truncate(db, vnode, offset)

    def epoch_end(self, db: str, vnode: int, epoch: int) -> tuple[int, int]:
        """See ``Wal.epoch_end`` (OffsetForLeaderEpoch)."""
        return self.wal.epoch_end(db, vnode, epoch)

    def epochs(self, db: str, vnode: int) -> list[tuple[int, int]]:
        """See ``Wal.epochs`` (the leader-epoch cache of a replicated SQL database's vnode)."""
        return self.wal.epochs(db, vnode)

    def assign_epoch(self, db: str, vnode: int, epoch: int, start: int) -> None:
        """See ``Wal.assign_epoch``."""
        self.wal.assign_epoch(db, vnode, epoch, start)

    def raw_entries(self, db: str, vnode: int, from_version: int, max_bytes: int) -> list[tuple[int, int, bytes, int]]:
        """See ``Wal.raw_entries`` (what a follower of a SQL database's vnode copies)."""
        return self.wal.raw_entries(db, vnode, from_version, max_bytes)

    def replica_marks(self, db: str, vnode: int) -> tuple[dict[int, tuple[int, int]],
                                                          dict[int, tuple[int, int, BatchMeta]]]:
        """What a SQL database vnode's rows entries do not carry and a follower must keep:
        (base version of a rows entry of an open or aborted transaction → (producer id, epoch)
        — a committed one's rows are plain rows by now —, last version of an idempotent
        producer's batch in its window → (producer id, epoch, the batch))."""
        dbid, _ = self.catalog.vnode(db, vnode)
        txn_rows = {base: (pid, t.epoch) for pid, t in self.wal_txns.open_transactions(dbid, vnode).items()
                    for base, _ in t.rows}
        for aborted in self.wal_txns.aborted_index(dbid, vnode):
            window = self.producers.window(dbid, vnode, aborted.producer_id)
            for base, _ in aborted.rows:
                txn_rows.setdefault(base, (aborted.producer_id, window.epoch if window is not None else 0))
        batch_ends: dict[int, tuple[int, int, BatchMeta]] = {}
        for pid, *_ in self.producers.on_vnode(dbid, vnode):
            window = self.producers.window(dbid, vnode, pid)
            if window is None:
                continue
            for b in window.batches:
                batch_ends[b.last_offset] = (pid, window.epoch, b)
        return txn_rows, batch_ends

    def append_meta(self, db: str, vnode: int, payload: bytes, timestamp_ms: int | None = None) -> int:
        return self.wal.append_meta(db, vnode, payload, timestamp_ms)

    def append_rows(
        self,
        db: str,
        vnode: int,
        payload: bytes | bytearray | memoryview,
        row_count: int,
        max_timestamp: int,
        min_timestamp: int,
        *,
        timestamp_ms: int | None = None,
        txn_producer: tuple[int, int] | None = None,
    ) -> int:
        return self.wal.append_rows(
            db, vnode, payload, row_count, max_timestamp, min_timestamp, timestamp_ms=timestamp_ms,
            txn_producer=txn_producer,
        )

    def append_rows_many(
        self,
        db: str,
        vnode: int,
        entries: Iterable[RowsEntry],
        *,
        producer: ProducerAppend | None = None,
        timestamp_ms: int | None = None,
        txn_producer: tuple[int, int] | None = None,
    ) -> int:
        """See ``Wal.append_rows_many``: rows entries (with an idempotent producer's window
        after them, in a transactional producer's transaction) in one WriteBatch; returns the
        first entry's base version."""
        return self.wal.append_rows_many(db, vnode, entries, producer=producer, timestamp_ms=timestamp_ms,
                                         txn_producer=txn_producer)

    def read(self, db: str, vnode: int, from_version: int, max_bytes: int) -> list[bytes]:
        return self.wal.read(db, vnode, from_version, max_bytes)

    def read_entries(
        self, db: str, vnode: int, from_version: int, max_bytes: int, include_meta: bool = True
    ) -> list[WalEntry]:
        return self.wal.read_entries(db, vnode, from_version, max_bytes, include_meta)

    def rows_in_range(self, db: str, vnode: int, from_version: int, upto: int, ts_low: int | None,
                      ts_high: int | None, max_bytes: int) -> tuple[list[tuple[int, bytes]], int]:
        return self.wal.rows_in_range(db, vnode, from_version, upto, ts_low, ts_high, max_bytes)

    def log_start(self, db: str, vnode: int) -> int:
        return self.wal.log_start(db, vnode)

    def next_version(self, db: str, vnode: int) -> int:
        return self.wal.next_version(db, vnode)

    def log_size(self, db: str, vnode: int) -> int:
        return self.wal.log_size(db, vnode)

    def log_entries(self, db: str, vnode: int) -> int:
        return self.wal.log_entries(db, vnode)

    def total_bytes(self) -> int:
        return self.wal.total_bytes()

    def offset_for_timestamp(self, db: str, vnode: int, ts: int) -> tuple[int, int] | None:
        return self.wal.offset_for_timestamp(db, vnode, ts)

    def max_timestamp_offset(self, db: str, vnode: int) -> tuple[int, int] | None:
        return self.wal.max_timestamp_offset(db, vnode)

    # transactions (storage.wal_txns) ------------------------------------------------------

    def write_txn_marker(self, db: str, vnode: int, producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, leader_epoch: int = -1) -> int:
        """A commit or abort marker at the vnode's next offset, closing the producer's
        transaction there (``Wal.append_marker``; ``leader_epoch``: a replicated partition's
        leader stamps its epoch); returns the marker's offset."""
        return self.wal.append_marker(db, vnode, producer_id, producer_epoch, commit, coordinator_epoch,
                                      leader_epoch=leader_epoch)

    def last_stable_offset(self, db: str, vnode: int) -> int:
        """First offset of the oldest open transaction on the vnode, else the high watermark."""
        return self.wal.last_stable_offset(db, vnode)

    def open_transactions(self, db: str, vnode: int) -> dict[int, tuple[int, int]]:
        """Producer id -> (first offset, epoch) of the vnode's open transactions."""
        dbid, _ = self.catalog.vnode(db, vnode)
        return {pid: (t.first_offset, t.epoch) for pid, t in self.wal_txns.open_transactions(dbid, vnode).items()}

    def aborted_transactions(self, db: str, vnode: int, from_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [from_offset, upper)."""
        dbid, _ = self.catalog.vnode(db, vnode)
        return self.wal_txns.aborted(dbid, vnode, from_offset, upper)

    def aborted_rows(self, db: str, vnode: int, from_offset: int, upper: int) -> set[int]:
        """Base versions of the rows entries of aborted transactions overlapping
        [from_offset, upper): a read_committed view drops them."""
        dbid, _ = self.catalog.vnode(db, vnode)
        return self.wal_txns.aborted_rows(dbid, vnode, from_offset, upper)

    def active_producers(self, db: str, vnode: int) -> list[ActiveProducer]:
        """The producers with state on the vnode (a window of batches, or an open transaction),
        by producer id: what DescribeProducers answers."""
        dbid, _ = self.catalog.vnode(db, vnode)
        opened = self.wal_txns.open_transactions(dbid, vnode)
        out = {pid: ActiveProducer(pid, epoch, seq, ts, opened[pid].first_offset if pid in opened else -1, coord)
               for pid, epoch, seq, ts, coord in self.producers.on_vnode(dbid, vnode)}
        for pid, txn in opened.items():
            if pid not in out:
                out[pid] = ActiveProducer(pid, txn.epoch, -1, -1, txn.first_offset)
        return [out[pid] for pid in sorted(out)]

    # removal and log history ---------------------------------------------------------------

    def delete_before(self, db: str, vnode: int, offset: int) -> int:
        return self.retention.delete_before(db, vnode, offset)

    def enforce_retention(self, now_ms: int | None = None, defaults: dict[str, str] | None = None) -> int:
        return self.retention.enforce_retention(now_ms, defaults)

    def collect(self, now_ms: int | None = None, *, max_total_bytes: int | None = None,
                disk_usage_max_percent: float | None = None, volume_bytes: int | None = None,
                max_age_ms: int | None = None, compact: bool = True) -> list[dict[str, Any]]:
        return self.archiver.collect(now_ms, max_total_bytes=max_total_bytes, volume_bytes=volume_bytes,
                                     disk_usage_max_percent=disk_usage_max_percent, max_age_ms=max_age_ms,
                                     compact=compact)

    @property
    def history_limit(self) -> int:
        return self.history_log.limit

    def history(self, db: str | None = None) -> list[HistoryRecord]:
        return self.history_log.records(db)

    def log_history(self, db: str | None = None) -> list[dict[str, Any]]:
        return self.history_log.view(db)

    # producers -----------------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        return self.producers.allocate_producer_id()

    def producer_window(self, db: str, vnode: int, producer_id: int) -> ProducerWindow | None:
        """The producer's window of last batches on the vnode (``storage.producers``)."""
        dbid, _ = self.catalog.vnode(db, vnode)
        return self.producers.window(dbid, vnode, producer_id)

    # group offsets and metadata ------------------------------------------------------------

    def commit_offsets(
        self,
        group: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
        supersede: Iterable[tuple[int, str, int]] = (),
    ) -> None:
        self.offsets.commit_offsets(group, offsets, commit_ms, supersede)

    def commit_offset(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        metadata: str | None = None,
        leader_epoch: int = -1,
        commit_ms: int | None = None,
    ) -> None:
        self.offsets.commit_offset(group, topic, partition, offset, metadata, leader_epoch, commit_ms)

    def fetch_offsets(
        self, group: str, topics: Iterable[str] | None = None
    ) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.fetch_offsets(group, topics)

    def delete_offsets(
        self, group: str, topic: str | None = None, partitions: Iterable[int] | None = None
    ) -> int:
        return self.offsets.delete_offsets(group, topic, partitions)

    def offset_groups(self) -> list[str]:
        return self.offsets.offset_groups()

    def delete_partitions(self, group: str, topics: Iterable[tuple[str, Iterable[int]]]) -> int:
        return self.offsets.delete_partitions(group, topics)

    def delete_group(self, group: str, records: Iterable[tuple[bytes, bytes | None]] = ()) -> None:
        self.offsets.delete_group(group, records)

    def commit_txn_offsets(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        commit_ms: int | None = None,
    ) -> dict[tuple[str, int], PendingOffset]:
        """Pending transactional offsets of the producer's transaction (``storage.offsets``)."""
        return self.offsets.commit_txn_offsets(group, producer_id, producer_epoch, offsets, commit_ms)

    def txn_offsets(self) -> dict[str, dict[int, dict[tuple[str, int], PendingOffset]]]:
        return self.offsets.txn_offsets()

    def complete_txn_offsets(self, group: str, producer_id: int, commit: bool) -> list[tuple[str, int]]:
        return self.offsets.complete_txn_offsets(group, producer_id, commit)

    def put_group_metadata(self, group: str, data: bytes, record: tuple[bytes, bytes | None] | None = None) -> None:
        self.offsets.put_group_metadata(group, data, record)

    def get_group_metadata(self, group: str) -> bytes | None:
        return self.offsets.get_group_metadata(group)

    def delete_group_metadata(self, group: str) -> None:
        self.offsets.delete_group_metadata(group)

    def mirror_groups(self, mirror: Callable[[str, StateOps], None] | None,
                      mirror_at: Callable[[int, StateOps], None] | None = None) -> None:
        """On a cluster: every change of a group's state goes to ``mirror`` first (``storage.offsets``),
        and the ``__consumer_offsets`` log's own writes of its partition p to ``mirror_at(p, ops)``
        (``storage.group_log``)."""
        self.offsets.mirror = mirror
        self.group_log.mirror_groups_at = mirror_at

    def mirror_txns(self, mirror: Callable[[str, StateOps], None] | None,
                    mirror_at: Callable[[int, StateOps], None] | None = None) -> None:
        """On a cluster: every change of a transactional id's state goes to ``mirror`` first, and
        the ``__transaction_state`` log's own writes of its partition p to ``mirror_at(p, ops)``."""
        self.txn_states.mirror = mirror
        self.group_log.mirror_txns_at = mirror_at

    def replace_txn_partition(self, in_partition: Callable[[str], bool],
                              ops: Iterable[tuple[bytes, bytes | None]], partition: int, partitions: int) -> int:
        """The ids of one transaction-state partition (``partition`` of ``partitions``) as its
        replicated ops say; ``__transaction_state``'s partition of the same number then holds
        the replicated log (``storage.group_log``) and ends with their states, when it has as
        many partitions (a cluster's: broker/topics.py)."""
        ops = list(ops)
        held = self.txn_states.replace_partition(in_partition, ops)
        if self.transaction_log.partitions == partitions:
            self.transaction_log.replace_partition(partition, ops)
            self.txn_states.snapshot_log(partition, in_partition)
        return held

    def replace_group_partition(self, in_partition: Callable[[str], bool],
                                ops: Iterable[tuple[bytes, bytes | None]], partition: int, partitions: int) -> int:
        """The groups of one group-state partition (``partition`` of ``partitions``) as its
        replicated ops say (``storage.offsets``); ``__consumer_offsets``' partition of the same
        number then holds the replicated log (``storage.group_log``) and ends with their
        committed offsets, when it has as many partitions."""
        ops = list(ops)
        held = self.offsets.replace_partition(in_partition, ops)
        if self.group_log.partitions == partitions:
            self.group_log.replace_partition(partition, ops)
            self.offsets.snapshot_log(partition, in_partition)
        return held

    def internal_topics_used(self) -> list[str]:
        """Kafka's internal topics this store has data of: ``__consumer_offsets`` once a group
        committed or kept metadata, ``__transaction_state`` once a transactional id was seen
        (Kafka creates them on first use and keeps them)."""
        db = self.core.db
        used = []
        def some(**span: bytes) -> bool:
            return next(db.iterator(include_value=False, **span), None) is not None

        if (some(start=keys.GROUPLOG, stop=keys.group_log_prefix(TXN_BASE))  # the group log's own partitions
                or some(prefix=keys.OFFSET) or some(prefix=keys.GROUP)):
            used.append(GROUP_METADATA_TOPIC)
        if some(prefix=keys.TXNSTATE) or some(start=keys.group_log_prefix(TXN_BASE),
                                              stop=keys.prefix_end(keys.GROUPLOG)):
            used.append(TRANSACTION_STATE_TOPIC)
        return used

    def group_metadata(self) -> dict[str, bytes]:
        return self.offsets.group_metadata()

    # client quotas -------------------------------------------------------------------------

    def load_client_quotas(self) -> dict[keys.QuotaEntityKey, dict[str, float]]:
        """Every client quota entity with its values (``storage.quotas``)."""
        return self.client_quotas.load()

    def write_client_quotas(self, entities: Iterable[tuple[keys.QuotaEntityKey, Mapping[str, float]]]) -> None:
        """Replace these entities' values in one synced WriteBatch (empty = removed)."""
        self.client_quotas.write(entities)

    # dynamic configs -----------------------------------------------------------------------

    def load_dynamic_configs(self) -> dict[ConfigResourceKey, dict[str, str]]:
        """Every BROKER / GROUP resource with its dynamic values (``storage.dynconfigs``)."""
        return self.dynamic_configs.load()

    def write_dynamic_configs(self, resources: Iterable[tuple[ConfigResourceKey, Mapping[str, str]]]) -> None:
        """Replace these resources' values in one synced WriteBatch (empty = removed)."""
        self.dynamic_configs.write(resources)
