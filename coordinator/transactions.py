"""The transaction coordinator (Kafka's ``TransactionCoordinator`` with its
``TransactionMetadata``), as a clocked machine with no asyncio: every event takes ``now_ms``
(wall-clock ms, since start times are reported to clients and survive restarts);
``next_deadline()`` and ``tick(now_ms)`` drive timeouts, expiry and marker retries, so unit
tests run it on a fake clock. It imports nothing from ``broker/``: markers go out through a
``MarkerWriter``, group offsets are settled through ``TxnGroups``, producer ids come from
``ProducerIds`` and the state is written to a ``TxnLog`` (``storage.txn_coordinator``).

States (``TxnState``; the values are the names DescribeTransactions / ListTransactions give) and
the table of each state's valid previous states (``VALID_PREVIOUS``, Kafka's
``TransactionState.validPreviousStates``). Every change goes through ``_transition``, which
checks the table (a refused move is a bug: ``IllegalStateTransition``), writes the new state
to the log *before* it is kept (Kafka appends to ``__transaction_state`` before answering)
and keeps it; a write the disk refuses (``StorageIOError``) changes nothing and the event
answers NOT_COORDINATOR, as Kafka maps KAFKA_STORAGE_ERROR on its log.

Empty — a producer id and epoch, no transaction. ← Empty, CompleteCommit, CompleteAbort
    (InitProducerId bumps the epoch).
Ongoing — partitions (AddPartitionsToTxn) or groups (AddOffsetsToTxn) added; the transaction
    timeout runs from the first addition. ← Empty, Ongoing, CompleteCommit, CompleteAbort.
PrepareCommit / PrepareAbort — EndTxn decided; the markers are being written. ← Ongoing
    (PrepareAbort also ← PrepareEpochFence, and at transaction version 2 ← Empty, CompleteCommit,
    CompleteAbort: an abort with nothing added, which bumps the epoch and writes no marker). The client is answered once
    this is written; the markers are written at once (one node: a local call) and, where the disk refuses some,
    retried on tick; at restart a prepared state is completed (markers again: a second
    marker for a closed transaction changes nothing).
CompleteCommit / CompleteAbort — every marker written and the groups settled; partitions and
    groups cleared. ← PrepareCommit / PrepareAbort.
PrepareEpochFence — Ongoing, but its epoch was bumped to fence the producer (InitProducerId
    from a new instance, or the transaction's timeout): never written, it becomes
    PrepareAbort (with the bumped epoch) in the same event. ← Ongoing.
Dead — an idle id past ``transactional_id_expiration_ms``: deleted from the log and forgotten.
    ← Empty, CompleteCommit, CompleteAbort.

The answers follow Kafka's coordinator. Transaction version 2 (KIP-890 part 2; the callers
say which version a request speaks): ``add_implicitly`` adds a Produce's partition or a
TxnOffsetCommit's group (Kafka's AddPartitionsToTxn v5 "verify and add"); ``end_txn`` with
version 2 bumps the epoch into PrepareX (an exhausted epoch allocates ``next_producer_id``,
which CompleteX takes on with epoch 0), the markers and groups carry the bumped epoch, and a
retry is known by its epoch being the one before the bump (Kafka's endTxnEpochBumped and
retryOnOverflow), and an abort with the current epoch and no transaction open is an empty
transaction of its own (bumped, answered NONE; a commit so is INVALID_TXN_STATE); while the
previous transaction's markers are under way (PrepareX) any EndTxn of the producer id is
CONCURRENT_TRANSACTIONS before its epoch is judged (KAFKA-18464: an empty abort right after a
commit must wait for it, not be fenced by the epoch the commit bumped); EndTxn v5 is
answered so whatever began the transaction; fences (InitProducerId, timeout) bump once, as in
version 1. Version 1:
- InitProducerId: INVALID_REQUEST for an empty id; INVALID_TRANSACTION_TIMEOUT for a timeout
  <= 0 or over ``max_timeout_ms``; a new id gets a new producer id and epoch 0; a known one has
  its epoch bumped (KIP-360: a given producer id/epoch is accepted when it is the current one —
  bump — or the last one — a retry, answered the current epoch without a bump —, else
  PRODUCER_FENCED); an exhausted epoch (>= 32766) rotates to a new producer id with epoch 0;
  CONCURRENT_TRANSACTIONS while a transaction is prepared; an Ongoing one is fenced and aborted
  first and CONCURRENT_TRANSACTIONS answered (the client retries and then gets the next epoch).
- AddPartitionsToTxn / AddOffsetsToTxn: INVALID_PRODUCER_ID_MAPPING for an unknown id or
  another producer id, PRODUCER_FENCED for another epoch, CONCURRENT_TRANSACTIONS while
  prepared; otherwise Ongoing (start time set when coming from Empty or Complete*).
- EndTxn: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (the epoch must be the current one),
  Ongoing → PrepareX → markers → CompleteX; while PrepareX (its markers under way: Kafka's
  pending CompleteX) CONCURRENT_TRANSACTIONS whichever result is asked; a retry answered as
  Kafka does: the same result on CompleteX → NONE; the other result, or Empty →
  INVALID_TXN_STATE. (Handlers turn PRODUCER_FENCED into INVALID_PRODUCER_EPOCH for the old
  request versions, as KafkaApis does.)
- tick: an Ongoing transaction whose start + timeout < now is fenced (epoch + 1, so the
  zombie's next request is refused) and aborted; an idle id (Empty, Complete*) whose last
  update is ``id_expiration_ms`` old goes Dead; unfinished markers are retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Protocol

from tmqgate.coordinator.client_regex import InvalidRegex, compile_client_regex
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import check
from tmqgate.storage import StorageIOError
from tmqgate.storage.txn_coordinator import TxnRecord

log = logging.getLogger("tmqgate.coordinator.transactions")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT16_MAX = 2**15 - 1
#: The coordinator epoch markers carry: one node, never re-elected.
COORDINATOR_EPOCH = 0
#: How soon markers the disk refused are tried again (ms).
MARKER_RETRY_MS = 1000

Partition = tuple[str, int]


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"
    DEAD = "Dead"


S = TxnState
#: Each state's valid previous states (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS: Mapping[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    # TV2: an abort with nothing added comes from Empty, CompleteCommit or CompleteAbort
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
}
_IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the last epochs are kept for fencing."""
    return epoch >= INT16_MAX - 1


