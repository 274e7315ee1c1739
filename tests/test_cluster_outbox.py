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


def test_a_request_that_queued_changes_waits_until_etcd_has_them() -> None:
    """``Outboxes.settle``: a request that queued nothing returns at once (even while etcd is
    away and others' changes wait); one that queued a change returns once etcd took it, or
    False after the timeout while etcd cannot — the change stays queued."""
    from tmqgate.broker.cluster.outbox import Outboxes

    up = [False]
    written: list[str] = []

    async def write(changes: list[str]) -> None:
        if not up[0]:
            raise ConnectionError("etcd unreachable")
        written.extend(changes)

    async def refreshed() -> None:
        written.append("refreshed")

    async def run() -> None:
        boxes = Outboxes()
        configs: Outbox[str] = Outbox(write, "configs", into=boxes)
        catalog: Outbox[str] = Outbox(write, "catalog", batch=1 << 30, drained=refreshed, into=boxes)
        mark = boxes.mark()
        assert await boxes.settle(mark, timeout=0.01)  # nothing queued
        catalog.add(["acl"])
        assert not await boxes.settle(mark, timeout=0.05)  # etcd away: timed out, kept
        assert catalog.pending == ["acl"] and written == []
        later = boxes.mark()
        assert await boxes.settle(later, timeout=0.01)  # a request that queued nothing does not wait
        configs.add(["retention"])
        waiting = asyncio.ensure_future(boxes.settle(later, timeout=5))
        await asyncio.sleep(0.02)
        assert not waiting.done()
        up[0] = True
        configs.kick()
        # answered once its own outbox is written: the catalog's change, still queued, does
        # not hold it up
        assert await waiting and catalog.pending == ["acl"]
        catalog.kick()
        assert await boxes.settle(mark, timeout=5)
        # answered only after the catalog's drained step too (its refresh of the view)
        assert sorted(written) == ["acl", "refreshed", "retention"]
        assert (configs.done, catalog.done) == (1, 1)

    asyncio.run(run())
