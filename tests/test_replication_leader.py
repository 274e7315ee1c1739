"""The leader side of broker/cluster/replication.py on a fake clock, with the store, topics and
membership reduced to what it reads: the high watermark from the ISR's fetches (never back,
not below min.insync.replicas — KIP-966), acks=all waits, a follower's epoch fenced, the ISR
shrunk after the lag and grown when a replica reaches the high watermark."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tmqgate.broker.cluster.replication import Replication
from tmqgate.broker.metadata.view import PartitionState, Placement
from tmqgate.broker.topics import KAFKA
from tmqgate.protocol.errors import ErrorCode

TOPIC_ID = bytes(range(16))


@dataclass
class FakeTopic:
    name: str = "t"
    db: str = "t"
    partitions: int = 1
    kind: str = KAFKA
    topic_id: bytes = TOPIC_ID
    configs: dict[str, str] = field(default_factory=lambda: {"min.insync.replicas": "2"})

    def config(self, name: str) -> str:
        return self.configs[name]


class FakeTopics:
    def __init__(self, topic: FakeTopic, state: PartitionState) -> None:
        self.topic = topic
        self.replicated: dict[tuple[str, int], int] = {}
        self.placements = {"t": Placement("t", TOPIC_ID, {}, (state,))}

    def get(self, name: str) -> FakeTopic | None:
        return self.topic if name == "t" else None


class FakeStore:
    def __init__(self) -> None:
        self.log_end = 0

    def next_version(self, db: str, vnode: int) -> int:
        return self.log_end


class FakeMembership:
    def __init__(self) -> None:
        self.isr_changes: list[list[int]] = []

    async def alter_isr(self, name: str, topic_id: bytes, partition: int, epoch: int, isr: list[int]) -> bool:
        self.isr_changes.append(isr)
        return True

    def cut_off(self) -> bool:
        return False


class FakeNotifier:
    def __init__(self) -> None:
        self.woken = 0

    def notify(self, db: str, vnode: int) -> None:
        self.woken += 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _leader(isr: tuple[int, ...] = (1, 2, 3)) -> tuple[Replication, FakeStore, FakeMembership, Clock, FakeTopic]:
    topic = FakeTopic()
    store, membership, clock = FakeStore(), FakeMembership(), Clock()
    topics = FakeTopics(topic, PartitionState((1, 2, 3), 1, 4, isr))
    r = Replication(1, store, topics, membership, FakeNotifier(), 3000, 500, clock=clock)  # type: ignore[arg-type]
    r.apply()
    return r, store, membership, clock, topic


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _followers_at_log_end(r: Replication, store: FakeStore, topic: FakeTopic) -> None:
    """Fetches from followers 2 and 3 at the leader's log end, at its epoch (4): both caught up."""
    for follower in (2, 3):
        r.follower_fetched(topic, 0, follower, store.log_end, 4)  # type: ignore[arg-type]


def test_the_high_watermark_follows_the_slowest_in_sync_replica_and_wakes_acks_all() -> None:
    async def scenario() -> list[Any]:
        r, store, _, _, topic = _leader()
        store.log_end = 10
        r.appended(topic, 0)  # type: ignore[arg-type]
        waiting = asyncio.ensure_future(r.wait_replicated(topic, 0, 10, 5))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        seen = [topic_hw(r)]
        assert r.follower_fetched(topic, 0, 2, 10, 4) is None  # type: ignore[arg-type]
        seen.append(topic_hw(r))  # follower 3 has nothing yet
        assert r.follower_fetched(topic, 0, 3, 6, 4) is None  # type: ignore[arg-type]
        seen.append(topic_hw(r))
        assert r.follower_fetched(topic, 0, 3, 10, 4) is None  # type: ignore[arg-type]
        seen.append(topic_hw(r))
        seen.append(await asyncio.wait_for(waiting, 1))
        assert r.follower_fetched(topic, 0, 3, 7, 4) is None  # type: ignore[arg-type]  # never back
        seen.append(topic_hw(r))
        timed_out = await r.wait_replicated(topic, 0, 11, 0.01)  # type: ignore[arg-type]
        seen.append(timed_out)
        seen.append(len(r._waiters[("t", 0)]))
        return seen

    assert _run(scenario()) == [0, 0, 6, 10, True, 10, False, 0]


def test_no_advance_below_min_insync_replicas_and_fenced_epochs() -> None:
    async def scenario() -> list[Any]:
        r, store, _, _, topic = _leader(isr=(1,))
        store.log_end = 5
        r.appended(topic, 0)  # type: ignore[arg-type]
        out: list[Any] = [topic_hw(r), r.not_enough_replicas(topic, 0)]  # type: ignore[arg-type]
        out.append(r.follower_fetched(topic, 0, 2, 5, 3))  # type: ignore[arg-type]
        out.append(r.follower_fetched(topic, 0, 2, 5, 5))  # type: ignore[arg-type]
        out.append(r.follower_fetched(topic, 0, 9, 5, 4))  # type: ignore[arg-type]
        return out

    assert _run(scenario()) == [0, True, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                                ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_the_isr_shrinks_after_the_lag_and_grows_when_a_replica_reaches_the_high_watermark() -> None:
    async def scenario() -> list[list[int]]:
        r, store, membership, clock, topic = _leader()
        store.log_end = 8
        _followers_at_log_end(r, store, topic)
        await r._check_isr()
        assert membership.isr_changes == []  # everyone caught up
        clock.now += 2.0
        r.follower_fetched(topic, 0, 2, 8, 4)  # type: ignore[arg-type]  # 2 keeps up, 3 goes quiet
        clock.now += 2.0  # 3 last caught up 4 s ago (> 3 s lag), 2 2 s ago
        await r._check_isr()
        # the shrink takes effect when etcd's new state comes back through apply
        r._topics.placements = {"t": Placement("t", TOPIC_ID, {}, (PartitionState((1, 2, 3), 1, 4, (1, 2)),))}
        r.apply()
        r.follower_fetched(topic, 0, 3, 8, 4)  # type: ignore[arg-type]  # back at the high watermark
        await r._check_isr()
        r.stop()
        return membership.isr_changes

    assert _run(scenario()) == [[1, 2], [1, 2, 3]]


def topic_hw(r: Replication) -> int:
    return r._hw.get(("t", 0), 0)


def test_a_follower_whose_log_went_back_leaves_the_isr_at_once() -> None:
    async def scenario() -> list[list[int]]:
        r, store, membership, _, topic = _leader()
        store.log_end = 8
        _followers_at_log_end(r, store, topic)
        r.follower_fetched(topic, 0, 3, 0, 4)  # type: ignore[arg-type]  # restarted with a wiped data dir
        await r._check_isr()  # no lag has passed: the regression alone takes it out
        r.stop()
        return membership.isr_changes

    assert _run(scenario()) == [[1, 2]]
