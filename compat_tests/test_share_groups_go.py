"""Share groups (KIP-932 queues) with franz-go v1.22's share consumer (kgo.ShareGroup, Record.Ack
with AckAccept / AckRelease / AckReject, Record.DeliveryCount) through compat_tests/go/main.go's
`share` mode (go_client.run_share / start_share). Each test sets its group's configs with
IncrementalAlterConfigs on the GROUP resource (share.auto.offset.reset=earliest, and
share.record.lock.duration.ms / share.delivery.count.limit where it needs them), creates its topic
and produces, then runs share consumers and checks exactly which records each got, at which
partition and offset, with which delivery count:

- two consumers at once split a 2-partition topic: every record once, delivery count 1;
- a released record comes back with its delivery count one higher;
- a rejected record is archived: never delivered again, to the group's later consumers either;
- a record always released is delivered `share.delivery.count.limit` times (5 by default), then
  archived;
- records held by a consumer that dies (SIGKILL: its connection closes) or freezes (SIGSTOP: its
  acquisition locks run out) go to another consumer with delivery count 2.

franz-go acknowledges on the next ShareFetch (piggybacked) or, when no fetch goes within a second,
on a ShareAcknowledge; Client.Close sends what is left on a ShareAcknowledge with session epoch
-1 and leaves with a ShareGroupHeartbeat of member epoch -1. A member gets its assignment on its
second heartbeat (Kafka's share heartbeat interval is 5 s), so each consumer takes about 5 s to
get its first record.
"""

from __future__ import annotations

import signal
import time
from collections import defaultdict
from typing import Any

import pytest

from .conftest import Broker
from .go_client import ShareRecord, ShareRun, run_share, start_share
from .helpers import unique_topic

EARLIEST = {"share.auto.offset.reset": "earliest"}
#: share.record.lock.duration.ms for the lock tests: Kafka's minimum (group.share.min.record.lock.duration.ms)
LOCK_MS = 15_000
#: Kafka's share.delivery.count.limit when the group does not set it (group.share.delivery.count.limit)
DEFAULT_DELIVERY_LIMIT = 5


def setup(broker: Broker, topic: str, group: str, values: list[str], *, partitions: int = 1, create: bool = True,
          configs: dict[str, Any] | None = None) -> dict[str, tuple[int, int]]:
    """Set the group's configs, create the topic (`create`) and produce `values` (value i to
    partition i % partitions); returns value -> (partition, offset)."""
    run = run_share(broker.bootstrap, topic, group, setup=True, create=create, partitions=partitions,
                    values=values, configs=configs)
    assert run.returncode == 0, run.report()
    produced = {e["value"]: (e["partition"], e["offset"]) for e in run.of("produced")}
    assert sorted(produced) == sorted(values), run.report()
    return produced


def check_run(run: ShareRun) -> None:
    """The consumer ended by itself (idle after its records; waiting in vain when it got none),
    every acknowledgement ok."""
    assert run.returncode == 0, run.report()
    assert [e["reason"] for e in run.of("stopped")] == ["idle" if run.records else "wait"], run.report()
    assert run.ack_errors() == [], run.report()
    assert run.of("closed"), run.report()


def deliveries(records: list[ShareRecord]) -> dict[str, list[tuple[int, int, int, str]]]:
    """value -> [(partition, offset, delivery count, ack)] in the order they came."""
    out: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
    for r in records:
        out[r.value].append((r.partition, r.offset, r.count, r.ack))
    return dict(out)


def test_two_consumers_share_the_records(broker: Broker) -> None:
    """200 records on 2 partitions, produced before two share consumers (two processes, started
    together, fetching at most 10 records a ShareFetch) accept whatever they get: between them
    every record exactly once, at the partition and offset it was produced to, delivery count 1.
    (Kafka's assignor gives each member one partition, so each gets 100; a broker that gives both
    both may let one take everything: the split is not checked.)"""
    topic, group = unique_topic("go-share-two"), unique_topic("go-share-two")
    values = [f"value-{i:03d}" for i in range(200)]
    produced = setup(broker, topic, group, values, partitions=2, configs=EARLIEST)
    consumers = [start_share(broker.bootstrap, topic, group, idle=4, wait=20, fetch_max_records=10) for _ in range(2)]
    try:
        runs = [c.finish(60) for c in consumers]
    finally:
        for c in consumers:
            c.kill()
    for run in runs:
        check_run(run)
    split = [len(run.records) for run in runs]
    got = deliveries([r for run in runs for r in run.records])
    assert got == {v: [(p, o, 1, "accept")] for v, (p, o) in produced.items()}, f"records per consumer {split}"


def test_release_redelivers(broker: Broker) -> None:
    """A consumer releases each record at its first delivery and accepts it at its second: it gets
    every record twice, delivery count 1 then 2 at the same partition and offset, and nothing more."""
    topic, group = unique_topic("go-share-release"), unique_topic("go-share-release")
    values = [f"value-{i:03d}" for i in range(20)]
    produced = setup(broker, topic, group, values, partitions=2, configs=EARLIEST)
    run = run_share(broker.bootstrap, topic, group, rules=["release-below:2"], idle=3)
    check_run(run)
    assert deliveries(run.records) == {v: [(p, o, 1, "release"), (p, o, 2, "accept")]
                                       for v, (p, o) in produced.items()}, run.report()


