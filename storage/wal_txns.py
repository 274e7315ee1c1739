"""Transactions on the WAL: each vnode's open transactions and its aborted-transaction index.

As in Apache Kafka (ProducerStateManager's ongoing transactions, the log's TransactionIndex):

* a transactional batch (attributes bit 4) opens a transaction for its producer on the vnode,
  unless one is open already: its first offset and the producer's epoch are recorded (0x41
  TXNOPEN) in the WriteBatch of the batch (``Wal.append``); so does a rows entry written for a
  transactional producer (a Produce to a database topic, ``Transaction.append_rows``), which
  the transaction also lists, since rows carry no producer id: an abort copies the list into
  its aborted entry, and a read_committed view drops those entries (``aborted_rows``);
* a commit or abort marker (a control batch, ``protocol.records.build_end_txn_marker``) takes
  the next offset and closes it in one WriteBatch (``Wal.append_marker``); an abort adds an
  entry (producer id, first offset, last offset = the marker's) to the aborted index (0x42
  ABORTED). A marker for a producer with no open transaction on the vnode is written anyway
  (Kafka writes markers to every partition of a transaction); an abort then indexes the
  marker's own offset as first and last;
* the last stable offset is the first offset of the oldest open transaction, else the high
  watermark;
* removals (retention, DeleteRecords, the archiver) drop the aborted entries that end below
  the new log start, in their WriteBatch (``HeadRemoval``); a dropped database drops its keys
  with the rest of its range (``keys.PER_DB_PREFIXES``).

Both are loaded at open; the keys are written in the WriteBatch of the WAL entry that changes
them, so a kill -9 leaves them consistent with the data.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core, WriteBatch


Ranges = tuple[tuple[int, int], ...]  # rows entries: (base version, version count)


class OpenTxn(NamedTuple):
    """A producer's open transaction on a vnode; ``rows``: the rows entries it wrote (a
    database topic's view drops them if it aborts: rows carry no producer id)."""

    first_offset: int
    epoch: int
    rows: Ranges = ()


class AbortedTxn(NamedTuple):
    """An entry of the aborted-transaction index (ordered by last offset)."""

    last_offset: int
    producer_id: int
    first_offset: int
    rows: Ranges = ()


VnodeId = tuple[int, int]  # (db id, vnode)


