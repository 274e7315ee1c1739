"""A share group's view of one partition (KIP-932's share-partition): which records are in
flight, to whom, how often delivered — as a clocked state machine, pure (no I/O).

Issue 30, step 1: the record states and their rules, with the durable form Kafka's share
coordinator keeps (the start offset and the state batches beyond it), restored after a
restart. ShareFetch acquires, ShareAcknowledge settles; the broker drives it with the log's
end (the last stable offset) and a clock (``now_ms``) tests can fake.

The window: offsets below the share-partition start offset (SPSO, ``start``) are done (each
acknowledged or archived); offsets from ``start`` up to ``end`` are in flight, each with a
state; offsets from ``end`` on have not been handed out yet. At most ``max_locks`` offsets
are in flight (``group.share.partition.max.record.locks``): a fetch acquires nothing new past
that until the start moves.

Record states (``RecordState``; the values Kafka's persister writes), changed only through
``SharePartition._move``, checked against ``VALID_PREVIOUS``:

AVAILABLE — may be acquired by any member: released, its lock ran out, or acquired when the
    broker stopped (a lock does not outlive it). → ACQUIRED on a fetch.
ACQUIRED — delivered to one member, locked to it until its deadline (now + the record lock
    duration; RENEW moves it on). → ACKNOWLEDGED on ACCEPT; → ARCHIVED on REJECT, and on
    RELEASE / lock expiry / the member leaving once it has been delivered
    ``delivery_limit`` times; → AVAILABLE on those below the limit.
ACKNOWLEDGED — processed (ACCEPT). Final; the start moves past it.
ARCHIVED — rejected, a poison record past the delivery limit, or a gap (an offset with no
    record, acknowledged as GAP). Final; the start moves past it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum, IntEnum

from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import check

RECORD_LOCK_DURATION_MS = 30_000  # group.share.record.lock.duration.ms
DELIVERY_COUNT_LIMIT = 5  # group.share.delivery.count.limit
PARTITION_MAX_RECORD_LOCKS = 2000  # group.share.partition.max.record.locks


class RecordState(Enum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


VALID_PREVIOUS: dict[RecordState, frozenset[RecordState]] = {
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED}),
    RecordState.ACQUIRED: frozenset({RecordState.AVAILABLE}),
    RecordState.ACKNOWLEDGED: frozenset({RecordState.ACQUIRED}),
    RecordState.ARCHIVED: frozenset({RecordState.ACQUIRED}),
}
DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(IntEnum):
    """ShareAcknowledge's and ShareFetch's AcknowledgeTypes."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass
class InFlight:
    state: RecordState
    delivery_count: int
    member: str | None = None  # who holds it (ACQUIRED only)
    deadline_ms: int = 0  # when its lock runs out (ACQUIRED only)


@dataclass(frozen=True)
class Acquired:
    """A run of offsets handed to a member in one fetch, delivered `delivery_count` times
    (ShareFetch's AcquiredRecords)."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """A run of in-flight offsets with one state and delivery count, as persisted (an
    acquired record is persisted as given back: its lock does not outlive the broker)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True)
class Snapshot:
    """The durable form: the start offset and the in-flight state beyond it."""

    start: int
    batches: tuple[StateBatch, ...]


