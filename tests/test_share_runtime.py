"""Share sessions and durable share-partitions (broker/runtime/shares.py, storage/share_state.py),
on a real LevelDB store with a fake clock: the rules the wire tests (compat_tests/
test_share_groups.py) cannot reach one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tmqgate.broker.runtime.shares import PartitionKey, ShareRuntime, StorePersister
from tmqgate.coordinator.share_group import ShareSettings
from tmqgate.coordinator.share_partition import AckType, Acquired, SharePartition
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import Store
from tmqgate.storage.share_state import Stored

TOPIC = bytes(range(16))


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _runtime(store: Store | None, clock: Clock, **settings: object) -> ShareRuntime:
    s = ShareSettings(**settings)  # type: ignore[arg-type]
    return ShareRuntime(clock, lambda group: s, store.share_states if store is not None else None)


def _sp(rt: ShareRuntime, group: str, partition: int, start: Callable[[str], int],
        leader_epoch: int = 0) -> SharePartition:
    """The share-partition as a partition leader has it: its state read first (ShareFetch)."""
    assert asyncio.run(rt.prepare((group, TOPIC, partition), leader_epoch)) is ErrorCode.NONE
    return rt.share_partition(group, TOPIC, partition, start)


def _save(rt: ShareRuntime, group: str, partition: int) -> ErrorCode:
    return asyncio.run(rt.save((group, TOPIC, partition)))


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
    sp = _sp(rt, "g", 0, lambda reset: 0)
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
    sp = _sp(rt, "g", 0, lambda reset: 0)
    sp.acquire("m", 5, 5)
    clock.ms += 45_001
    assert rt.session("g", "m", 1) == (None, ErrorCode.SHARE_SESSION_NOT_FOUND)
    assert [r.delivery_count for r in sp.records.values()] == [1] * 5
    assert sp.acquire("x", 5, 5) == [Acquired(0, 4, 2)]


def test_the_start_follows_share_auto_offset_reset_when_the_share_partition_is_made() -> None:
    starts = {"earliest": 3, "latest": 40}
    for reset, expected in starts.items():
        rt = _runtime(None, Clock(), auto_offset_reset=reset)
        assert _sp(rt, "g", 0, starts.__getitem__).start == expected


def test_the_state_survives_a_restart_acknowledged_never_again_deliveries_counted(tmp_path: Path) -> None:
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=3)
        sp = _sp(rt, "g", 2, lambda reset: 0)
        assert sp.acquire("m", 20, 10) == [Acquired(0, 9, 1)]
        assert sp.acknowledge("m", 0, 3, AckType.ACCEPT) is ErrorCode.NONE
        assert sp.acknowledge("m", 4, 4, AckType.REJECT) is ErrorCode.NONE
        assert sp.acknowledge("m", 5, 5, AckType.RELEASE) is ErrorCode.NONE
        assert sp.acquire("m", 20, 1) == [Acquired(5, 5, 2)]
        assert _save(rt, "g", 2) is ErrorCode.NONE
        other = _sp(rt, "g2", 2, lambda reset: 7)
        other.acquire("m", 20, 1)
        assert _save(rt, "g2", 2) is ErrorCode.NONE
    # kill -9 after the writes: what a new broker reads back
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=3)
        sp = _sp(rt, "g", 2, lambda reset: 99)  # the stored start wins
        assert sp.start == 5
        # 5 was held at its second delivery, 6..9 at their first; 10.. never handed out
        assert sp.acquire("n", 20, 20) == [Acquired(5, 5, 3), Acquired(6, 9, 2), Acquired(10, 19, 1)]
        assert _sp(rt, "g2", 2, lambda reset: 0).start == 7
        rt.forget([("g2", TOPIC, 2)])
    with Store(tmp_path / "d") as store:
        assert {k[0] for k in store.share_states.load()} == {"g"}


def test_a_record_held_at_its_last_delivery_is_archived_by_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock, delivery_count_limit=2)
        sp = _sp(rt, "g", 0, lambda reset: 0)
        sp.acquire("m", 1, 1)
        sp.acknowledge("m", 0, 0, AckType.RELEASE)
        assert sp.acquire("m", 2, 2) == [Acquired(0, 0, 2), Acquired(1, 1, 1)]
        assert _save(rt, "g", 0) is ErrorCode.NONE
    with Store(tmp_path / "d") as store:
        sp = _sp(_runtime(store, clock, delivery_count_limit=2), "g", 0, lambda reset: 0)
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
    sp = _sp(rt, "g", 3, lambda reset: 0)
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


def test_a_leader_reads_the_state_again_under_a_new_leader_epoch(tmp_path: Path) -> None:
    """A broker that led the partition before (leader epoch 0) and leads it again (epoch 2)
    does not trust its old copy: another leader wrote the state meanwhile."""
    clock = Clock()
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, clock)
        sp = _sp(rt, "g", 0, lambda reset: 0)
        assert sp.acquire("m", 10, 10) == [Acquired(0, 9, 1)]
        assert _save(rt, "g", 0) is ErrorCode.NONE
        # the other leader (epoch 1) had everything up to 6 accepted
        store.share_states.write(("g", TOPIC, 0), 7, [(7, 9, 0, 1)])
        assert _sp(rt, "g", 0, lambda reset: 0, leader_epoch=0) is sp  # the same epoch: its own copy
        again = _sp(rt, "g", 0, lambda reset: 0, leader_epoch=2)
        assert again is not sp and again.start == 7
        assert again.acquire("n", 12, 10) == [Acquired(7, 9, 2), Acquired(10, 11, 1)]


def test_offsets_set_at_the_coordinator_fence_a_leaders_older_copy(tmp_path: Path) -> None:
    """AlterShareGroupOffsets / DeleteShareGroupOffsets write the next state epoch; a
    leader's write of its older copy is refused (FENCED_STATE_EPOCH) and dropped, and its next
    use reads what the coordinator set."""
    clock = Clock()
    with Store(tmp_path / "d") as store:
        leader, coordinator = _runtime(store, clock), _runtime(store, clock, auto_offset_reset="earliest")
        sp = _sp(leader, "g", 0, lambda reset: 0)
        sp.acquire("m", 10, 10)
        assert _save(leader, "g", 0) is ErrorCode.NONE
        assert asyncio.run(coordinator.set_start(("g", TOPIC, 0), 40)) is ErrorCode.NONE
        assert store.share_states.read(("g", TOPIC, 0)) == (40, [], 1)
        sp.acknowledge("m", 0, 9, AckType.ACCEPT)
        assert _save(leader, "g", 0) is ErrorCode.FENCED_STATE_EPOCH
        assert store.share_states.read(("g", TOPIC, 0)) == (40, [], 1)  # the older copy not written
        fresh = _sp(leader, "g", 0, lambda reset: 0)
        assert fresh is not sp and fresh.start == 40
        fresh.acquire("m", 45, 2)
        assert _save(leader, "g", 0) is ErrorCode.NONE  # at the epoch it read
        # deleted: kept as "start again" (start -1) at the next epoch, out of the described
        assert asyncio.run(coordinator.set_start(("g", TOPIC, 0), -1)) is ErrorCode.NONE
        assert store.share_states.read(("g", TOPIC, 0)) == (-1, [], 2)
        assert coordinator.stored("g") == {}
        assert _save(leader, "g", 0) is ErrorCode.FENCED_STATE_EPOCH  # its next write learns it
        assert _sp(leader, "g", 0, lambda reset: {"latest": 45}[reset]).start == 45
        assert _save(leader, "g", 0) is ErrorCode.NONE
        assert store.share_states.read(("g", TOPIC, 0)) == (45, [], 2)


def test_share_state_is_a_group_state_key_mirrored_and_replayed(tmp_path: Path) -> None:
    """On a cluster every share state write goes to the store's group mirror first (the
    group's partition of the replicated group-state topic), with the group it belongs to,
    and a new coordinator of that partition takes the share states over with the group's."""
    mirrored: list[tuple[str, list[tuple[bytes, bytes | None]]]] = []
    with Store(tmp_path / "old") as old:
        old.mirror_groups(lambda group, ops: mirrored.append((group, list(ops))))
        old.share_states.add_group("g")
        old.share_states.write(("g", TOPIC, 1), 5, [(5, 6, 2, 1)])
        old.share_states.write(("other", TOPIC, 1), 9, [])
    assert [group for group, _ in mirrored] == ["g", "g", "other"]
    with Store(tmp_path / "new") as new:
        new.share_states.write(("g", TOPIC, 3), 1, [])  # what it held of g before: replaced
        held = new.replace_group_partition(lambda group: group == "g",
                                           [op for _, ops in mirrored for op in ops], 0, 1)
        assert held == 2
        assert new.share_states.load() == {("g", TOPIC, 1): (5, [(5, 6, 2, 1)], 0)}
        assert new.share_states.groups() == ["g"]


