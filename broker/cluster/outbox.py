"""Changes made on this broker that etcd must take (a topic's configs, a supertable, the ACLs,
users, configs and quotas), written in the background, in the order they were made.

Rules:
- ``add`` queues a change and starts the one writing task unless it runs; the task writes the
  oldest ``batch`` changes at a time and drops them once etcd took them.
- A failed write (etcd unreachable) leaves them queued, logs, and ends the task; ``kick`` (each
  etcd round) starts it again, so nothing made here is lost while the broker lives.
- ``pending`` is what etcd does not have yet: the cluster's copy of those is older than this
  broker's, so whoever applies etcd's leaves them alone meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger("tmqgate.cluster")
T = TypeVar("T")


class Outbox(Generic[T]):
    """See the module docstring. ``write`` puts changes in etcd (raises when it cannot);
    ``what`` names them in the log; ``drained`` runs once the queue is empty after a write."""

    def __init__(self, write: Callable[[list[T]], Awaitable[None]], what: str, *, batch: int = 1,
                 drained: Callable[[], Awaitable[None]] | None = None) -> None:
        self._write = write
        self._what = what
        self._batch = batch
        self._drained = drained
        self.pending: list[T] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, changes: list[T]) -> None:
        self.pending += changes
        self.kick()

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
        if self._drained is not None:
            await self._drained()
