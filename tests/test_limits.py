"""Bounded resources: the request memory pool, the connection counters, the storage bound on
vnodes, and the settings' consistency check (the limits over TCP: compat_tests/test_limits.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.network.limits import ConnectionLimits, FrameMemory, MemoryPool
from tmqgate.storage import Store
from tmqgate.storage.catalog import MAX_VNODES


def test_pool_makes_a_frame_that_does_not_fit_wait_and_lets_smaller_ones_by() -> None:
    async def go() -> None:
        pool = MemoryPool(100)
        await pool.reserve(60)
        big = asyncio.create_task(pool.reserve(60))
        await asyncio.sleep(0)
        assert not big.done() and pool.waiting == 1
        await pool.reserve(40)  # fits beside the first: not held behind the waiting big one
        assert pool.used == 100
        pool.release(40)
        await asyncio.sleep(0)
        assert not big.done()  # 60 + 60 > 100
        pool.release(60)
        await big
        assert pool.used == 60 and pool.waiting == 0

    asyncio.run(go())


def test_pool_a_cancelled_waiter_takes_nothing() -> None:
    async def go() -> None:
        pool = MemoryPool(10)
        await pool.reserve(10)
        waiting = asyncio.create_task(pool.reserve(5))
        cancelled_early = asyncio.create_task(pool.reserve(5))
        await asyncio.sleep(0)
        cancelled_early.cancel()
        pool.release(10)  # grants both 5s; one of them is being cancelled
        with pytest.raises(asyncio.CancelledError):
            await cancelled_early
        await waiting
        assert pool.used == 5 and pool.waiting == 0
        memory = FrameMemory(pool)
        await memory.take(5)
        memory.free()
        memory.free()  # twice is harmless
        assert pool.used == 5

    asyncio.run(go())


def test_unbounded_pool_never_waits() -> None:
    async def go() -> None:
        pool = MemoryPool(-1)
        await pool.reserve(1 << 40)
        await pool.reserve(1 << 40)
        assert pool.used == 2 << 40

    asyncio.run(go())


def test_connection_limits_total_and_per_ip() -> None:
    limits = ConnectionLimits(max_connections=3, max_per_ip=2)
    assert limits.admit("a") is None and limits.admit("a") is None
    assert "max.connections.per.ip" in (limits.admit("a") or "")
    assert limits.admit("b") is None
    assert "max.connections (3)" in (limits.admit("c") or "")
    limits.release("a")
    assert limits.admit("c") is None
    assert limits.total == 3 and limits.per_ip == {"a": 1, "b": 1, "c": 1}


def test_storage_refuses_an_absurd_vnode_count_before_looping(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as s:
        s.create_database("db", 1)
        with pytest.raises(ValueError, match="over the limit"):
            s.add_vnodes("db", 2**31 - 1)
        with pytest.raises(ValueError):
            s.create_database("other", MAX_VNODES + 1)
        info = s.get_database("db")
        assert info is not None and info.vgroups == 1
        assert s.get_database("other") is None
        assert s.add_vnodes("db", 4).vgroups == 4


def test_pool_smaller_than_the_largest_frame_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "b.toml"
    config.write_text("socket_request_max_bytes = 1000\nqueued_max_request_bytes = 999\n")
    with pytest.raises(ValueError, match="queued_max_request_bytes"):
        BrokerConfig.load(config)
    config.write_text("socket_request_max_bytes = 1000\nqueued_max_request_bytes = -1\n")
    assert BrokerConfig.load(config).queued_max_request_bytes == -1


def test_a_deferred_answer_cancelled_before_it_starts_gives_its_frame_back() -> None:
    """A connection that ends right after an acks=all Produce cancels the answer's task before
    its first step; the frame's bytes still go back to the pool (they stayed taken for good
    while a ``finally`` in the task's body gave them back), and the handler's coroutine is
    closed rather than left never awaited."""
    async def go() -> None:
        pool = MemoryPool(100)
        memory = FrameMemory(pool)
        await memory.take(60)
        wrote: list[str] = []

        async def handler() -> str:
            return "answer"

        async def writing(answer: Coroutine[Any, Any, str]) -> None:
            wrote.append(await answer)

        answer = handler()
        task = memory.hand_over(writing(answer), answer)
        assert (memory.held, pool.used) == (0, 60)  # the connection may take its next frame
        task.cancel()  # before the task's first step
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (pool.used, wrote, answer.cr_frame) == (0, [], None)  # given back; closed

        await memory.take(40)
        answer = handler()
        await memory.hand_over(writing(answer), answer)
        assert (pool.used, wrote) == (0, ["answer"])

    asyncio.run(go())
