"""Share sessions and durable share-partitions (broker/runtime/shares.py, storage/share_state.py),
on a real LevelDB store with a fake clock: the rules the wire tests (compat_tests/
test_share_groups.py) cannot reach one by one."""

from __future__ import annotations

from pathlib import Path

from tmqgate.broker.runtime.shares import ShareRuntime
from tmqgate.coordinator.share_group import ShareSettings
from tmqgate.coordinator.share_partition import AckType, Acquired
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store

TOPIC = bytes(range(16))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _runtime(store: Store | None, clock: Clock, **settings: object) -> ShareRuntime:
    s = ShareSettings(**settings)  # type: ignore[arg-type]
    return ShareRuntime(clock, lambda group: s, store.share_states if store is not None else None)


def test_a_session_opens_at_epoch_0_and_each_request_brings_the_next_epoch() -> None:
    rt = _runtime(None, Clock())
    assert rt.session("g", "m", 1) == (None, ErrorCode.SHARE_SESSION_NOT_FOUND)
    session, code = rt.session("g", "m", 0)
    assert code is ErrorCode.NONE and session is not None and session.epoch == 1
    assert rt.session("g", "m", 2) == (None, ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    assert rt.session("g", "m", 1)[0] is session and session.epoch == 2
    assert rt.session("g", "m", 1) == (None, ErrorCode.INVALID_SHARE_SESSION_EPOCH)  # a replay
    assert rt.session("g", "m", -1)[0] is session  # closing: gone for the next request
    assert rt.session("g", "m", 2) == (None, ErrorCode.SHARE_SESSION_NOT_FOUND)


def test_closing_or_reopening_a_session_gives_back_what_its_member_held() -> None:
    clock = Clock()
    rt = _runtime(None, clock)
    session, _ = rt.session("g", "m", 0)
    assert session is not None
    session.partitions.add((TOPIC, 0))
    sp = rt.share_partition("g", TOPIC, 0, lambda reset: 0)
    assert sp.acquire("m", 10, 4) == [Acquired(0, 3, 1)]
    rt.session("g", "m", 0)  # the client started over: its old session's records go back
    other, _ = rt.session("g", "other", 0)
    assert sp.acquire("other", 10, 2) == [Acquired(0, 1, 2)]
    assert other is not None
    other.partitions.add((TOPIC, 0))
    rt.session("g", "other", -1)
    rt.close(other)
    assert sp.acquire("m", 10, 10) == [Acquired(0, 1, 3), Acquired(2, 3, 2), Acquired(4, 9, 1)]


def test_a_session_unused_for_the_session_timeout_is_closed() -> None:
    clock = Clock()
    rt = _runtime(None, clock, session_timeout_ms=45_000)
    session, _ = rt.session("g", "m", 0)
    assert session is not None
    session.partitions.add((TOPIC, 0))
    sp = rt.share_partition("g", TOPIC, 0, lambda reset: 0)
    sp.acquire("m", 5, 5)
    clock.ms += 45_001
    assert rt.session("g", "m", 1) == (None, ErrorCode.SHARE_SESSION_NOT_FOUND)
    assert [r.delivery_count for r in sp.records.values()] == [1] * 5
    assert sp.acquire("x", 5, 5) == [Acquired(0, 4, 2)]


def test_the_start_follows_share_auto_offset_reset_when_the_share_partition_is_made() -> None:
    starts = {"earliest": 3, "latest": 40}
    for reset, expected in starts.items():
        rt = _runtime(None, Clock(), auto_offset_reset=reset)
        assert rt.share_partition("g", TOPIC, 0, starts.__getitem__).start == expected


def test_the_state_survives_a_restart_acknowledged_never_again_deliveries_counted(tmp_path: Path) -> None:
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=3)
        sp = rt.share_partition("g", TOPIC, 2, lambda reset: 0)
        assert sp.acquire("m", 20, 10) == [Acquired(0, 9, 1)]
        assert sp.acknowledge("m", 0, 3, AckType.ACCEPT) is ErrorCode.NONE
        assert sp.acknowledge("m", 4, 4, AckType.REJECT) is ErrorCode.NONE
        assert sp.acknowledge("m", 5, 5, AckType.RELEASE) is ErrorCode.NONE
        assert sp.acquire("m", 20, 1) == [Acquired(5, 5, 2)]
        rt.save(("g", TOPIC, 2))
        other = rt.share_partition("g2", TOPIC, 2, lambda reset: 7)
        other.acquire("m", 20, 1)
        rt.save(("g2", TOPIC, 2))
    # kill -9 after the writes: what a new broker reads back
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=3)
        sp = rt.share_partition("g", TOPIC, 2, lambda reset: 99)  # the stored start wins
        assert sp.start == 5
        # 5 was held at its second delivery, 6..9 at their first; 10.. never handed out
        assert sp.acquire("n", 20, 20) == [Acquired(5, 5, 3), Acquired(6, 9, 2), Acquired(10, 19, 1)]
        assert rt.share_partition("g2", TOPIC, 2, lambda reset: 0).start == 7
        rt.forget([("g2", TOPIC, 2)])
    with Store(tmp_path / "d") as store:
        assert {k[0] for k in store.share_states.load()} == {"g"}


