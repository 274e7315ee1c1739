"""Membership.refresh (broker/cluster/membership.py) without etcd: a round is faked, so what is
checked is the coalescing — callers share rounds, each caller gets a round that started after
its call — and that a finished round whose done-callback has not run yet is not waited on
again (awaiting a finished future does not yield: the event loop would spin)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tmqgate.broker.cluster.membership import Membership


def _membership(rounds: list[int], gate: threading.Event | None = None) -> Membership:
    m = Membership("etcd://127.0.0.1:1", 0, 3000)

    def fake_round() -> bool:
        if gate is not None:
            gate.wait(5)
        rounds.append(len(rounds))
        return True

    m._round_or_failover = fake_round  # type: ignore[method-assign]
    return m


@pytest.mark.timeout(10)
def test_a_finished_round_whose_callback_is_pending_is_not_awaited_again() -> None:
    async def run() -> list[int]:
        rounds: list[int] = []
        m = _membership(rounds)
        finished = asyncio.get_running_loop().create_future()
        finished.set_result(True)  # done, its callback (none here) not run: what a thread leaves
        m._refreshing = finished
        assert await asyncio.wait_for(m.refresh(), 5)
        return rounds

    assert asyncio.run(run()) == [0]  # one new round, no spin


@pytest.mark.timeout(10)
def test_callers_during_a_round_share_the_next_one_and_changes_are_applied() -> None:
    async def run() -> tuple[list[int], list[str]]:
        rounds: list[int] = []
        gate = threading.Event()
        m = _membership(rounds, gate)
        applied: list[str] = []
        m.on_change.append(lambda: applied.append("topics"))
        m.on_change.append(lambda: applied.append("replicas"))
        first = asyncio.ensure_future(m.refresh())
        await asyncio.sleep(0.05)  # the first round is running (held at the gate)
        later = [asyncio.ensure_future(m.refresh()) for _ in range(3)]
        await asyncio.sleep(0.05)
        gate.set()
        assert await asyncio.gather(first, *later) == [True] * 4
        return rounds, applied

    rounds, applied = asyncio.run(run())
    # the three later callers need a round that started after them: one more, shared
    assert rounds == [0, 1]
    assert applied == ["topics", "replicas"] * 2