def test_a_refused_mirror_changes_nothing_and_answers_not_coordinator(tmp_path: Path) -> None:
    from tmqgate.storage.model import StateNotReplicated

    def refuse(group: str, ops: object) -> None:
        raise StateNotReplicated(f"not coordinating {group}")

    with Store(tmp_path / "d") as store:
        rt = _runtime(store, Clock())
        sp = _sp(rt, "g", 0, lambda reset: 0)
        sp.acquire("m", 3, 3)
        store.mirror_groups(refuse)
        assert _save(rt, "g", 0) is ErrorCode.NOT_COORDINATOR
        assert store.share_states.read(("g", TOPIC, 0)) is None


def test_a_new_share_partition_is_kept_at_its_start_before_it_is_used(tmp_path: Path) -> None:
    """As Kafka's InitializeShareGroupState: described (and its start fixed) from its first use,
    even before anything is handed out."""
    with Store(tmp_path / "d") as store:
        rt = _runtime(store, Clock())
        _sp(rt, "g", 0, lambda reset: 12)
        assert store.share_states.read(("g", TOPIC, 0)) is None
        assert asyncio.run(rt.initialized(("g", TOPIC, 0))) is ErrorCode.NONE
        assert store.share_states.read(("g", TOPIC, 0)) == (12, [], 0)
        assert rt.stored("g") == {("g", TOPIC, 0): (12, [], 0)}


