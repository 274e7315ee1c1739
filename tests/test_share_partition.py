"""A share-partition's record states (issue 30, step 1; coordinator/share_partition.py): KIP-932's
rules for acquiring, acknowledging, lock expiry, the delivery limit and the in-flight window,
the durable snapshot and its restore, and — over random sequences of events — the invariants
a share group promises: nothing below the start offset is delivered again, nothing
acknowledged is delivered again, every offset is settled at most once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tmqgate.coordinator.share_partition import (
    AckType,
    Acquired,
    RecordState,
    SharePartition,
    Snapshot,
    StateBatch,
)
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import IllegalStateTransition


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _part(start: int = 0, **limits: int) -> tuple[SharePartition, Clock]:
    clock = Clock()
    return SharePartition(start, clock, **limits), clock


def test_members_share_a_partition_and_each_record_is_delivered_once() -> None:
    p, _ = _part()
    assert p.acquire("a", log_end=10, max_records=4) == [Acquired(0, 3, 1)]
    assert p.acquire("b", log_end=10, max_records=4) == [Acquired(4, 7, 1)]
    assert p.acquire("c", log_end=10, max_records=4) == [Acquired(8, 9, 1)]
    assert p.acquire("c", log_end=10, max_records=4) == []  # nothing left
    assert p.acknowledge("b", 4, 7, AckType.ACCEPT) is ErrorCode.NONE
    assert p.start == 0  # a's records still hold it
    assert p.acknowledge("a", 0, 3, AckType.ACCEPT) is ErrorCode.NONE
    assert (p.start, p.end) == (8, 10)
    assert p.acknowledge("c", 8, 9, AckType.ACCEPT) is ErrorCode.NONE
    assert (p.start, p.end, p.records) == (10, 10, {})


def test_only_the_holder_settles_a_record_and_a_refused_batch_changes_nothing() -> None:
    p, _ = _part()
    p.acquire("a", 5, 3)
    p.acquire("b", 5, 2)
    for member, first, last in (("b", 0, 2), ("a", 2, 3), ("a", 0, 5), ("a", 3, 1), ("a", -1, 0)):
        assert p.acknowledge(member, first, last, AckType.ACCEPT) is ErrorCode.INVALID_RECORD_STATE
    assert all(r.state is RecordState.ACQUIRED for r in p.records.values())
    assert p.acknowledge("a", 0, 2, AckType.ACCEPT) is ErrorCode.NONE
    assert p.acknowledge("a", 0, 0, AckType.ACCEPT) is ErrorCode.INVALID_RECORD_STATE  # settled already


def test_release_redelivers_reject_archives_and_the_limit_archives_a_poison_record() -> None:
    p, _ = _part(delivery_limit=3)
    p.acquire("a", 3, 3)
    assert p.acknowledge("a", 0, 0, AckType.REJECT) is ErrorCode.NONE
    assert p.acknowledge("a", 1, 1, AckType.ACCEPT) is ErrorCode.NONE
    assert p.acknowledge("a", 2, 2, AckType.RELEASE) is ErrorCode.NONE
    assert p.start == 2 and p.records[2].state is RecordState.AVAILABLE
    # offset 2 is poison: released after each delivery until its third
    assert p.acquire("b", 3, 10) == [Acquired(2, 2, 2)]
    assert p.acknowledge("b", 2, 2, AckType.RELEASE) is ErrorCode.NONE
    assert p.acquire("a", 3, 10) == [Acquired(2, 2, 3)]
    assert p.acknowledge("a", 2, 2, AckType.RELEASE) is ErrorCode.NONE
    assert (p.start, p.records) == (3, {})  # archived at the limit
    assert p.acquire("a", 3, 10) == []


def test_a_lock_runs_out_and_renew_keeps_it() -> None:
    p, clock = _part(lock_ms=30_000)
    p.acquire("a", 4, 4)
    clock.now += 20_000
    assert p.acknowledge("a", 2, 3, AckType.RENEW) is ErrorCode.NONE
    clock.now += 10_000  # 0..1 ran out, 2..3 were renewed
    assert p.expire() == [0, 1]
    assert p.acquire("b", 4, 10) == [Acquired(0, 1, 2)]
    assert p.acknowledge("a", 0, 0, AckType.ACCEPT) is ErrorCode.INVALID_RECORD_STATE  # not hers any more
    assert p.acknowledge("a", 2, 3, AckType.ACCEPT) is ErrorCode.NONE
    clock.now += 30_000
    assert p.acquire("c", 4, 10) == [Acquired(0, 1, 3)]


def test_a_member_that_leaves_gives_its_records_back() -> None:
    p, _ = _part()
    p.acquire("a", 6, 3)
    p.acquire("b", 6, 3)
    p.member_left("a")
    assert p.acquire("b", 6, 10) == [Acquired(0, 2, 2)]


def test_the_in_flight_window_is_bounded() -> None:
    p, _ = _part(max_locks=5)
    assert p.acquire("a", 100, 10) == [Acquired(0, 4, 1)]
    assert p.acquire("b", 100, 10) == []
    p.acknowledge("a", 1, 4, AckType.ACCEPT)
    assert p.acquire("b", 100, 10) == []  # offset 0 still holds the window
    p.acknowledge("a", 0, 0, AckType.ACCEPT)
    assert p.acquire("b", 100, 10) == [Acquired(5, 9, 1)]


def test_runs_split_by_delivery_count() -> None:
    p, _ = _part()
    p.acquire("a", 6, 6)
    p.acknowledge("a", 1, 1, AckType.RELEASE)
    p.acknowledge("a", 3, 4, AckType.RELEASE)
    p.acknowledge("a", 0, 0, AckType.ACCEPT)
    assert p.acquire("b", 9, 10) == [Acquired(1, 1, 2), Acquired(3, 4, 2), Acquired(6, 8, 1)]


def test_snapshot_and_restore_keep_what_was_settled_and_free_what_was_held() -> None:
    p, clock = _part(start=10)
    p.acquire("a", 20, 8)
    p.acknowledge("a", 10, 11, AckType.ACCEPT)
    p.acknowledge("a", 13, 13, AckType.REJECT)
    p.acknowledge("a", 14, 14, AckType.RELEASE)
    snap = p.snapshot()
    assert snap == Snapshot(12, (StateBatch(12, 12, RecordState.AVAILABLE, 1),
                                 StateBatch(13, 13, RecordState.ARCHIVED, 1),
                                 StateBatch(14, 17, RecordState.AVAILABLE, 1)))
    q = SharePartition.restore(snap, clock)
    assert (q.start, q.end) == (12, 18)
    assert q.acquire("b", 20, 10) == [Acquired(12, 12, 2), Acquired(14, 17, 2), Acquired(18, 19, 1)]


def test_a_record_held_at_its_last_delivery_is_archived_by_a_restart() -> None:
    """Found by the random events in CI: a restart gave a record back without the limit, so
    it was delivered a fourth time with a limit of three."""
    p, clock = _part(delivery_limit=3)
    p.acquire("a", 2, 2)
    for _ in range(2):
        p.acknowledge("a", 0, 1, AckType.RELEASE)
        p.acquire("a", 2, 2)
    p.acknowledge("a", 1, 1, AckType.ACCEPT)
    assert p.records[0].delivery_count == 3
    q = SharePartition.restore(p.snapshot(), clock, delivery_limit=3)
    assert (q.start, q.records, q.acquire("b", 2, 10)) == (2, {}, [])


def test_transitions_outside_the_table_are_bugs() -> None:
    p, _ = _part()
    p.acquire("a", 1, 1)
    p.acknowledge("a", 0, 0, AckType.RELEASE)
    with pytest.raises(IllegalStateTransition):
        p._move(0, RecordState.ACKNOWLEDGED)  # an available record is never accepted


_EVENTS = st.lists(st.one_of(
    st.tuples(st.just("fetch"), st.sampled_from("abc"), st.integers(1, 6), st.integers(0, 3)),
    st.tuples(st.just("ack"), st.sampled_from("abc"), st.integers(0, 30), st.integers(0, 4),
              st.sampled_from(list(AckType))),
    st.tuples(st.just("tick"), st.integers(0, 40_000)),
    st.tuples(st.just("leave"), st.sampled_from("abc")),
    st.tuples(st.just("restart")),
), max_size=60)


@settings(max_examples=1000, deadline=None)
@given(_EVENTS)
def test_invariants_over_random_events(events: list[tuple]) -> None:  # type: ignore[type-arg]
    p, clock = _part(lock_ms=30_000, delivery_limit=3, max_locks=8)
    log_end = 0
    settled: set[int] = set()
    holders: dict[int, str] = {}
    for event in events:
        if event[0] == "fetch":
            _, member, n, grow = event
            log_end += grow
            for run in p.acquire(member, log_end, n):
                for offset in range(run.first, run.last + 1):
                    assert offset >= p.start - 0 and offset not in settled, (offset, p.start)
                    assert 1 <= run.delivery_count <= 3
                    holders[offset] = member
        elif event[0] == "ack":
            _, member, first, width, kind = event
            before = {o: (r.state, r.member) for o, r in p.records.items()}
            code = p.acknowledge(member, first, first + width, kind)
            if code is ErrorCode.NONE:
                if kind in (AckType.ACCEPT, AckType.REJECT, AckType.GAP):
                    for offset in range(first, first + width + 1):
                        assert offset not in settled
                        settled.add(offset)
            else:
                assert {o: (r.state, r.member) for o, r in p.records.items()} == before
        elif event[0] == "tick":
            clock.now += event[1]
            p.expire()
        elif event[0] == "leave":
            p.member_left(event[1])
        else:
            p = SharePartition.restore(p.snapshot(), clock, lock_ms=30_000, delivery_limit=3, max_locks=8)
        assert p.start <= p.end <= max(log_end, p.start) and p.end - p.start <= 8
        assert set(p.records) == set(range(p.start, p.end))
        assert p.start == p.end or p.records[p.start].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        assert all(r.delivery_count <= 3 for r in p.records.values())
        assert all((r.state is RecordState.ACQUIRED) == (r.member is not None) for r in p.records.values())


def test_offsets_with_nothing_to_deliver_are_archived_as_passed_not_handed_out() -> None:
    """A query topic's filtered rows and transaction markers (`gaps`): never acquired, not
    counted against max_records, and the start moves past them as past acknowledged ones."""
    clock = [0]
    sp = SharePartition(0, lambda: clock[0])
    assert sp.acquire("m", 20, 3, gaps=[(0, 1), (3, 5)]) == [Acquired(2, 2, 1), Acquired(6, 7, 1)]
    assert sp.start == 2 and sp.end == 8
    assert sp.acknowledge("m", 2, 2, AckType.ACCEPT) is ErrorCode.NONE
    assert sp.start == 6  # 3..5 were archived as passed
    assert sp.acknowledge("m", 3, 3, AckType.ACCEPT) is ErrorCode.INVALID_RECORD_STATE
    assert sp.acquire("n", 12, 10, gaps=[(8, 11)]) == []
    assert (sp.start, sp.end) == (6, 12)
