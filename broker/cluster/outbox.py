"""Changes made on this broker that etcd must take (a topic's configs, a supertable, the ACLs,
users, configs and quotas), written in the background, in the order they were made.

Rules:
- ``add`` queues a change and starts the one writing task unless it runs; the task writes the
  oldest ``batch`` changes at a time and drops them once etcd took them.
- A failed write (etcd unreachable) leaves them queued, logs, and ends the task; ``kick`` (each
  etcd round) starts it again, so nothing made here is lost while the broker lives.
- ``pending`` is what etcd does not have yet: the cluster's copy of those is older than this
  broker's, so whoever applies etcd's leaves them alone meanwhile.
- A request that queued changes is answered once etcd took them (``Outboxes.settle``), as
  Kafka answers an AlterConfigs or CreateAcls once its metadata record is committed: a change
  acknowledged while only this broker's store held it would be replaced by etcd's older copy
  when the broker came back from a kill -9. While etcd cannot take them the answer is
  REQUEST_TIMED_OUT after ``SETTLE_TIMEOUT_S`` (the changes stay queued, as a timed-out Kafka
  request may still be committed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

log = logging.getLogger("tmqgate.cluster")
T = TypeVar("T")

#: how long a request that changed the cluster's catalog waits for etcd to take the change
SETTLE_TIMEOUT_S = 10.0


class Outboxes:
    """A broker's outboxes together: what a request queued, and waiting until etcd has it."""

    def __init__(self) -> None:
        self.boxes: list[Outbox[Any]] = []

    def mark(self) -> tuple[int, ...]:
        """The changes ever queued in each outbox (compare before and after a request)."""
        return tuple(box.added for box in self.boxes)

    async def settle(self, mark: tuple[int, ...], timeout: float = SETTLE_TIMEOUT_S) -> bool:
        """Wait until etcd has what was queued since ``mark``, in the outboxes it was queued
        in (another outbox etcd refuses for now does not hold the answer up; each writes in
        order, so everything queued there before is written too); False when that took longer
        than ``timeout``."""
        grown = [(box, box.added) for box, before in zip(self.boxes, mark, strict=True) if box.added != before]
        if not grown:
            return True
        try:
            async with asyncio.timeout(timeout):
                for box, count in grown:
                    await box.written(count)
        except TimeoutError:
            return False
        return True


class Outbox(Generic[T]):
    """See the module docstring. ``write`` puts changes in etcd (raises when it cannot);
    ``what`` names them in the log; ``drained`` runs once the queue is empty after a write;
    ``into``: the broker's `Outboxes`, which this one joins."""

    def __init__(self, write: Callable[[list[T]], Awaitable[None]], what: str, *, batch: int = 1,
                 drained: Callable[[], Awaitable[None]] | None = None, into: Outboxes | None = None) -> None:
        self._write = write
        self._what = what
        self._batch = batch
        self._drained = drained
        self.pending: list[T] = []
        self.added = 0  # changes ever queued
        self.done = 0  # of those, written (and drained, when ``drained`` runs)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        if into is not None:
            into.boxes.append(self)

    def add(self, changes: list[T]) -> None:
        self.pending += changes
        self.added += len(changes)
        self.kick()

    async def written(self, count: int) -> None:
        """Return once the first ``count`` changes ever queued are written."""
        if self.done >= count:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((count, waiter))
        try:
            await waiter
        finally:
            self._waiters = [(n, w) for n, w in self._waiters if w is not waiter]

    def kick(self, force: bool = False) -> None:
        """Start writing what is pending, unless that runs already or nothing is (``force``:
        even then, for ``drained``)."""
        if (self.pending or force) and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        """Write the pending changes, oldest first (see the rules)."""
        while self.pending:
            head = self.pending[:self._batch]
            try:
                await self._write(head)
            except Exception as exc:  # noqa: BLE001 - etcd unreachable: kept for the next kick
                log.warning("cluster: %s not written to etcd yet (%s); retrying", self._what, exc)
                return
            del self.pending[:len(head)]
            if self._drained is None:
                self._progress(self.added - len(self.pending))
        if self._drained is not None:
            upto = self.added  # nothing pending: all of them are written
            await self._drained()
            self._progress(upto)

    def _progress(self, upto: int) -> None:
        self.done = max(self.done, upto)
        for n, waiter in self._waiters:
            if n <= self.done and not waiter.done():
                waiter.set_result(None)
