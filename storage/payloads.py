"""The payload log: the WAL entries' bytes in a second LevelDB, ``<data dir>/wal-payloads``.

Why apart from the main DB: its keys (one global payload sequence) only ever grow, so LevelDB
moves its tables down the levels without rewriting them and a record batch is written about
twice instead of once per compaction level. The price is two LevelDBs that must agree; this
module holds the payload side of that agreement (``storage.keys`` states the rules): staging
payloads before the main WriteBatch that indexes them, deleting them after the one that
unindexes them, reading them back in index order, and the repair at open — payloads nothing
indexes are dropped, interrupted deletes finished, vnode tails whose payloads a power loss
took are rolled back. ``storage.core`` owns the write path that ties the two together.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from tmqgate.storage import keys
from tmqgate.storage.model import StorageError
from tmqgate.storage.rollback import roll_back_vnode

if TYPE_CHECKING:
    from tmqgate.storage.core import LevelDB
    from tmqgate.storage.space import DiskSpace

PAYLOAD_DIR = "wal-payloads"


class PayloadLog:
    """The payload LevelDB and the next payload sequence (set by ``recover``)."""

    def __init__(self, data_dir: str, space: DiskSpace, *, write_buffer_size: int, lru_cache_size: int) -> None:
        self.db: LevelDB = space.open(
            os.path.join(data_dir, PAYLOAD_DIR),
            write_buffer_size=write_buffer_size,
            lru_cache_size=lru_cache_size,
            max_file_size=64 << 20,
            compression=None,
        )
        self.next_seq = 0

    def close(self) -> None:
        self.db.close()

    def sync(self) -> None:
        """fsync the payload log's LevelDB log (an empty batch: a log record + fsync)."""
        self.db.write_batch(sync=True).write()

    # writing -------------------------------------------------------------------------------

    def stage(self, values: list[bytes], sync: bool) -> int:
        """Write payloads at the next sequences (one put, or one batch for several), before
        the main WriteBatch that indexes them; returns the first sequence. They stay staged
        (``next_seq`` unchanged) until ``committed``: open drops what nothing indexes."""
        seq = self.next_seq
        if len(values) == 1:
            self.db.put(keys.u64(seq), values[0], sync=sync)
            return seq
        wb = self.db.write_batch(sync=sync)
        for i, value in enumerate(values):
            wb.put(keys.u64(seq + i), value)
        wb.write()
        return seq

    def committed(self, last: int) -> None:
        """The main WriteBatch indexing payloads up to ``last`` is written: move past them."""
        self.next_seq = last + 1

    def delete(self, seqs: Iterable[int], sync: bool = False) -> None:
        """Delete payloads in one batch: ones whose index keys a committed WriteBatch removed
        (listed under PAYGC, so a crash before this finishes is repaired at open), or ones
        nothing indexes."""
        wb = self.db.write_batch(sync=sync)
        for seq in seqs:
            wb.delete(keys.u64(seq))
        wb.write()

    def compact(self, first: int, last: int) -> None:
        """Give back the space of removed payloads ``first`` .. ``last`` now."""
        self.db.compact_range(start=keys.u64(first), stop=keys.u64(last + 1))

    # reading -------------------------------------------------------------------------------

    def entries(self, pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[int, int, bytes]]:
        """(base, kind, payload) for (WAL key, index value) pairs, fetched lazily (readers
        stop at max_bytes) through one payload-log cursor: a step to the next key when the
        sequence follows the previous one (one vnode appending alone, a transaction's
        entries), else a seek — measured ~35% and ~10% cheaper than a get per entry."""
        it = None
        prev = -2
        version = keys.wal_key_version
        for k, v in pairs:
            seq = keys.wal_index_seq(v)
            want = keys.u64(seq)
            if it is None:
                it = self.db.raw_iterator()
                it.seek(want)
            elif seq == prev + 1 and it.valid():
                it.next()
            else:
                it.seek(want)
            if not it.valid() or it.key() != want:
                raise StorageError(f"payload {seq} of WAL key {k.hex()} is missing from the payload log")
            prev = seq
            value: bytes = it.value()
            yield version(k), k[17], value

    # open ----------------------------------------------------------------------------------

    def recover(self, main: LevelDB) -> None:
        """Bring the payload log and the main DB ``main`` back into agreement at open: roll
        back vnode tails whose payloads were lost, drop payloads above the last committed
        sequence (written, never indexed, never acknowledged), finish the payload deletes of
        the last removal, and set the next sequence."""
        _repair_lost_payloads(main, self.db)
        raw = main.get(keys.PAYSEQ)
        committed = keys.read_u64(raw) if raw is not None else -1
        stale = [keys.read_u64(k) for k in self.db.iterator(start=keys.u64(committed + 1), include_value=False)]
        if stale:
            self.delete(stale, sync=True)
        gc = main.get(keys.PAYGC)
        if gc is not None:
            self.delete(keys.unpack_seqs(gc))
            main.delete(keys.PAYGC)
        self.next_seq = committed + 1


def _repair_lost_payloads(db: LevelDB, plog: LevelDB) -> None:
    """Roll back vnode tails whose payloads the payload log lost.

    Only possible after a power loss with unsynced writes (see ``storage.keys``): each
    LevelDB recovers a prefix of its log, so the payload log may end below PAYSEQ while
    the main DB kept the index keys. Within a vnode sequences grow with versions, so the
    lost entries are each vnode's newest ones: their index keys, time index entries and
    producer batches go, and the vnode's next version moves back to the first lost base
    (as a log that lost its unsynced tail would). One seek when nothing was lost.
    """
    raw = db.get(keys.PAYSEQ)
    if raw is None:
        return
    last = next(plog.iterator(reverse=True, include_value=False), None)
    present = keys.read_u64(last) if last is not None else -1
    if present >= keys.read_u64(raw):
        return
    wb = db.write_batch(sync=True)
    repaired = False
    for vkey, state in db.iterator(prefix=keys.VNODE):
        dbid, vnode = keys.parse_vnode_key(vkey)
        lost: list[tuple[bytes, bytes]] = []
        for key, value in db.iterator(prefix=keys.vnode_prefix(keys.WAL, dbid, vnode), reverse=True):
            if keys.wal_index_seq(value) <= present:
                break
            lost.append((key, value))
        if not lost:
            continue
        repaired = True
        roll_back_vnode(db, wb, dbid, vnode, keys.wal_key_version(lost[-1][0]), state)
    if not repaired:  # the newest payloads were removed (retention ...), none lost
        return
    # Every sequence still indexed is <= present now.
    if present >= 0:
        wb.put(keys.PAYSEQ, keys.u64(present))
    else:
        wb.delete(keys.PAYSEQ)
    wb.write()