class TxnLog(Protocol):
    """Where the states are written (``storage.txn_coordinator.TxnStates``)."""

    def load(self) -> dict[str, TxnRecord]: ...
    def put(self, record: TxnRecord) -> None: ...
    def delete(self, transactional_id: str) -> None: ...


class ProducerIds(Protocol):
    def allocate_producer_id(self) -> int: ...


class MarkerWriter(Protocol):
    """Writes a commit/abort marker to each partition (``broker.runtime.txn_markers``); per-partition
    errors: UNKNOWN_TOPIC_OR_PARTITION counts as done (a deleted topic), others are retried."""

    def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
              partitions: Iterable[Partition]) -> Mapping[Partition, ErrorCode]: ...


class TxnGroups(Protocol):
    """The group coordinator's side: a group's pending transactional offsets committed or dropped."""

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None: ...


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    update_ms: int
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[Partition] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    next_producer_id: int = NO_PRODUCER_ID  # TV2: allocated when an EndTxn exhausted the epoch
    transaction_version: int = 1  # the client's, as of its last add or EndTxn (Kafka's clientTransactionVersion)

    def record(self) -> TxnRecord:
        return TxnRecord(self.transactional_id, self.producer_id, self.previous_producer_id,
                         self.producer_epoch, self.last_producer_epoch, self.timeout_ms,
                         self.state.value, tuple(sorted(self.partitions)), tuple(sorted(self.groups)),
                         self.start_ms, self.update_ms, self.next_producer_id, self.transaction_version)

    @classmethod
    def from_record(cls, r: TxnRecord) -> TxnMetadata:
        return cls(r.transactional_id, r.producer_id, r.producer_epoch, r.timeout_ms, TxnState(r.state),
                   r.update_ms, r.start_ms, r.previous_producer_id, r.last_producer_epoch,
                   frozenset(r.partitions), frozenset(r.groups), r.next_producer_id, r.transaction_version)


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(self, txn_log: TxnLog, producer_ids: ProducerIds, config: TxnConfig, now_ms: int,
                 markers: MarkerWriter | None = None, groups: TxnGroups | None = None,
                 owned: set[int] | None = None, partition_of: Callable[[str], int] | None = None) -> None:
        self._log = txn_log
        #: On a cluster: the transaction-state partitions this broker coordinates (None: all);
        #: ``load_partition`` / ``unload_partition`` as it becomes or stops being their leader.
        self.owned = owned
        self.partition_of = partition_of or (lambda transactional_id: 0)
        self._pids = producer_ids
        self.config = config
        self.markers = markers  # None: no partition to write to (unit tests of the states only)
        self.groups = groups
        self._txns: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}
        # PrepareX transactions whose markers or groups are still to be written, with what is left.
        self._unfinished: dict[str, tuple[set[Partition], set[str]]] = {}
        self._retry_at: int | None = None
        self._recover(now_ms, None if owned is None else (lambda transactional_id: False))

    # the one place states change ---------------------------------------------------------

    def _transition(self, meta: TxnMetadata, target: TxnState, **changes: object) -> TxnMetadata:
        """``meta`` moved to ``target`` with ``changes``: checked, written (not PrepareEpochFence,
        which Kafka never writes either), then kept. Raises StorageIOError with nothing changed."""
        check("transaction", VALID_PREVIOUS, meta.state, target)
        new = replace(meta, state=target, **changes)  # type: ignore[arg-type]
        tid = meta.transactional_id
        if target is S.DEAD:
            self._log.delete(tid)
            self._txns.pop(tid, None)
            if self._by_pid.get(meta.producer_id) == tid:
                del self._by_pid[meta.producer_id]
            return new
        if target is not S.PREPARE_EPOCH_FENCE:
            self._log.put(new.record())
        self._txns[tid] = new
        if meta.producer_id != new.producer_id and self._by_pid.get(meta.producer_id) == tid:
            del self._by_pid[meta.producer_id]
        self._by_pid[new.producer_id] = tid
        return new

    # restart ------------------------------------------------------------------------------

    def _recover(self, now_ms: int, wanted: Callable[[str], bool] | None = None) -> None:
        """Load every id (those ``wanted`` says); prepared transactions are completed (their
        markers written again), ongoing ones are left to their timeout (``tick`` aborts those
        already past it)."""
        for tid, rec in self._txns_from_log().items():
            if wanted is not None and not wanted(tid):
                continue
            self._txns[tid] = rec
            self._by_pid[rec.producer_id] = tid
            if rec.state in _PREPARED:
                self._unfinished[tid] = (set(rec.partitions), set(rec.groups))
        self.tick(now_ms)

    def _txns_from_log(self) -> dict[str, TxnMetadata]:
        return {tid: TxnMetadata.from_record(r) for tid, r in self._log.load().items()}

    def owns(self, transactional_id: str) -> bool:
        """This broker coordinates the id (its partition is loaded here)."""
        return self.owned is None or self.partition_of(transactional_id) in self.owned

    def load_partition(self, partition: int, now_ms: int) -> None:
        """This broker now leads the transaction-state partition: its ids, as stored, into
        memory; their prepared transactions are completed from here."""
        assert self.owned is not None
        self.unload_partition(partition)
        self.owned.add(partition)
        self._recover(now_ms, lambda transactional_id: self.partition_of(transactional_id) == partition)

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads the partition: its ids leave memory (the new leader
        completes what they left unfinished)."""
        assert self.owned is not None
        self.owned.discard(partition)
        for tid in [t for t in self._txns if self.partition_of(t) == partition]:
            meta = self._txns.pop(tid)
            if self._by_pid.get(meta.producer_id) == tid:
                del self._by_pid[meta.producer_id]
            self._unfinished.pop(tid, None)

    # queries ------------------------------------------------------------------------------

    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def all(self) -> list[TxnMetadata]:
        return list(self._txns.values())

    def retry_now(self) -> None:
        """Markers may be written now (another broker answered): the next tick retries at once."""
        self._retry_at = None

    def has_unfinished(self) -> bool:
        return bool(self._unfinished)

    def unfinished(self) -> set[str]:
        """Prepared transactions whose markers or groups are not all written yet."""
        return set(self._unfinished)

    def list_transactions(self, now_ms: int, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1, pattern: str | None = None
                          ) -> tuple[ErrorCode, list[str], list[TxnMetadata]]:
        """ListTransactions: (error, unknown state filters, the matching transactions)."""
        known = {s.value for s in TxnState}
        state_filter = set(states)
        unknown = [s for s in state_filter if s not in known]
        pids = set(producer_ids)
        regex = None
        if pattern:
            try:
                regex = compile_client_regex(pattern)
            except InvalidRegex:
                return ErrorCode.INVALID_REGULAR_EXPRESSION, [], []
        out = [m for m in self._txns.values()
               if m.state is not S.DEAD and m.producer_epoch != NO_PRODUCER_EPOCH  # never written
               and (not pids or m.producer_id in pids)
               and (not state_filter or m.state.value in state_filter)
               and not (duration_ms >= 0 and now_ms - m.start_ms <= duration_ms)
               and (regex is None or regex.fullmatch(m.transactional_id))]
        return ErrorCode.NONE, unknown, out

    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int) -> ErrorCode:
        """May a transactional batch of this producer be appended to the partition?"""
        tid = transactional_id if transactional_id else self._by_pid.get(producer_id)
        meta = self._txns.get(tid) if tid is not None else None
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state is not S.ONGOING or (topic, partition) not in meta.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str) -> ErrorCode:
        """May this producer commit offsets of the group in its transaction? (the group
        coordinator's TxnOffsetsGate; Kafka verifies it with the transaction coordinator)."""
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if meta.state is not S.ONGOING or group_id not in meta.groups:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # events -------------------------------------------------------------------------------

    def new_producer_id(self) -> int:
        """An idempotent producer's id (InitProducerId without a transactional id)."""
        return self._pids.allocate_producer_id()

    def init_producer_id(self, now_ms: int, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> ProducerIdAndEpoch:
        """InitProducerId with a transactional id; ``expected`` is KIP-360's (producer id, epoch)."""
        if transactional_id == "":
            return ProducerIdAndEpoch(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ProducerIdAndEpoch(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        meta = self._txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, self._pids.allocate_producer_id(), NO_PRODUCER_EPOCH,
                               timeout_ms, S.EMPTY, now_ms)
            self._txns[transactional_id] = meta  # in memory until its first write, as Kafka's cache
            self._by_pid[meta.producer_id] = transactional_id
        if expected is not None and not (
                meta.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == meta.producer_id
                or (expected[0] == meta.previous_producer_id and epoch_exhausted(expected[1]))):
            return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
        if meta.state in _PREPARED:
            return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
        try:
            if meta.state is S.ONGOING:
                # Fence the producer of the ongoing transaction and abort it; the client retries
                # (Kafka never returns the fencing epoch: the retry bumps it again).
                fenced = self._transition(meta, S.PREPARE_EPOCH_FENCE, producer_epoch=meta.producer_epoch + 1,
                                          last_producer_epoch=NO_PRODUCER_EPOCH)
                result = self._end(now_ms, fenced, commit=False, unfenced=meta)
                if result.error is not ErrorCode.NONE:
                    return ProducerIdAndEpoch(result.error)
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            if meta.state not in _IDLE:  # Dead, PrepareEpochFence: never kept between events
                raise RuntimeError(f"transactional id {transactional_id} found in state {meta.state.value}")
            idle = {"timeout_ms": timeout_ms, "partitions": frozenset(), "groups": frozenset(),
                    "start_ms": -1, "update_ms": now_ms}
            if epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
                meta = self._transition(meta, S.EMPTY, producer_id=self._pids.allocate_producer_id(),
                                        previous_producer_id=meta.producer_id, producer_epoch=0,
                                        last_producer_epoch=(meta.producer_epoch if expected is not None
                                                             else NO_PRODUCER_EPOCH), **idle)
                return ProducerIdAndEpoch(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            bumped = meta.producer_epoch + 1
            if expected is None:
                epoch, last = bumped, NO_PRODUCER_EPOCH
            elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
                epoch, last = bumped, meta.producer_epoch
            elif expected[1] == meta.last_producer_epoch:  # a retry of a bump that succeeded
                epoch, last = meta.producer_epoch, meta.last_producer_epoch
            else:
                return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
            meta = self._transition(meta, S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, **idle)
        except StorageIOError:
            return ProducerIdAndEpoch(ErrorCode.NOT_COORDINATOR)
        return ProducerIdAndEpoch(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)

    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                        ) -> TxnMetadata | ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.state in _PREPARED:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return meta

    def _add(self, now_ms: int, meta: TxnMetadata, partitions: frozenset[Partition],
             groups: frozenset[str], transaction_version: int = 1) -> ErrorCode:
        if (meta.state is S.ONGOING and partitions <= meta.partitions and groups <= meta.groups
                and meta.transaction_version == transaction_version):
            return ErrorCode.NONE
        start = now_ms if meta.state in _IDLE else meta.start_ms
        try:
            self._transition(meta, S.ONGOING, partitions=meta.partitions | partitions,
                             groups=meta.groups | groups, start_ms=start, update_ms=now_ms,
                             transaction_version=transaction_version)
        except StorageIOError:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def add_partitions(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[Partition]) -> ErrorCode:
        """AddPartitionsToTxn: one answer for all the partitions, as Kafka's coordinator."""
        meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return meta
        return self._add(now_ms, meta, frozenset(partitions), frozenset())

    def add_implicitly(self, now_ms: int, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       partitions: Iterable[Partition] = (), groups: Iterable[str] = ()) -> ErrorCode:
        """Transaction version 2 (KIP-890 part 2): a transactional Produce (v12+) or
        TxnOffsetCommit (v5+) adds its partition or group itself — Kafka's broker sends the
        coordinator AddPartitionsToTxn v5 "verify and add" (``addPartition``); here a call. The
        coordinator's answers as AddPartitionsToTxn's (INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while prepared); the caller translates them
        for its request as Kafka's AddPartitionsToTxnManager / ReplicaManager do."""
        tid = transactional_id if transactional_id else self._by_pid.get(producer_id)
        if tid is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        meta = self._check_producer(tid, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return meta
        return self._add(now_ms, meta, frozenset(partitions), frozenset(groups), transaction_version=2)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[Partition]) -> dict[Partition, ErrorCode]:
        """AddPartitionsToTxn with verify_only (KIP-890): is each partition in the transaction?"""
        parts = list(partitions)
        meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return dict.fromkeys(parts, meta)
        return {p: ErrorCode.NONE if p in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE for p in parts}

    def add_offsets(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction (here: the group)."""
        meta = self._check_producer(transactional_id, producer_id, producer_epoch)
        if isinstance(meta, ErrorCode):
            return meta
        return self._add(now_ms, meta, frozenset(), frozenset({group_id}))

    def end_txn(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, transaction_version: int = 1) -> ProducerIdAndEpoch:
        """EndTxn from the client. Transaction version 2 (EndTxn v5 of a client that negotiated
        it): every commit or abort bumps the epoch (an exhausted one allocates the next producer
        id, taken on at CompleteX), the markers carry the bumped epoch and the answer gives the
        new producer id and epoch; a retry is known by its epoch being the one before the bump
        (or, after a rotation, the last epoch of the previous producer id)."""
        if not transactional_id:
            return ProducerIdAndEpoch(ErrorCode.INVALID_REQUEST)
        meta = self._txns.get(transactional_id)
        if meta is None:
            return ProducerIdAndEpoch(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if transaction_version >= 2:
            return self._end_tv2(now_ms, meta, producer_id, producer_epoch, commit)
        if meta.producer_id != producer_id:
            return ProducerIdAndEpoch(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if producer_epoch != meta.producer_epoch:
            return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
        if meta.state in _PREPARED:  # markers under way, whichever result is asked
            return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state is S.ONGOING:
            return self._end(now_ms, meta, commit)
        return self._not_ongoing(meta, commit, retry=True)  # version 1: a retry has the same epoch

    def _end_tv2(self, now_ms: int, meta: TxnMetadata, producer_id: int, producer_epoch: int,
                 commit: bool) -> ProducerIdAndEpoch:
        """EndTxn v5 (Kafka's ``endTransaction``, chosen by the request's version as Kafka does,
        not by how the transaction was begun): a retry is known by its epoch; an abort with the
        current epoch and nothing added (Empty, CompleteCommit, CompleteAbort) is a transaction
        of its own — PrepareAbort with the epoch bumped, then CompleteAbort with no marker —
        which a client sends when every produce of its transaction failed before reaching the
        broker (franz-go: records waiting for a topic's metadata aborted client-side)."""
        bumped_retry = meta.producer_epoch == producer_epoch + 1
        overflow_retry = (meta.previous_producer_id == producer_id and producer_epoch == INT16_MAX - 1
                          and meta.producer_epoch == 0)
        retry = bumped_retry or overflow_retry
        if meta.producer_id != producer_id and not overflow_retry:
            return ProducerIdAndEpoch(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.state in _PREPARED:  # markers under way (Kafka: pending CompleteX, KAFKA-18464)
            return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry or producer_epoch == meta.producer_epoch
        else:
            valid = producer_epoch == meta.producer_epoch
        if not valid:
            return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
        if meta.state is S.ONGOING or (not commit and not retry and meta.state in _IDLE):
            return self._end(now_ms, meta, commit, bump=True)
        return self._not_ongoing(meta, commit, retry)

    @staticmethod
    def _not_ongoing(meta: TxnMetadata, commit: bool, retry: bool) -> ProducerIdAndEpoch:
        """EndTxn for a transaction that is neither ongoing nor prepared: a retry of one that
        completed the same way gets the answer again; else INVALID_TXN_STATE."""
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        if meta.state is done and retry:
            return ProducerIdAndEpoch(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        return ProducerIdAndEpoch(ErrorCode.INVALID_TXN_STATE)

    def _end(self, now_ms: int, meta: TxnMetadata, commit: bool,
             unfenced: TxnMetadata | None = None, bump: bool = False) -> ProducerIdAndEpoch:
        """Ongoing (or fenced: ``unfenced`` is the state before the fence; or, for a TV2 empty
        abort, Empty / CompleteX) → PrepareX, written;
        then the markers and groups. ``bump`` (transaction version 2): PrepareX carries the
        next epoch (Kafka's prepareAbortOrCommit), and the next producer id if the epoch is
        exhausted; the answer is the producer id and epoch the client goes on with."""
        changes: dict[str, object] = {"update_ms": now_ms}
        if meta.state in _IDLE:  # an empty abort: its own transaction, begun now
            changes["start_ms"] = now_ms
        if bump:
            changes.update(producer_epoch=meta.producer_epoch + 1, last_producer_epoch=meta.producer_epoch,
                           transaction_version=2)
            if epoch_exhausted(meta.producer_epoch):
                changes["next_producer_id"] = self._pids.allocate_producer_id()
        try:
            meta = self._transition(meta, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, **changes)
        except StorageIOError:
            if unfenced is not None:  # the fence was never written: the transaction stays as it was
                self._txns[meta.transactional_id] = unfenced
            return ProducerIdAndEpoch(ErrorCode.NOT_COORDINATOR)
        self._unfinished[meta.transactional_id] = (set(meta.partitions), set(meta.groups))
        self._complete(now_ms, meta.transactional_id)
        if meta.next_producer_id != NO_PRODUCER_ID:
            return ProducerIdAndEpoch(ErrorCode.NONE, meta.next_producer_id, 0)
        return ProducerIdAndEpoch(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)

    def _complete(self, now_ms: int, transactional_id: str) -> None:
        """Write what is left of a prepared transaction's markers and groups; CompleteX when all are."""
        meta = self._txns[transactional_id]
        partitions, groups = self._unfinished[transactional_id]
        commit = meta.state is S.PREPARE_COMMIT
        if partitions and self.markers is not None:
            errors = self.markers.write(meta.producer_id, meta.producer_epoch, commit, COORDINATOR_EPOCH,
                                        sorted(partitions))
            for p in list(partitions):
                if errors.get(p, ErrorCode.NONE) in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    partitions.discard(p)
        elif self.markers is None:
            partitions.clear()
        for g in sorted(groups):
            if self.groups is not None:
                try:
                    self.groups.complete_transaction(g, meta.producer_id, meta.producer_epoch, commit)
                except StorageIOError:
                    continue
            groups.discard(g)
        if partitions or groups:
            # on a cluster the markers of other brokers' partitions are answered later as a rule:
            # worth a warning only once they are a retry period late
            late = now_ms - meta.update_ms >= MARKER_RETRY_MS
            log.log(logging.WARNING if late else logging.DEBUG,
                    "transaction %s: markers to %d partitions and %d groups not written yet; retrying",
                    transactional_id, len(partitions), len(groups))
            self._retry_at = now_ms + MARKER_RETRY_MS
            return
        rotate: dict[str, object] = {}
        if meta.next_producer_id != NO_PRODUCER_ID:  # TV2's exhausted epoch: the new id from now on
            rotate = {"producer_id": meta.next_producer_id, "previous_producer_id": meta.producer_id,
                      "producer_epoch": 0, "last_producer_epoch": meta.producer_epoch,
                      "next_producer_id": NO_PRODUCER_ID}
        try:
            self._transition(meta, S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
                             partitions=frozenset(), groups=frozenset(), update_ms=now_ms, **rotate)
        except StorageIOError:
            self._retry_at = now_ms + MARKER_RETRY_MS
            return
        del self._unfinished[transactional_id]

    # time ---------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest time ``tick`` has something to do (ms), None if nothing is pending."""
        deadlines = [m.start_ms + m.timeout_ms + 1 for m in self._txns.values() if m.state is S.ONGOING]
        deadlines += [m.update_ms + self.config.id_expiration_ms for m in self._txns.values()
                      if m.state in _IDLE]
        if self._unfinished and self._retry_at is not None:
            deadlines.append(self._retry_at)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> None:
        """Retry unfinished markers, abort timed-out transactions, expire idle ids."""
        if self._unfinished and (self._retry_at is None or now_ms >= self._retry_at):
            self._retry_at = None
            for tid in list(self._unfinished):
                self._complete(now_ms, tid)
        for meta in list(self._txns.values()):
            if meta.state is S.ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                log.info("aborting transaction %s (producer id %d, epoch %d): timed out after %d ms",
                         meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.timeout_ms)
                try:
                    fenced = self._transition(meta, S.PREPARE_EPOCH_FENCE, producer_epoch=meta.producer_epoch + 1,
                                              last_producer_epoch=NO_PRODUCER_EPOCH)
                except StorageIOError:  # not reached: the fence is not written
                    continue
                self._end(now_ms, fenced, commit=False, unfenced=meta)
            elif meta.state in _IDLE and meta.update_ms + self.config.id_expiration_ms <= now_ms:
                try:
                    self._transition(meta, S.DEAD)
                except StorageIOError:
                    continue
