"""Long-poll wake-ups: a waiting Fetch sleeps until data lands on one of its partitions.

This is TDengine's push half of "push and pull": a consumer with nothing to read registers a
handle on the vnode and is woken the moment new data is written, not at max_wait.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

PartitionRef = tuple[str, int]


class DataNotifier:
    """Maps (database, vnode) to the futures of fetches waiting on it."""

    def __init__(self) -> None:
        self._waiters: defaultdict[PartitionRef, set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, db: str, vnode: int) -> None:
        """Wake every fetch waiting on this vnode (called after each append)."""
        waiters = self._waiters.pop((db, vnode), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, partitions: Iterable[PartitionRef], timeout: float) -> bool:
        """Sleep until data lands on any of `partitions` or `timeout` seconds pass; True if woken."""
        if timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters[key].add(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                bucket = self._waiters.get(key)
                if bucket is not None:
                    bucket.discard(fut)
                    if not bucket:
                        del self._waiters[key]
