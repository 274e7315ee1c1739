"""Idempotent producers: the window of a producer's last batches, its rules and its storage.

For each (vnode, producer id) the broker remembers the epoch and the last five batches'
sequence ranges with their offsets, as Apache Kafka's ProducerStateManager does. A retried
batch that matches one of them is answered with its original offset and not written again;
any other sequence than the next one — a gap, or an older sequence outside the remembered
window — is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's ProducerAppendInfo.checkSequence; Kafka never
answers DUPLICATE_SEQUENCE_NUMBER, which librdkafka would take as "already written" and report
delivered without an offset); an older epoch is INVALID_PRODUCER_EPOCH.

Why one module: the check (``check_sequence``) and the update (``ProducerAppend.window_at``:
the window after appending a batch) are two halves of one rule over one value
(``ProducerWindow``) — with the Int32 wrap of sequences written once (``seq_add``) — so they
live together, and the store only persists the window it is handed (``Producers``), in the
same WriteBatch as the batch (``Wal.append``). The window's base offset is assigned by that
append, which is why the broker hands over a ``ProducerAppend`` rather than the finished window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tmqgate.protocol import clock
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core, WriteBatch

INT32_MAX = 2**31 - 1
#: Batches remembered per producer and vnode (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
WINDOW_BATCHES = 5


def seq_add(seq: int, n: int) -> int:
    """``seq`` moved by ``n``: producer sequences wrap from Int32.MAX to 0, as Kafka's do."""
    return (seq + n) % (INT32_MAX + 1)



class BatchMeta(NamedTuple):
    """One remembered batch: its sequence range and its offsets (versions)."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


class ProducerWindow(NamedTuple):
    """A producer's epoch and its last (at most ``WINDOW_BATCHES``) batches, oldest first; the
    coordinator epoch of its last transaction marker (-1: none), which DescribeProducers shows."""

    epoch: int
    batches: tuple[BatchMeta, ...]
    coordinator_epoch: int = -1


class SequenceVerdict(NamedTuple):
    """What to do with a batch: write it (error NONE, duplicate_of None), answer it with an
    earlier write's base offset (duplicate_of set), or refuse it with ``error``."""

    error: ErrorCode
    duplicate_of: int | None = None


