"""The outbox of changes made on a broker that etcd must take (broker/cluster/outbox.py)."""

from __future__ import annotations

import asyncio

from tmqgate.broker.cluster.outbox import Outbox


def test_changes_are_written_in_order_and_kept_until_etcd_takes_them() -> None:
    written: list[list[int]] = []
    drained: list[int] = []
    up = [False]

    async def write(changes: list[int]) -> None:
        if not up[0]:
            raise ConnectionError("etcd unreachable")
        written.append(list(changes))

    async def on_drained() -> None:
        drained.append(len(written))

    async def run() -> None:
        box: Outbox[int] = Outbox(write, "numbers", batch=2, drained=on_drained)
        box.add([1, 2, 3])
        await asyncio.sleep(0.01)
        assert box.pending == [1, 2, 3] and written == [] and drained == []  # failed: kept
        box.add([4])  # a change while etcd is away queues behind the others
        await asyncio.sleep(0.01)
        assert box.pending == [1, 2, 3, 4]
        up[0] = True
        box.kick()  # the next etcd round
        await asyncio.sleep(0.01)
        assert written == [[1, 2], [3, 4]] and box.pending == [] and drained == [2]
        box.kick()  # nothing pending: no write, no drained
        await asyncio.sleep(0.01)
        assert drained == [2]
        box.kick(force=True)  # forced: drained runs once more
        await asyncio.sleep(0.01)
        assert written == [[1, 2], [3, 4]] and drained == [2, 2]

    asyncio.run(run())
