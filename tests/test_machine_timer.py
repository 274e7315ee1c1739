"""The coordinators' timer (coordinator/runtime.py MachineTimer) stops whenever it is stopped,
even when the stop comes as a kick wakes it: on Python 3.11 `asyncio.wait_for` swallowed such
a cancel, the timer went on ticking and `tmqgate serve` hung at stop (seen in CI)."""

from __future__ import annotations

import asyncio

from tmqgate.coordinator.runtime import MachineTimer


class Ticks:
    """A machine that only counts its ticks."""

    def __init__(self) -> None:
        self.ticks = 0

    def next_deadline(self) -> int | None:
        return None

    def tick(self, now: int) -> None:
        self.ticks += 1


def test_a_stop_that_comes_with_a_kick_ends_the_timer() -> None:
    async def scenario(yields: int) -> None:
        timer: MachineTimer[Ticks] = MachineTimer(Ticks(), lambda: 0, 60_000, "test")
        await timer.start()
        await asyncio.sleep(0.01)  # the timer is asleep on its event
        timer.kick()
        for _ in range(yields):  # every point between the kick and the timer waking
            await asyncio.sleep(0)
        stop = asyncio.create_task(timer.stop())
        done, _ = await asyncio.wait({stop}, timeout=5)  # asyncio.wait cancels nothing itself
        assert done == {stop}, f"the stop hangs after {yields} yields"

    for yields in range(6):
        asyncio.run(scenario(yields))


def test_a_kick_ticks_the_machine_at_once() -> None:
    async def scenario() -> int:
        machine = Ticks()
        timer: MachineTimer[Ticks] = MachineTimer(machine, lambda: 0, 60_000, "test")
        await timer.start()
        await asyncio.sleep(0.01)
        first = machine.ticks  # the first tick is on start
        timer.kick()
        await asyncio.sleep(0.01)
        await timer.stop()
        return machine.ticks - first

    assert asyncio.run(scenario()) == 1
