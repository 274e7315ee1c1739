"""A vnode's tail rolled back to a version: every entry from it on removed with what indexes
it — the time index, idempotent producers' batches, the transaction keys — and the vnode's
counters moved back (its next version becomes that version).

Two callers: the open after a power loss that took the payload log's unsynced tail
(``storage.payloads``), and a follower replica whose tail diverged from its leader's (issue 16:
the leader's log decides, as Kafka's replica truncation after OffsetForLeaderEpoch). This stages
the deletions in ``wb``; the caller writes it (and deletes the payloads it lists)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tmqgate.storage import keys

if TYPE_CHECKING:
    from plyvel import DB as LevelDB
    from plyvel import WriteBatch


def roll_back_vnode(db: LevelDB, wb: WriteBatch, dbid: int, vnode: int, first: int, state: bytes) -> list[int]:
    """Stage the removal of vnode (dbid, vnode)'s entries at versions >= ``first``; ``state``
    is its VNODE value. Returns the payload sequences of the removed entries."""
    lost: list[tuple[bytes, bytes]] = []
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.WAL, dbid, vnode), reverse=True):
        if keys.wal_key_version(key) < first:
            break
        lost.append((key, value))
    for key, _ in lost:
        wb.delete(key)
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.TIME, dbid, vnode), reverse=True):
        if keys.read_u64(value) < first:
            break
        wb.delete(key)
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.EPOCH, dbid, vnode), reverse=True):
        if keys.read_u64(value) < first:
            break
        wb.delete(key)  # an epoch that starts in the removed tail
    _roll_back_transactions(db, wb, dbid, vnode, first)
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.PRODUCER, dbid, vnode)):
        epoch, update_ms, batches = keys.unpack_producer(value)
        kept = [b for b in batches if b[2] < first]
        if not kept:
            wb.delete(key)
        elif len(kept) < len(batches):
            wb.put(key, keys.pack_producer(epoch, update_ms, kept, keys.producer_coordinator_epoch(value)))
    _, start, size, entries = keys.unpack_vnode_state(state)
    if entries is None:
        p = keys.vnode_prefix(keys.WAL, dbid, vnode)
        entries = sum(1 for _ in db.iterator(prefix=p, include_value=False))
    size -= sum(keys.unpack_wal_index(v)[1] for _, v in lost)
    wb.put(keys.vnode_key(dbid, vnode), keys.pack_vnode_state(first, min(start, first), size, entries - len(lost)))
    return [keys.wal_index_seq(v) for _, v in lost]


def _roll_back_transactions(db: LevelDB, wb: WriteBatch, dbid: int, vnode: int, first: int) -> None:
    """The transaction keys (``storage.wal_txns``) of a vnode rolled back to ``first``: a
    transaction opened at or after it is gone, one opened before keeps only its rows entries
    below it; an abort whose marker was lost becomes an open transaction again (its data
    stays, and the coordinator sends its marker again at restart). A lost commit marker's
    transaction cannot be reopened (its open key went in the marker's WriteBatch): its data
    reads as committed."""
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.TXNOPEN, dbid, vnode)):
        start, epoch, rows = keys.unpack_txn_open(value)
        if start >= first:
            wb.delete(key)
        elif any(base >= first for base, _ in rows):
            wb.put(key, keys.pack_txn_open(start, epoch, tuple(r for r in rows if r[0] < first)))
    for key, value in db.iterator(prefix=keys.vnode_prefix(keys.ABORTED, dbid, vnode)):
        _, _, last, pid = keys.parse_aborted_key(key)
        if last < first:
            continue
        wb.delete(key)
        start, rows = keys.unpack_aborted(value)
        if start < first:
            raw = db.get(keys.producer_key(dbid, vnode, pid))
            epoch = keys.unpack_producer(raw)[0] if raw is not None else 0
            wb.put(keys.txn_open_key(dbid, vnode, pid),
                   keys.pack_txn_open(start, epoch, tuple(r for r in rows if r[0] < first)))
