"""The coordinator when the disk refuses its writes (a real Store on a small tmpfs the test
mounts and fills, no reserve): what Apache Kafka's coordinator does when its append fails with
KAFKA_STORAGE_ERROR — NOT_COORDINATOR to every answer the operation produced, and the group as
it was before the operation (coordinator.coordinator's rules)."""

from __future__ import annotations

import os

from diskfull import fill, small_fs
from test_coordinator import Topics, join, join_new, sync

from tmqgate.coordinator.classic import ClassicConfig, ClassicGroupState
from tmqgate.coordinator.coordinator import RETRY_MS, CoordinatorConfig, GroupCoordinator
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import StorageFull, Store

E = ErrorCode


def coordinator(path: str, delay: int = 0) -> GroupCoordinator:
    counter = iter(range(1, 1_000_000))
    store = Store(path, write_buffer_size=256 << 10, lru_cache_size=1 << 20, reserve_bytes=0)
    return GroupCoordinator(store, Topics(t=4),
                            CoordinatorConfig(classic=ClassicConfig(initial_rebalance_delay_ms=delay)),
                            now_ms=0, new_id=lambda: f"id{next(counter)}")


def break_store(c: GroupCoordinator) -> None:
    """Write until the full disk refuses (the last pages of LevelDB's log may still take some)."""
    for i in range(100):
        try:
            c.store.put_group_metadata(f"filler-{i}", b"x" * 3000)
        except StorageFull:
            return
    raise AssertionError("the disk never refused a write")


def test_refused_sync_answers_every_parked_member_and_keeps_the_group() -> None:
    with small_fs(16) as fs:
        c = coordinator(os.path.join(fs, "data"))
        ma, a = join_new(c, 0)
        assert (a.code, a.value["generation_id"]) == (E.NONE, 1)  # type: ignore[index]
        assert sync(c, 1, ma, 1, {ma: b"A0"}).code is E.NONE
        mb, b = join_new(c, 2)  # parked until A rejoins
        a2 = join(c, 3, member_id=ma)
        assert [r.value["generation_id"] for r in (a2, b)] == [2, 2]  # type: ignore[index]
        sb = sync(c, 4, mb, 2)  # the follower is parked until the leader's assignment
        assert sb.value is None

        filler = fill(fs)
        break_store(c)
        sa = sync(c, 5, ma, 2, {ma: b"A", mb: b"B"})
        # Both answers are NOT_COORDINATOR, with no assignment; the group still waits for the
        # leader's assignment of generation 2, with nobody parked any more.
        assert (sa.code, sa.value["assignment"]) == (E.NOT_COORDINATOR, b"")  # type: ignore[index]
        assert (sb.code, sb.value["assignment"]) == (E.NOT_COORDINATOR, b"")  # type: ignore[index]
        group = c.groups["g"]
        assert (group.state, group.generation) == (ClassicGroupState.COMPLETING_REBALANCE, 2)
        assert all(m.sync_reply is None for m in group.members.values())
        assert sb.calls == 1

        os.unlink(filler)
        sb = sync(c, 6, mb, 2)
        sa = sync(c, 7, ma, 2, {ma: b"A", mb: b"B"})
        assert (sa.code, sa.value["assignment"], sb.code, sb.value["assignment"]) == (  # type: ignore[index]
            E.NONE, b"A", E.NONE, b"B")
        assert c.groups["g"].state is ClassicGroupState.STABLE
        c.store.close()


def test_refused_timer_event_is_undone_and_retried_later() -> None:
    with small_fs(16) as fs:
        c = coordinator(os.path.join(fs, "data"), delay=3000)
        _, first = join_new(c, 0)
        assert first.value is None  # parked for the initial rebalance delay
        filler = fill(fs)
        break_store(c)
        c.tick(3000)  # the join completes: a generation to write, refused
        assert first.code is E.NOT_COORDINATOR
        group = c.groups["g"]
        assert (group.state, group.generation) == (ClassicGroupState.PREPARING_REBALANCE, 0)
        assert all(m.join_reply is None for m in group.members.values())
        # Not again at once: the timer waits RETRY_MS before trying the group again.
        assert c.next_deadline() == 3000 + RETRY_MS
        c.tick(3001)
        assert c.groups["g"].generation == 0

        os.unlink(filler)
        c.tick(3000 + RETRY_MS)  # nobody rejoined before the deadline: the group empties
        group = c.groups["g"]
        assert (group.state, group.generation, group.members) == (ClassicGroupState.EMPTY, 1, {})
        c.store.close()
