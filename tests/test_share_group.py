"""A share group's membership (issue 30, step 1; coordinator/share_group.py): ShareGroupHeartbeat's
join / stay / leave with KIP-932's errors, the simple assignor sharing partitions when members
outnumber them, epochs that move on membership, subscription and topic changes, session
expiry, and the group states as a table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tmqgate.coordinator.share_group import ShareGroup, ShareGroupState, assign
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import IllegalStateTransition


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _group(**kw: int) -> tuple[ShareGroup, Clock]:
    clock = Clock()
    return ShareGroup("g", clock, **kw), clock


def test_members_join_share_and_leave() -> None:
    g, _ = _group()
    parts = {"t": 2}
    a = g.heartbeat("a", 0, ["t"], parts)
    assert (a.error, a.epoch, a.assignment, g.state) == (ErrorCode.NONE, 1, {"t": [0, 1]}, ShareGroupState.STABLE)
    b = g.heartbeat("b", 0, ["t"], parts)
    assert (b.epoch, b.assignment) == (2, {"t": [1]})
    # a learns its new target on its next heartbeat; nothing waits for a revocation
    a2 = g.heartbeat("a", 1, None, parts)
    assert (a2.epoch, a2.assignment) == (2, {"t": [0]})
    assert g.heartbeat("a", 2, None, parts).assignment is None  # unchanged: not sent
    c = g.heartbeat("c", 0, ["t"], parts)  # three members, two partitions: one is shared
    assert c.assignment == {"t": [0]}
    assert g.heartbeat("a", 2, None, parts).assignment == {"t": [0]}
    assert g.heartbeat("b", 2, None, parts).assignment == {"t": [1]}
    assert g.heartbeat("a", -1, None, parts).epoch == -1
    assert g.heartbeat("b", -1, None, parts).error is ErrorCode.NONE
    assert g.heartbeat("c", 3, None, parts).assignment == {"t": [0, 1]}
    g.heartbeat("c", -1, None, parts)
    assert g.state is ShareGroupState.EMPTY


def test_kip_932s_errors() -> None:
    g, _ = _group(max_size=2)
    parts = {"t": 1}
    assert g.heartbeat("a", 0, None, parts).error is ErrorCode.INVALID_REQUEST  # a join names its topics
    assert g.heartbeat("", 0, ["t"], parts).error is ErrorCode.INVALID_REQUEST
    assert g.heartbeat("a", 3, None, parts).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert g.heartbeat("a", -1, None, parts).error is ErrorCode.UNKNOWN_MEMBER_ID
    g.heartbeat("a", 0, ["t"], parts)
    g.heartbeat("b", 0, ["t"], parts)
    assert g.heartbeat("c", 0, ["t"], parts).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert g.heartbeat("a", 7, None, parts).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert g.delete() is ErrorCode.NON_EMPTY_GROUP


def test_epochs_follow_subscriptions_and_topics() -> None:
    g, _ = _group()
    assert g.heartbeat("a", 0, ["t"], {"t": 1}).assignment == {"t": [0]}
    r = g.heartbeat("a", 1, ["t", "u"], {"t": 1, "u": 2})  # subscribes to one more topic
    assert (r.epoch, r.assignment) == (2, {"t": [0], "u": [0, 1]})
    r = g.heartbeat("a", 2, None, {"t": 3, "u": 2})  # t grew
    assert (r.epoch, r.assignment) == (3, {"t": [0, 1, 2], "u": [0, 1]})
    r = g.heartbeat("a", 3, None, {"u": 2})  # t deleted
    assert (r.epoch, r.assignment) == (4, {"u": [0, 1]})
    r = g.heartbeat("a", 0, ["u"], {"u": 2})  # joins again under its id: its target again
    assert (r.epoch, r.assignment) == (5, {"u": [0, 1]})


def test_a_silent_member_expires_and_an_empty_group_can_be_deleted() -> None:
    g, clock = _group(session_timeout_ms=45_000)
    g.heartbeat("a", 0, ["t"], {"t": 1})
    clock.now += 30_000
    g.heartbeat("b", 0, ["t"], {"t": 1})
    clock.now += 15_000
    assert g.expire() == ["a"]
    assert list(g.members) == ["b"]
    clock.now += 45_000
    assert g.expire() == ["b"] and g.state is ShareGroupState.EMPTY
    assert g.delete() is ErrorCode.NONE and g.state is ShareGroupState.DEAD
    assert g.heartbeat("c", 0, ["t"], {"t": 1}).error is ErrorCode.GROUP_ID_NOT_FOUND
    with pytest.raises(IllegalStateTransition):
        g._transition(ShareGroupState.STABLE)  # nothing leaves Dead


@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.sets(st.sampled_from("tuv"), min_size=1),
                       max_size=8),
       st.dictionaries(st.sampled_from("tuv"), st.integers(0, 6)))
def test_the_assignor_gives_every_partition_out_and_every_member_work(members: dict[str, set[str]],
                                                                       partitions: dict[str, int]) -> None:
    subs = {m: tuple(sorted(ts)) for m, ts in members.items()}
    out = assign(subs, partitions)
    for topic in {t for ts in subs.values() for t in ts}:
        takers = [m for m, ts in subs.items() if topic in ts]
        count = partitions.get(topic, 0)
        given_out = [p for m in takers for p in out[m].get(topic, [])]
        if count == 0:
            assert given_out == []
            continue
        assert set(given_out) == set(range(count))  # every partition has a member
        assert all(out[m].get(topic) for m in takers)  # every subscriber has a partition
        loads = [len(out[m][topic]) for m in takers]
        assert max(loads) - min(loads) <= 1
        if len(takers) <= count:
            assert sorted(given_out) == list(range(count))  # none shared while there are enough


def test_by_duration_reads_iso_8601_durations_as_java_does() -> None:
    from tmqgate.coordinator.share_group import reset_duration_ms

    assert reset_duration_ms("by_duration:PT1H") == 3_600_000
    assert reset_duration_ms("by_duration:P1DT2H3M4.5S") == 93_784_500
    assert reset_duration_ms("BY_DURATION:pt10m") == 600_000
    for bad in ("by_duration:", "by_duration:PT", "by_duration:P", "by_duration:1H", "by_duration:-PT1H",
                "latest", "earliest"):
        assert reset_duration_ms(bad) is None, bad