def check_sequence(
    window: ProducerWindow | None, epoch: int, first_seq: int, record_count: int
) -> SequenceVerdict:
    """Judge a batch against the producer's window (None: unknown producer)."""
    if window is None:
        # Unknown producer (new, or its state expired): accept any sequence (KIP-360).
        return SequenceVerdict(ErrorCode.NONE)
    if epoch < window.epoch:
        return SequenceVerdict(ErrorCode.INVALID_PRODUCER_EPOCH)
    if epoch > window.epoch:
        if first_seq != 0:
            return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        return SequenceVerdict(ErrorCode.NONE)
    batches = window.batches
    last_seq = seq_add(first_seq, record_count - 1)
    for b in batches:
        if b.first_seq == first_seq and b.last_seq == last_seq:
            return SequenceVerdict(ErrorCode.NONE, b.base_offset)
    if not batches:
        return SequenceVerdict(ErrorCode.NONE)
    expected = seq_add(batches[-1].last_seq, 1)
    if first_seq == expected:
        return SequenceVerdict(ErrorCode.NONE)
    # Not the next sequence and no remembered batch: a gap, a batch matching none of the
    # window's exactly, or one older than the window — all out of order, as in Kafka.
    return SequenceVerdict(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


class ActiveProducer(NamedTuple):
    """A producer as DescribeProducers shows it on one vnode (Kafka's ProducerState): its
    epoch, last sequence (-1: none), when its state was last written (ms), the first offset of
    its open transaction there (-1: none), the coordinator epoch of its last marker (-1: none)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int
    coordinator_epoch: int = -1


class ProducerAppend(NamedTuple):
    """An idempotent producer's batch that ``check_sequence`` accepted, on its way to
    ``Store.append`` (which stores ``window_at(base offset)`` with the batch)."""

    producer_id: int
    epoch: int
    first_seq: int
    record_count: int
    window: ProducerWindow | None  # the window before this batch

    def window_at(self, base_offset: int, last_offset: int | None = None) -> ProducerWindow:
        """The window after appending this batch at ``base_offset``: a new epoch starts a
        fresh window; the oldest batch goes beyond ``WINDOW_BATCHES``. ``last_offset``: the
        batch's last version when it is not ``base_offset + record_count - 1`` (a database
        topic's batch becomes rows: its versions are its rows', not its records')."""
        w = self.window
        kept = w.batches if w is not None and w.epoch == self.epoch else ()
        batch = BatchMeta(
            self.first_seq,
            seq_add(self.first_seq, self.record_count - 1),
            base_offset,
            base_offset + self.record_count - 1 if last_offset is None else last_offset,
        )
        return ProducerWindow(self.epoch, (*kept, batch)[-WINDOW_BATCHES:], -1 if w is None else w.coordinator_epoch)


# persistence ---------------------------------------------------------------------------------



#: producer ids on a cluster: node n's are n, n + stride, n + 2·stride … (node ids below it)
PRODUCER_ID_STRIDE = 1024


class Producers:
    """Producer ids and the windows of (db id, vnode, producer id), cached after first use."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._windows: dict[tuple[int, int, int], ProducerWindow | None] = {}
        #: on a cluster, node n hands out only the ids ≡ n (mod PRODUCER_ID_STRIDE), so two
        #: brokers never give one id to two producers (a broker's idempotence windows would
        #: take the second producer's batches for the first one's duplicates)
        self.stride, self.slot = 1, 0

    def use_slot(self, slot: int) -> None:
        """Hand out only ids ≡ ``slot`` (mod PRODUCER_ID_STRIDE) from now on (a cluster's node)."""
        if not 0 <= slot < PRODUCER_ID_STRIDE:
            raise ValueError(f"slot must be in 0..{PRODUCER_ID_STRIDE - 1}")
        self.stride, self.slot = PRODUCER_ID_STRIDE, slot

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before (persisted before it is returned)."""
        db = self._core.db
        raw = db.get(keys.NEXTPID)
        pid = keys.read_u64(raw) if raw else 1000
        pid += (self.slot - pid) % self.stride
        db.put(keys.NEXTPID, keys.u64(pid + 1), sync=self._core.wal_level == 2)
        return pid

    def window(self, dbid: int, vnode: int, producer_id: int) -> ProducerWindow | None:
        """The producer's window on the vnode, None if it has none there."""
        k = (dbid, vnode, producer_id)
        if k in self._windows:
            return self._windows[k]
        raw = self._core.db.get(keys.producer_key(dbid, vnode, producer_id))
        window = None
        if raw is not None:
            # A window without batches is an epoch a transaction marker set (storage.wal).
            epoch, _update_ms, batches = keys.unpack_producer(raw)
            window = ProducerWindow(epoch, tuple(BatchMeta(*b) for b in batches), keys.producer_coordinator_epoch(raw))
        self._windows[k] = window
        return window

    def stage(self, wb: WriteBatch, dbid: int, vnode: int, producer_id: int, window: ProducerWindow) -> None:
        """Put ``window`` into ``wb`` (the WriteBatch of the batch it describes)."""
        value = keys.pack_producer(window.epoch, clock.now_ms(), list(window.batches), window.coordinator_epoch)
        wb.put(keys.producer_key(dbid, vnode, producer_id), value)

    def remember(self, dbid: int, vnode: int, producer_id: int, window: ProducerWindow) -> None:
        """Cache ``window`` once the WriteBatch that ``stage``d it is written."""
        self._windows[(dbid, vnode, producer_id)] = window

    def on_vnode(self, dbid: int, vnode: int) -> list[tuple[int, int, int, int, int]]:
        """(producer id, epoch, last sequence or -1, last update ms, coordinator epoch of its
        last marker or -1) of every producer with a window on the vnode."""
        out = []
        for key, value in self._core.db.iterator(prefix=keys.vnode_prefix(keys.PRODUCER, dbid, vnode)):
            epoch, update_ms, batches = keys.unpack_producer(value)
            pid = keys.read_u64(key[9:17])
            out.append((pid, epoch, batches[-1][1] if batches else -1, update_ms,
                        keys.producer_coordinator_epoch(value)))
        return out

    def forget_vnode(self, dbid: int, vnode: int) -> None:
        """Drop the cached windows of a vnode whose tail was rolled back (read again on use)."""
        self._windows = {k: v for k, v in self._windows.items() if k[:2] != (dbid, vnode)}

    def forget_database(self, dbid: int) -> None:
        """Drop the cached windows of a dropped database."""
        self._windows = {k: v for k, v in self._windows.items() if k[0] != dbid}