class SharePartition:
    """One partition as one share group sees it (see the module docstring)."""

    def __init__(self, start: int, now_ms: Callable[[], int], *, lock_ms: int = RECORD_LOCK_DURATION_MS,
                 delivery_limit: int = DELIVERY_COUNT_LIMIT, max_locks: int = PARTITION_MAX_RECORD_LOCKS) -> None:
        self.start = start
        self.end = start
        self.records: dict[int, InFlight] = {}
        self.now_ms = now_ms
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks

    # -- the one way a record's state changes ------------------------------------------------

    def _move(self, offset: int, target: RecordState, member: str | None = None) -> None:
        record = self.records[offset]
        record.state = check("SharePartition", VALID_PREVIOUS, record.state, target)
        if target is RecordState.ACQUIRED:
            record.delivery_count += 1
            record.member = member
            record.deadline_ms = self.now_ms() + self.lock_ms
        else:
            record.member = None
            record.deadline_ms = 0

    def _give_back(self, offset: int) -> None:
        """An acquired record released, timed out or left by its member: available again, or
        archived once delivered `delivery_limit` times."""
        spent = self.records[offset].delivery_count >= self.delivery_limit
        self._move(offset, RecordState.ARCHIVED if spent else RecordState.AVAILABLE)

    # -- events ------------------------------------------------------------------------------

    def first_available(self) -> int:
        """The first offset a fetch may hand out: the oldest available one in flight, else the
        first never handed out (`end`)."""
        self.expire()
        return next((o for o in range(self.start, self.end) if self.records[o].state is RecordState.AVAILABLE),
                    self.end)

    def acquire(self, member: str, log_end: int, max_records: int,
                gaps: list[tuple[int, int]] | None = None) -> list[Acquired]:
        """Hand `member` up to `max_records` records below `log_end` (the log's end, or as far
        as the fetch read): the available ones in flight first (redeliveries, oldest first),
        then new offsets, within `max_locks`. `gaps`: sorted runs of new offsets that hold no
        record to deliver (a query topic's rows its filter dropped, transaction markers):
        archived as they are passed, never handed out (a client would acknowledge them as GAP)."""
        self.expire()
        taken: list[int] = []
        for offset in range(self.start, min(self.end, log_end)):
            if len(taken) >= max_records:
                break
            if self.records[offset].state is RecordState.AVAILABLE:
                self._move(offset, RecordState.ACQUIRED, member)
                taken.append(offset)
        holes = iter(gaps or ())
        hole = next(holes, None)
        while len(taken) < max_records and self.end < log_end and self.end - self.start < self.max_locks:
            while hole is not None and hole[1] < self.end:
                hole = next(holes, None)
            if hole is not None and hole[0] <= self.end:
                self.records[self.end] = InFlight(RecordState.ARCHIVED, 0)  # never in flight: no move
            else:
                self.records[self.end] = InFlight(RecordState.AVAILABLE, 0)
                self._move(self.end, RecordState.ACQUIRED, member)
                taken.append(self.end)
            self.end += 1
        self._advance()
        return list(self._runs(taken))

    def acknowledge(self, member: str, first: int, last: int, kind: AckType) -> ErrorCode:
        """Settle offsets first..last, all acquired by `member` (else INVALID_RECORD_STATE
        and nothing changes); ACCEPT, RELEASE, REJECT, RENEW, or GAP (no record there)."""
        self.expire()
        if first > last or first < self.start or last >= self.end:
            return ErrorCode.INVALID_RECORD_STATE
        for offset in range(first, last + 1):
            record = self.records[offset]
            if record.state is not RecordState.ACQUIRED or record.member != member:
                return ErrorCode.INVALID_RECORD_STATE
        for offset in range(first, last + 1):
            if kind is AckType.ACCEPT:
                self._move(offset, RecordState.ACKNOWLEDGED)
            elif kind in (AckType.REJECT, AckType.GAP):
                self._move(offset, RecordState.ARCHIVED)
            elif kind is AckType.RELEASE:
                self._give_back(offset)
            else:  # RENEW: the lock runs again from now
                self.records[offset].deadline_ms = self.now_ms() + self.lock_ms
        self._advance()
        return ErrorCode.NONE

    def expire(self) -> list[int]:
        """Give back the records whose lock ran out; their offsets."""
        now = self.now_ms()
        expired = [o for o, r in self.records.items() if r.state is RecordState.ACQUIRED and r.deadline_ms <= now]
        for offset in expired:
            self._give_back(offset)
        self._advance()
        return expired

    def member_left(self, member: str) -> None:
        """A member left or was fenced: what it holds goes back at once."""
        for offset, record in list(self.records.items()):
            if record.state is RecordState.ACQUIRED and record.member == member:
                self._give_back(offset)
        self._advance()

    def reset(self, start: int) -> None:
        """AlterShareGroupOffsets (only with no member in the group): start again at `start`,
        nothing in flight (the window, not any record's state, is what changes)."""
        self.records.clear()
        self.start = self.end = start

    def _advance(self) -> None:
        while self.start < self.end and self.records[self.start].state in DONE:
            del self.records[self.start]
            self.start += 1

    # -- what the broker reports and persists -------------------------------------------------

    def in_flight(self) -> int:
        return self.end - self.start

    def snapshot(self) -> Snapshot:
        """The durable form (Kafka's WriteShareGroupState: the start and the state batches).
        A lock does not outlive the broker, so an acquired record is written as giving it
        back would leave it: available, or archived once delivered `delivery_limit` times."""
        batches: list[StateBatch] = []
        for offset in range(self.start, self.end):
            record = self.records[offset]
            state = record.state
            if state is RecordState.ACQUIRED:
                spent = record.delivery_count >= self.delivery_limit
                state = RecordState.ARCHIVED if spent else RecordState.AVAILABLE
            last = batches[-1] if batches else None
            if last is not None and last.last == offset - 1 and last.state is state \
                    and last.delivery_count == record.delivery_count:
                batches[-1] = StateBatch(last.first, offset, state, last.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, record.delivery_count))
        return Snapshot(self.start, tuple(batches))

    @classmethod
    def restore(cls, snapshot: Snapshot, now_ms: Callable[[], int], **limits: int) -> SharePartition:
        """The partition as `snapshot` left it (after a restart: nothing is acquired)."""
        part = cls(snapshot.start, now_ms, **limits)
        for batch in snapshot.batches:
            for offset in range(batch.first, batch.last + 1):
                state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
                part.records[offset] = InFlight(state, batch.delivery_count)
                part.end = max(part.end, offset + 1)
        for offset in range(part.start, part.end):  # a hole in the batches: not handed out yet
            part.records.setdefault(offset, InFlight(RecordState.AVAILABLE, 0))
        part._advance()
        return part

    def _runs(self, offsets: list[int]) -> Iterator[Acquired]:
        """Consecutive offsets with one delivery count, as AcquiredRecords runs."""
        run: list[int] = []
        for offset in sorted(offsets):
            if run and (offset != run[-1] + 1
                        or self.records[offset].delivery_count != self.records[run[0]].delivery_count):
                yield Acquired(run[0], run[-1], self.records[run[0]].delivery_count)
                run = []
            run.append(offset)
        if run:
            yield Acquired(run[0], run[-1], self.records[run[0]].delivery_count)