def test_a_session_taking_the_partition_in_sees_offsets_the_coordinator_set(tmp_path: Path) -> None:
    """A leader whose copy has nothing more to hand out would never write it, so never learn
    of a reset by its write being fenced: a session that takes the partition in rechecks the
    state epoch (kafka-share-groups --reset-offsets, then a new member)."""
    with Store(tmp_path / "d") as store:
        leader, coordinator = _runtime(store, Clock()), _runtime(store, Clock())
        sp = _sp(leader, "g", 0, lambda reset: 0)
        sp.acquire("m", 5, 5)
        sp.acknowledge("m", 0, 4, AckType.ACCEPT)
        assert _save(leader, "g", 0) is ErrorCode.NONE
        key = ("g", TOPIC, 0)
        assert asyncio.run(leader.prepare(key, 0, recheck=True)) is ErrorCode.NONE
        assert leader.partitions[key] is sp  # nothing changed: its own copy
        assert asyncio.run(coordinator.set_start(key, 0)) is ErrorCode.NONE
        assert asyncio.run(leader.prepare(key, 0)) is ErrorCode.NONE
        assert leader.partitions[key] is sp  # not rechecked: not seen yet
        assert asyncio.run(leader.prepare(key, 0, recheck=True)) is ErrorCode.NONE
        again = leader.share_partition("g", TOPIC, 0, lambda reset: 99)
        assert again is not sp and again.acquire("n", 5, 5) == [Acquired(0, 4, 1)]


def test_two_requests_reading_the_state_at_once_keep_the_first_ones_records(tmp_path: Path) -> None:
    """On a cluster the read is a request to the coordinator: a second ShareFetch reading the
    same share-partition meanwhile must not replace the one the first made and acquired from."""

    class Slow(StorePersister):
        async def read(self, key: PartitionKey) -> tuple[ErrorCode, Stored | None]:
            await asyncio.sleep(0.01)
            return await super().read(key)

    async def scenario(rt: ShareRuntime) -> tuple[SharePartition, SharePartition]:
        key = ("g", TOPIC, 0)

        async def first() -> SharePartition:
            assert await rt.prepare(key, 0) is ErrorCode.NONE
            sp = rt.share_partition("g", TOPIC, 0, lambda reset: 0)
            sp.acquire("m", 4, 4)
            return sp

        async def second() -> SharePartition:
            await asyncio.sleep(0.005)  # starts reading before the first is done
            assert await rt.prepare(key, 0) is ErrorCode.NONE
            return rt.share_partition("g", TOPIC, 0, lambda reset: 0)

        return await asyncio.gather(first(), second())

    with Store(tmp_path / "d") as store:
        s = ShareSettings()
        rt = ShareRuntime(Clock(), lambda group: s, store.share_states, persister=Slow(store.share_states))
        a, b = asyncio.run(scenario(rt))
        assert a is b and b.acquire("n", 4, 4) == []  # the first's records stay its own