def test_reject_archives(broker: Broker) -> None:
    """A consumer rejects the records whose value starts with bad- and accepts the others: each
    comes once. A second consumer of the group, started after it left and after 6 more records
    were produced, gets exactly those 6: the rejected records are never delivered again."""
    topic, group = unique_topic("go-share-reject"), unique_topic("go-share-reject")
    values = [f"bad-{i:03d}" if i % 5 == 0 else f"value-{i:03d}" for i in range(20)]
    produced = setup(broker, topic, group, values, partitions=2, configs=EARLIEST)
    first = run_share(broker.bootstrap, topic, group, rules=["reject:bad-"], idle=3)
    check_run(first)
    assert deliveries(first.records) == {
        v: [(p, o, 1, "reject" if v.startswith("bad-") else "accept")] for v, (p, o) in produced.items()}
    late = [f"late-{i:03d}" for i in range(6)]
    produced_late = setup(broker, topic, group, late, partitions=2, create=False)
    second = run_share(broker.bootstrap, topic, group, idle=3)
    check_run(second)
    assert deliveries(second.records) == {v: [(p, o, 1, "accept")] for v, (p, o) in produced_late.items()}


@pytest.mark.parametrize("limit", [None, 3], ids=["default-limit", "limit-3"])
def test_delivery_limit_archives_poison(broker: Broker, limit: int | None) -> None:
    """10 records, one of them (poison-004) released at every delivery: the others come once
    (accepted, delivery count 1); the poison record comes exactly share.delivery.count.limit times
    (the group config: 3; unset: Kafka's default, 5), delivery counts 1, 2, ..., then it is
    archived and never comes again."""
    topic, group = unique_topic("go-share-poison"), unique_topic("go-share-poison")
    values = [f"poison-{i:03d}" if i == 4 else f"value-{i:03d}" for i in range(10)]
    configs: dict[str, Any] = dict(EARLIEST)
    if limit is not None:
        configs["share.delivery.count.limit"] = limit
    produced = setup(broker, topic, group, values, configs=configs)
    run = run_share(broker.bootstrap, topic, group, rules=["release:poison-"], idle=3)
    check_run(run)
    times = limit or DEFAULT_DELIVERY_LIMIT
    expected = {v: [(p, o, 1, "accept")] for v, (p, o) in produced.items()}
    p, o = produced["poison-004"]
    expected["poison-004"] = [(p, o, n, "release") for n in range(1, times + 1)]
    assert deliveries(run.records) == expected, run.report()


def held_then_redelivered(broker: Broker, topic: str, sig: signal.Signals) -> tuple[ShareRun, ShareRun, float]:
    """10 records; consumer A (lock duration LOCK_MS) gets them all in its first poll and holds
    them; it is sent `sig`; consumer B of the group then runs until idle. Returns A's run, B's run
    and the time.monotonic() A was signalled."""
    group = unique_topic("go-share-hold")
    values = [f"value-{i:03d}" for i in range(10)]
    produced = setup(broker, topic, group, values,
                     configs={**EARLIEST, "share.record.lock.duration.ms": LOCK_MS})
    holder = start_share(broker.bootstrap, topic, group, hold=True)
    try:
        holder.wait_for("holding", 40)
        signalled = time.monotonic()
        holder.signal(sig)
        other = run_share(broker.bootstrap, topic, group, idle=3, wait=40)
    finally:
        holder.kill()
    held = holder.finish(10)
    assert deliveries(held.records) == {v: [(p, o, 1, "none")] for v, (p, o) in produced.items()}, held.report()
    check_run(other)
    assert deliveries(other.records) == {v: [(p, o, 2, "accept")] for v, (p, o) in produced.items()}, \
        other.report()
    return held, other, signalled


def test_dead_consumer_records_redelivered(broker: Broker) -> None:
    """A consumer that holds 10 records unacknowledged is SIGKILLed: another consumer of the group
    gets all 10 with delivery count 2. Kafka releases a share session's records when its
    connection closes, so they come without waiting for the acquisition lock (15 s) to expire."""
    topic = unique_topic("go-share-dead")
    _held, other, killed = held_then_redelivered(broker, topic, signal.SIGKILL)
    after = other.records[0].at - killed
    assert after < LOCK_MS / 1000, f"the held records came {after:.1f} s after the holder died"


def test_frozen_consumer_lock_expires(broker: Broker) -> None:
    """A consumer that holds 10 records unacknowledged is frozen (SIGSTOP: still connected, still a
    member, not heartbeating): another consumer of the group gets all 10 with delivery count 2 once
    their acquisition lock (share.record.lock.duration.ms=15000) expired — not before 15 s after the
    holder started, and well before its member session (45 s) could have timed out."""
    topic = unique_topic("go-share-frozen")
    held, other, stopped = held_then_redelivered(broker, topic, signal.SIGSTOP)
    first = other.records[0].at
    assert first - held.started >= LOCK_MS / 1000, f"came {first - held.started:.1f} s after the holder started"
    assert first - stopped < 30, f"came {first - stopped:.1f} s after the holder froze"
