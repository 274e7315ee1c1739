"""The asyncio side of the coordinator: futures for deferred JoinGroup/SyncGroup answers and a
timer task that calls ``tick`` at the state machine's next deadline (and at least once a
second, so topic changes reach KIP-848 groups and deleted topics lose their offsets).

The state machine itself (``coordinator.coordinator``) knows nothing of asyncio; this module
is the only place the two meet. Nothing in ``coordinator`` imports the broker: the broker
builds the runtime (``tmqgate.broker.runtime.group_coordinator``) from its settings and a
``TopicSource`` over its topic registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from tmqgate.coordinator.classic import Reply
from tmqgate.coordinator.coordinator import GroupCoordinator
from tmqgate.coordinator.offsets import OffsetEntry, TxnOffsetsGate
from tmqgate.protocol.errors import ErrorCode

log = logging.getLogger("tmqgate.coordinator")

#: The timer wakes at least this often (ms) even with no deadline due.
IDLE_TICK_MS = 1000


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Ticking(Protocol):
    """A state machine driven by a clock: when it next needs a ``tick``, and the tick."""

    def next_deadline(self) -> int | None: ...

    def tick(self, now: int) -> object: ...


M = TypeVar("M", bound=Ticking)


class MachineTimer(Generic[M]):
    """Owns a clocked state machine and the task that ticks it: at the machine's next deadline
    as computed when the task went to sleep, at least every ``interval_ms``, and at once after
    ``kick``. The group and the transaction coordinators' runtimes are both this."""

    def __init__(self, machine: M, clock: Callable[[], int], interval_ms: int, name: str) -> None:
        self.machine = machine
        self.clock = clock
        self.interval_ms = interval_ms
        self._log_name = name
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def now(self) -> int:
        return int(self.clock())

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._timer())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def kick(self) -> None:
        """An event changed deadlines: let the timer recompute its sleep."""
        if self._wake is not None:
            self._wake.set()

    async def _timer(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            deadline = self.machine.next_deadline()
            wait_ms = (self.interval_ms if deadline is None
                       else min(self.interval_ms, max(0, deadline - self.now())))
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel that
                # comes as the event is set, and this loop then never ends (a stop hung on it).
                async with asyncio.timeout(wait_ms / 1000):
                    await self._wake.wait()
            try:
                self.machine.tick(self.now())
            except Exception:  # the timer must survive one bad group or transaction
                log.exception("%s tick failed", self._log_name)


class CoordinatorRuntime(MachineTimer[GroupCoordinator]):
    """Owns a GroupCoordinator, feeds it the clock, and turns its replies into awaitables."""

    def __init__(self, machine: GroupCoordinator, clock: Callable[[], int] = monotonic_ms) -> None:
        super().__init__(machine, clock, IDLE_TICK_MS, "coordinator")

    async def _deferred(self, start: Callable[[Reply], None]) -> dict[str, Any]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        def reply(result: dict[str, Any]) -> None:
            if not future.done():
                future.set_result(result)

        start(reply)
        self.kick()
        return await future

    async def join_group(self, body: dict[str, Any], version: int, client_id: str, client_host: str) -> dict[str, Any]:
        return await self._deferred(
            lambda reply: self.machine.join_group(self.now(), body, version, client_id, client_host, reply))

    async def sync_group(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._deferred(lambda reply: self.machine.sync_group(self.now(), body, reply))


    # ---- transactional offsets (TxnOffsetCommit, and the transaction coordinator's end) ----

    def txn_offset_commit(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                          member_id: str, generation_id: int, group_instance_id: str | None,
                          topics: list[OffsetEntry], add_group: bool = False,
                          gate: TxnOffsetsGate | None = None) -> list[ErrorCode]:
        """``GroupOffsets.txn_offset_commit`` at the runtime's clock."""
        return self.machine.offsets.txn_offset_commit(self.now(), group_id, transactional_id, producer_id,
                                                      producer_epoch, member_id, generation_id, group_instance_id,
                                                      topics, add_group=add_group, gate=gate)

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The transaction coordinator's end of a transaction that added offsets for the group
        (what part T2 calls through its ``TxnGroups`` collaborator): commit makes the pending
        offsets committed, abort drops them; ``StorageIOError``: nothing changed, retry later."""
        self.machine.offsets.complete_transaction(group_id, producer_id, producer_epoch, commit)
