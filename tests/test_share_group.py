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
    c = g.heartbeat("c", 0, ["t"], parts)  # three members, two partitions: each shared by two
    assert c.assignment == {"t": [0]}
    assert g.heartbeat("a", 2, None, parts).assignment == {"t": [0, 1]}  # four places: a has two
    assert g.heartbeat("b", 2, None, parts).assignment == {"t": [1]}  # kept: nothing moved
    assert g.heartbeat("a", -1, None, parts).epoch == -1
    assert g.heartbeat("b", -1, None, parts).error is ErrorCode.NONE
    assert g.heartbeat("c", 3, None, parts).assignment == {"t": [0, 1]}
    g.heartbeat("c", -1, None, parts)
    assert g.state is ShareGroupState.EMPTY


def test_a_member_keeps_what_it_was_given_while_others_join() -> None:
    """The first member fetches from both partitions; two more join before its next
    heartbeat. Its target is balanced from what it was given, not from the target it never
    received, so it keeps both: nothing it may hold records of moves away."""
    g, _ = _group()
    parts = {"t": 2}
    assert g.heartbeat("b", 0, ["t"], parts).assignment == {"t": [0, 1]}
    assert g.heartbeat("a", 0, ["t"], parts).assignment == {"t": [1]}
    # balanced from targets, a (first by id, as b's target had one partition too) would take
    # the larger count and b would lose partition 1
    assert g.heartbeat("c", 0, ["t"], parts).assignment == {"t": [0]}
    assert g.heartbeat("a", 2, None, parts).assignment == {"t": [1]}
    assert g.heartbeat("b", 1, None, parts).assignment == {"t": [0, 1]}


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


def _places(out: dict[str, dict[str, list[int]]]) -> dict[str, set[tuple[str, int]]]:
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in out.items()}


def _check_balance(takers: list[str], targets: set[tuple[str, int]], got: dict[str, set[tuple[str, int]]]) -> None:
    """Kafka's simple assignor: every partition has a member, shared by ceil(M / P) at most
    (not at all while partitions suffice), members' counts within one, everyone busy while
    members outnumber partitions."""
    if not targets or not takers:
        return
    sharing = -(-len(takers) // len(targets))
    mine = {m: got[m] & targets for m in takers}
    holders = {tp: [m for m in takers if tp in mine[m]] for tp in targets}
    assert all(1 <= len(who) <= sharing for who in holders.values()), holders
    loads = [len(mine[m]) for m in takers]
    assert max(loads) - min(loads) <= 1, mine
    if sharing > 1:
        assert min(loads) >= 1


_members = st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.sets(st.sampled_from("tuv"), min_size=1),
                           max_size=8)
_partitions = st.dictionaries(st.sampled_from("tuv"), st.integers(0, 6))


@given(_members, _partitions)
def test_the_assignor_balances_as_kafkas_simple_assignor(members: dict[str, set[str]],
                                                           partitions: dict[str, int]) -> None:
    subs = {m: tuple(sorted(ts)) for m, ts in members.items()}
    got = _places(assign(subs, partitions))
    assert set(got) == set(subs)
    for m, places in got.items():  # only what it subscribes to
        assert {t for t, _ in places} <= set(subs[m])
    topics = sorted({t for ts in subs.values() for t in ts})
    if len(set(subs.values())) == 1:  # homogeneous: one balance over every partition
        _check_balance(list(subs), {(t, p) for t in topics for p in range(partitions.get(t, 0))}, got)
    else:  # per topic, among its subscribers
        for t in topics:
            _check_balance([m for m in subs if t in subs[m]], {(t, p) for p in range(partitions.get(t, 0))}, got)


@given(_members, _partitions, st.text("abcdef", min_size=1, max_size=3), st.sets(st.sampled_from("tuv"), min_size=1))
def test_the_assignor_moves_only_what_balance_needs(members: dict[str, set[str]], partitions: dict[str, int],
                                                   joiner: str, topics: set[str]) -> None:
    """Recomputed with nothing changed, nothing moves; when a member joins a homogeneous
    group, each other member keeps as many of its partitions as its new count allows."""
    subs = {m: tuple(sorted(ts)) for m, ts in members.items()}
    before = assign(subs, partitions)
    assert assign(subs, partitions, before) == before
    if joiner in subs or len(set(subs.values())) > 1:
        return
    together = {**subs, joiner: next(iter(subs.values()), tuple(sorted(topics)))}
    after = assign(together, partitions, before)
    old, new = _places(before), _places(after)
    for m in subs:
        assert len(old[m] & new[m]) == min(len(old[m]), len(new[m])), (old, new)


def test_three_members_joining_one_by_one_keep_what_they_have() -> None:
    """The case behind CI r61's failure: the second member's partition stays its own when the
    third joins (before, the third's smaller id moved it, and the Java client then failed the
    acknowledgements it held there)."""
    first = assign({"m": ("t",)}, {"t": 2})
    assert first == {"m": {"t": [0, 1]}}
    second = assign({"m": ("t",), "z": ("t",)}, {"t": 2}, first)
    assert second == {"m": {"t": [0]}, "z": {"t": [1]}}
    third = assign({"m": ("t",), "z": ("t",), "c": ("t",)}, {"t": 2}, second)
    assert third["z"] == {"t": [1]} and third["m"]["t"][0] == 0
    assert sorted(p for a in third.values() for p in a["t"]) == [0, 0, 1, 1]