class WalTxns:
    """Open transactions and aborted-transaction entries per (db id, vnode), in memory and
    under 0x41/0x42; see the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._open: dict[VnodeId, dict[int, OpenTxn]] = {}
        self._aborted: dict[VnodeId, list[AbortedTxn]] = {}
        # Per vnode, the longest aborted transaction (last - first offset) indexed: a lookup
        # stops once last offsets pass its upper bound by more (the entries go by last offset).
        self._span: dict[VnodeId, int] = {}

    def load(self, live: set[int]) -> None:
        """Read both indexes of the databases in ``live`` (others are orphans being dropped)."""
        db = self._core.db
        for key, value in db.iterator(prefix=keys.TXNOPEN):
            dbid, vnode, pid = keys.parse_txn_open_key(key)
            if dbid in live:
                self._open.setdefault((dbid, vnode), {})[pid] = OpenTxn(*keys.unpack_txn_open(value))
        for key, value in db.iterator(prefix=keys.ABORTED):
            dbid, vnode, last, pid = keys.parse_aborted_key(key)
            if dbid in live:
                first, rows = keys.unpack_aborted(value)
                self._aborted.setdefault((dbid, vnode), []).append(AbortedTxn(last, pid, first, rows))
                self._span[(dbid, vnode)] = max(self._span.get((dbid, vnode), 0), last - first)

    # opening and closing -------------------------------------------------------------------

    def stage_open(self, wb: WriteBatch, dbid: int, vnode: int, producer_id: int, first_offset: int,
                   epoch: int) -> OpenTxn | None:
        """Record a transaction opened by a transactional batch at ``first_offset`` (nothing if
        the producer has one open on the vnode); ``opened`` once ``wb`` is written."""
        if producer_id in self._open.get((dbid, vnode), ()):
            return None
        txn = OpenTxn(first_offset, epoch)
        wb.put(keys.txn_open_key(dbid, vnode, producer_id), keys.pack_txn_open(*txn))
        return txn

    def stage_rows(self, wb: WriteBatch, dbid: int, vnode: int, producer_id: int, epoch: int, base: int,
                   count: int, staged: OpenTxn | None = None) -> OpenTxn:
        """A transactional producer's rows entry at ``base``: opens its transaction at ``base``
        unless one is open (``staged``: as an earlier call for the same WriteBatch left it),
        and adds the entry to it; ``opened`` once ``wb`` is written."""
        txn = staged if staged is not None else self._open.get((dbid, vnode), {}).get(producer_id)
        if txn is None:
            txn = OpenTxn(base, epoch)
        txn = txn._replace(rows=(*txn.rows, (base, count)))
        wb.put(keys.txn_open_key(dbid, vnode, producer_id), keys.pack_txn_open(*txn))
        return txn

    def opened(self, dbid: int, vnode: int, producer_id: int, txn: OpenTxn) -> None:
        self._open.setdefault((dbid, vnode), {})[producer_id] = txn

    def stage_close(self, wb: WriteBatch, dbid: int, vnode: int, producer_id: int, commit: bool,
                    marker_offset: int) -> AbortedTxn | None:
        """Close the producer's transaction with the marker at ``marker_offset``; for an abort
        return the aborted entry staged. ``closed`` once ``wb`` is written."""
        wb.delete(keys.txn_open_key(dbid, vnode, producer_id))
        if commit:
            return None
        txn = self._open.get((dbid, vnode), {}).get(producer_id)
        entry = (AbortedTxn(marker_offset, producer_id, txn.first_offset, txn.rows) if txn is not None
                 else AbortedTxn(marker_offset, producer_id, marker_offset))
        wb.put(keys.aborted_key(dbid, vnode, marker_offset, producer_id), keys.pack_aborted(entry.first_offset,
                                                                                            entry.rows))
        return entry

    def closed(self, dbid: int, vnode: int, producer_id: int, aborted: AbortedTxn | None) -> None:
        opened = self._open.get((dbid, vnode))
        if opened is not None:
            opened.pop(producer_id, None)
            if not opened:
                del self._open[(dbid, vnode)]
        if aborted is not None:
            entries = self._aborted.setdefault((dbid, vnode), [])
            bisect.insort(entries, aborted)
            span = aborted.last_offset - aborted.first_offset
            self._span[(dbid, vnode)] = max(self._span.get((dbid, vnode), 0), span)

    # removals ------------------------------------------------------------------------------

    def stage_trim(self, wb: WriteBatch, dbid: int, vnode: int, log_start: int) -> int:
        """Delete the aborted entries that end below ``log_start`` (their data is gone); returns
        how many; ``trimmed`` once ``wb`` is written."""
        entries = self._aborted.get((dbid, vnode), [])
        n = 0
        for e in entries:
            if e.last_offset >= log_start:
                break
            wb.delete(keys.aborted_key(dbid, vnode, e.last_offset, e.producer_id))
            n += 1
        return n

    def trimmed(self, dbid: int, vnode: int, n: int) -> None:
        if n:
            del self._aborted[(dbid, vnode)][:n]

    def forget_database(self, dbid: int) -> None:
        self._open = {k: v for k, v in self._open.items() if k[0] != dbid}
        self._aborted = {k: v for k, v in self._aborted.items() if k[0] != dbid}
        self._span = {k: v for k, v in self._span.items() if k[0] != dbid}

    # queries -------------------------------------------------------------------------------

    def first_unstable(self, dbid: int, vnode: int) -> int | None:
        """First offset of the vnode's oldest open transaction, None if none is open."""
        opened = self._open.get((dbid, vnode))
        if not opened:
            return None
        return min(t.first_offset for t in opened.values())

    def open_transactions(self, dbid: int, vnode: int) -> dict[int, OpenTxn]:
        return dict(self._open.get((dbid, vnode), {}))

    def aborted_index(self, dbid: int, vnode: int) -> list[AbortedTxn]:
        """The vnode's aborted-transaction index, by last offset."""
        return list(self._aborted.get((dbid, vnode), ()))

    def aborted(self, dbid: int, vnode: int, from_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping [from_offset,
        upper): last offset >= from_offset and first offset < upper (Kafka's
        collectAbortedTxns)."""
        entries = self._aborted.get((dbid, vnode))
        if not entries:
            return []
        return [(e.producer_id, e.first_offset) for e in self._overlapping(dbid, vnode, entries, from_offset, upper)]

    def aborted_ranges(self, dbid: int, vnode: int, from_offset: int, upper: int) -> list[tuple[int, int, int]]:
        """(producer id, first offset, last offset — the abort marker's) of the aborted
        transactions overlapping [from_offset, upper) (what the log cleaner removes)."""
        entries = self._aborted.get((dbid, vnode))
        if not entries:
            return []
        return [(e.producer_id, e.first_offset, e.last_offset)
                for e in self._overlapping(dbid, vnode, entries, from_offset, upper)]

    def _overlapping(self, dbid: int, vnode: int, entries: list[AbortedTxn], from_offset: int,
                     upper: int) -> Iterator[AbortedTxn]:
        """Entries with last offset >= from_offset and first offset < upper."""
        stop = upper + self._span.get((dbid, vnode), 0)  # beyond: first = last - span >= upper
        for i in range(bisect.bisect_left(entries, (from_offset,)), len(entries)):
            e = entries[i]
            if e.last_offset >= stop:
                return
            if e.first_offset < upper:
                yield e

    def aborted_rows(self, dbid: int, vnode: int, from_offset: int, upper: int) -> set[int]:
        """Base versions of the rows entries of aborted transactions that overlap
        [from_offset, upper) (what a read_committed view drops)."""
        entries = self._aborted.get((dbid, vnode))
        if not entries:
            return set()
        return {base for e in self._overlapping(dbid, vnode, entries, from_offset, upper) for base, count in e.rows
                if base + count > from_offset and base < upper}