def test_a_record_held_at_its_last_delivery_is_archived_by_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=2)
        sp = rt.share_partition("g", TOPIC, 0, lambda reset: 0)
        sp.acquire("m", 1, 1)
        sp.acknowledge("m", 0, 0, AckType.RELEASE)
        assert sp.acquire("m", 2, 2) == [Acquired(0, 0, 2), Acquired(1, 1, 1)]
        rt.save(("g", TOPIC, 0))
    with Store(tmp_path / "d") as store:
        sp = _runtime(store, clock, delivery_count_limit=2).share_partition("g", TOPIC, 0, lambda reset: 0)
        assert sp.acquire("n", 2, 5) == [Acquired(1, 1, 2)]


def test_share_groups_are_listed_after_a_restart_until_deleted(tmp_path: Path) -> None:
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock)
        group = rt.group("g", create=True)
        assert group is not None
        group.heartbeat("m", 0, ["t"], {"t": 1})
        rt.group("other", create=True)
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock)
        assert sorted(rt.groups) == ["g", "other"]
        assert {g.state.value for g in rt.groups.values()} == {"Empty"}
        assert rt.delete_group("other") is ErrorCode.NONE
    with Store(tmp_path / "d") as store:
        assert sorted(_runtime(store, clock).groups) == ["g"]


def test_closing_a_session_gives_back_what_it_held_in_partitions_it_forgot() -> None:
    """ShareFetch's ForgottenTopicsData only takes a partition out of the session (the member
    still acknowledges what it got there); the session's end gives those records back too."""
    rt = _runtime(None, Clock())
    session, _ = rt.session("g", "m", 0)
    assert session is not None
    session.partitions.add((TOPIC, 3))
    sp = rt.share_partition("g", TOPIC, 3, lambda reset: 0)
    assert sp.acquire("m", 4, 4) == [Acquired(0, 3, 1)]
    session.partitions.discard((TOPIC, 3))  # forgotten: still the member's
    assert sp.acknowledge("m", 0, 0, AckType.ACCEPT) is ErrorCode.NONE
    assert sp.acquire("n", 4, 4) == []
    rt.close(session)
    assert sp.acquire("n", 4, 4) == [Acquired(1, 3, 2)]


def test_a_new_session_past_the_limit_is_refused_until_one_ends() -> None:
    """group.share.max.share.sessions: one member per session, the cache bounded; a member
    opening its session again replaces its own and is not refused."""
    rt = ShareRuntime(Clock(), lambda group: ShareSettings(), None, max_sessions=2)
    first, _ = rt.session("g", "a", 0)
    assert rt.session("g", "b", 0)[1] is ErrorCode.NONE
    assert rt.session("g", "c", 0) == (None, ErrorCode.SHARE_SESSION_LIMIT_REACHED)
    assert rt.session("g", "a", 0)[1] is ErrorCode.NONE  # a's own, opened again
    assert first is not None
    rt.session("g", "b", -1)
    assert rt.session("g", "c", 0)[1] is ErrorCode.NONE
