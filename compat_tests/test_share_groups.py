"""Share groups (KIP-932, "queues") with the Java `KafkaShareConsumer` of kafka-clients 4.3.1,
run by compat_tests/java/ShareClient.java (compat_tests/share_client.py).

Members of one share group read the same partitions together; each record is handed to one
member at a time, under an acquisition lock, and counts its deliveries. A member accepts
(done), releases (deliver again) or rejects (archived, never again) each record, implicitly
(share.acknowledgement.mode=implicit: the next poll or commitSync accepts what the last poll
got) or explicitly. A record released or not acknowledged in time is delivered again, one
delivery count higher, until `share.delivery.count.limit` deliveries archive it.

What Apache Kafka 4.3.1 does, which these tests pin down:
- share.version=1 is finalized on a newly formatted cluster; nothing else is needed.
- A new group starts at the log end (`share.auto.offset.reset` latest); each test sets
  earliest on its group (Admin incrementalAlterConfigs, GROUP resource) before subscribing.
- Group configs have bounds from broker settings: `share.record.lock.duration.ms` within
  group.share.{min,max}.record.lock.duration.ms (15000..60000), `share.delivery.count.limit`
  within 2 (its own minimum) .. group.share.max.delivery.count.limit (10; default 5),
  `share.heartbeat.interval.ms` at least 5000 and `share.session.timeout.ms` at least 45000.
- The first member's first heartbeat assigns nothing while the coordinator initializes the
  share partitions' state; the assignment comes with the next heartbeat, 5 s later, so every
  test's first records come ~6 s after its first consumer starts.
- close() after a poll in implicit mode does not accept that poll's records: they are
  released (ShareClient calls commitSync() first).
- A member whose connection drops (SIGKILL) has its records released at once (the broker's
  share session cache listens for the disconnect); a live member that holds records without
  acknowledging loses them when the acquisition lock expires.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from .group_helpers import create_topic, unique_name
from .helpers import wait_until
from .share_client import EARLIEST, Got, ShareProcess, ShareRun, client_config, produce, run_share


def _setup(broker: Any, tmp_path: Path, partitions: int, values: dict[int, list[str]],
           **client: str) -> tuple[Path, str, str]:
    """A new topic with `values` produced, a new group name and a client config file (with
    the settings `client`)."""
    topic, group = unique_name("share"), unique_name("share-group")
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker.bootstrap, topic, values)
    return client_config(tmp_path, broker.bootstrap, **client), group, topic


def _records(values: dict[int, list[str]]) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record `produce` wrote to a new topic."""
    return sorted((p, o, v) for p, vals in values.items() for o, v in enumerate(vals))


def _deliveries(run: ShareRun) -> dict[tuple[int, int, str], list[int]]:
    """(partition, offset, value) -> the delivery counts it came with, in order."""
    out: dict[tuple[int, int, str], list[int]] = {}
    for g in run.got:
        out.setdefault((g.partition, g.offset, g.value), []).append(g.delivery_count)
    return out


def _ended_clean(run: ShareRun) -> None:
    assert run.returncode == 0 and run.closed, run.describe()
    assert all(result == "ok" for _, result in run.commits), run.commits
    assert all(result == "ok" for _, _, result in run.acked), run.acked


def test_three_members_share_partitions_each_record_once(broker: Any, tmp_path: Path) -> None:
    """Implicit acknowledgement, three members at once on two partitions: together they get
    every record exactly once, each at its first delivery.

    share.acquire.mode=record_limit makes each ShareFetch acquire at most max.poll.records (10)
    records; under the default, batch_optimized, a fetch takes whole batches, here the 150
    records of a partition, so one member would read a partition alone. On Kafka a partition
    is then usually read by two members at once (which ones get what is not asserted)."""
    values = {p: [f"v-{p}-{i}" for i in range(150)] for p in (0, 1)}
    config, group, topic = _setup(broker, tmp_path, 2, values, max_poll_records="10",
                                  share_acquire_mode="record_limit")
    members = [ShareProcess(config, group, topic, "implicit", EARLIEST) for _ in range(3)]
    try:
        def union() -> int:
            runs = [m.snapshot() for m in members]
            for run in runs:
                assert run.returncode is None, f"a member exited: {run.describe()}"
            return sum(len(run.got) for run in runs)

        wait_until(lambda: union() >= 300, 90, 0.2,
                   lambda: f"300 records among the members: {[m.snapshot().describe() for m in members]}")
        time.sleep(1)  # anything delivered twice would come now
        runs = [m.stop() for m in members]
    finally:
        for m in members:
            m.kill()
    for run in runs:
        # A member whose assignment moved away from a partition it had fetched from cannot
        # acknowledge those records: the Java client fails them itself (NotLeaderOrFollower-
        # Exception), on either broker. tmqgate assigns at a member's first heartbeat, Kafka
        # once the share-partitions are initialized (~5 s, by when all three have joined), so
        # here a member joining a moment after another can move such a partition (CI r66).
        moved = [(p, n, r) for p, n, r in run.acked if r.endswith("NotLeaderOrFollowerException")]
        assert len(moved) <= 1, run.acked
        _ended_clean(replace(run, acked=[a for a in run.acked if a not in moved]))
    got = [g for run in runs for g in run.got]
    assert sorted((g.partition, g.offset, g.value) for g in got) == _records(values), \
        [len(run.got) for run in runs]
    assert {g.delivery_count for g in got} == {1}
    # every record accepted: by a later poll (ShareFetch) or the closing commitSync (ShareAcknowledge)
    assert sum(n for run in runs for _, n, _ in run.acked) == 300, [run.acked for run in runs]


def test_release_redelivers_with_the_next_delivery_count(broker: Any, tmp_path: Path) -> None:
    """Explicit RELEASE at delivery 1, ACCEPT at 2: each record comes exactly twice, with
    delivery counts 1 then 2, and never again."""
    values = {p: [f"v-{p}-{i}" for i in range(5)] for p in (0, 1)}
    config, group, topic = _setup(broker, tmp_path, 2, values)
    run = run_share(config, group, topic, "explicit", EARLIEST, "release-below:2", "idle:3000")
    _ended_clean(run)
    assert _deliveries(run) == {r: [1, 2] for r in _records(values)}, run.describe()
    expected_acks = sorted((p, o, t) for p, o, _ in _records(values) for t in ("RELEASE", "ACCEPT"))
    assert sorted(run.acks) == expected_acks
    for p, o, _ in _records(values):  # released before its redelivery was accepted
        assert [t for ap, ao, t in run.acks if (ap, ao) == (p, o)] == ["RELEASE", "ACCEPT"]
    assert {p for p, _ in run.commits} == {0, 1}


def test_reject_archives_records(broker: Any, tmp_path: Path) -> None:
    """REJECTed records are archived: another member of the group never gets them (nor the
    accepted ones); it gets the record produced afterwards, and only that."""
    vals = [f"bad-{i}" if i in (2, 5, 6) else f"ok-{i}" for i in range(10)]
    config, group, topic = _setup(broker, tmp_path, 1, {0: vals})
    first = run_share(config, group, topic, "explicit", EARLIEST, "reject:bad-", "max:10")
    _ended_clean(first)
    assert _deliveries(first) == {r: [1] for r in _records({0: vals})}, first.describe()
    assert sorted(first.acks) == [(0, i, "REJECT" if v.startswith("bad-") else "ACCEPT")
                                  for i, v in enumerate(vals)]
    produce(broker.bootstrap, topic, {0: ["after"]})
    second = run_share(config, group, topic, "implicit", "idle:2000")
    _ended_clean(second)
    assert second.got == [Got(0, 10, 1, "after")], second.describe()


def test_delivery_count_limit_archives_a_poison_record(broker: Any, tmp_path: Path) -> None:
    """share.delivery.count.limit=3: a record released at every delivery comes exactly three
    times (counts 1, 2, 3) and then never again; the others are accepted at their first."""
    vals = ["ok-0", "ok-1", "poison", "ok-3", "ok-4"]
    config, group, topic = _setup(broker, tmp_path, 1, {0: vals})
    run = run_share(config, group, topic, "explicit", EARLIEST, "group:share.delivery.count.limit=3",
                    "release:poison", "idle:3000")
    _ended_clean(run)
    assert run.configs == ["share.auto.offset.reset=earliest", "share.delivery.count.limit=3"]
    assert _deliveries(run) == {(0, i, v): [1, 2, 3] if v == "poison" else [1] for i, v in enumerate(vals)}, \
        run.describe()
    assert Counter(run.acks) == Counter({(0, 2, "RELEASE"): 3, **{(0, i, "ACCEPT"): 1 for i in (0, 1, 3, 4)}})


def _hold(config: Path, group: str, topic: str, lock_ms: int) -> tuple[ShareProcess, list[Got]]:
    """A member that polls once and holds what it got (the acquisition lock `lock_ms`)."""
    holder = ShareProcess(config, group, topic, "hold", EARLIEST, f"group:share.record.lock.duration.ms={lock_ms}")
    run = holder.wait_until("holding", 60)
    assert run.lock_ms == lock_ms, run.describe()  # acquisitionLockTimeoutMs: the group's config
    assert run.got and {g.delivery_count for g in run.got} == {1}, run.describe()
    return holder, run.got


def _got_held_again(run: ShareRun) -> bool:
    return any(g.delivery_count == 2 for g in run.got)


def _redelivered(held: list[Got], vals: list[str]) -> list[Got]:
    """Every record of partition 0: the held ones at delivery 2, the others at 1."""
    held_offsets = {g.offset for g in held}
    return [Got(0, i, 2 if i in held_offsets else 1, v) for i, v in enumerate(vals)]


def test_records_of_a_killed_member_come_again(broker: Any, tmp_path: Path) -> None:
    """A member SIGKILLed holding records: another member gets them with delivery count 2 —
    at once, not after the acquisition lock (60 s here) expires: Kafka releases a share
    session's records when its connection drops."""
    vals = [f"v-{i}" for i in range(5)]
    config, group, topic = _setup(broker, tmp_path, 1, {0: vals})
    holder, held = _hold(config, group, topic, 60_000)
    holder.kill()
    killed = time.monotonic()
    other = ShareProcess(config, group, topic, "implicit", "max:5", "wait:40000", "idle:3000")
    try:
        run = other.wait_until(_got_held_again, 45)
        took = time.monotonic() - killed
        run = other.finish(60)
    finally:
        other.kill()
    _ended_clean(run)
    assert sorted(run.got, key=lambda g: g.offset) == _redelivered(held, vals), run.describe()
    assert took < 30, f"held records came again {took:.1f} s after the holder died (lock 60 s)"


def test_records_held_past_the_lock_come_again(broker: Any, tmp_path: Path) -> None:
    """A live member holding records without acknowledging: once the acquisition lock expires
    (share.record.lock.duration.ms=15000, the least Kafka allows by default) another member
    gets them with delivery count 2 — and not before."""
    vals = [f"v-{i}" for i in range(5)]
    config, group, topic = _setup(broker, tmp_path, 1, {0: vals})
    holder, held = _hold(config, group, topic, 15_000)
    try:
        start = time.monotonic()
        other = ShareProcess(config, group, topic, "implicit", "max:5", "wait:40000", "idle:3000")
        try:
            run = other.wait_until(lambda r: any(g.delivery_count >= 2 for g in r.got), 60)
            took = time.monotonic() - start
            run = other.finish(60)
        finally:
            other.kill()
        assert holder.snapshot().returncode is None, "the holder exited"
    finally:
        holder.kill()
    _ended_clean(run)
    # Delivery count 2 as a rule; 3 seen once on the reference broker under CI's load (r65: the
    # records came after a second lock period, acquired once in between without reaching the
    # client): each count past the first means one more lock run out, so the wait grows with it.
    count = max(g.delivery_count for g in run.got)
    assert count in (2, 3), run.describe()
    again = [replace(g, delivery_count=2) if g.delivery_count == count else g for g in run.got]
    assert sorted(again, key=lambda g: g.offset) == _redelivered(held, vals), run.describe()
    assert took >= 12 + 15 * (count - 2), \
        f"held records came again at delivery {count} after {took:.1f} s, before {count - 1} locks of 15 s expired"


def test_by_duration_starts_at_the_records_written_in_the_look_back(broker: Any, tmp_path: Path) -> None:
    """share.auto.offset.reset=by_duration:PT1H: a new group starts at the first record of the
    last hour — the records stamped two hours ago are not delivered, the recent ones are."""
    from confluent_kafka import Producer

    topic, group = unique_name("share-dur"), unique_name("share-dur-group")
    create_topic(broker.bootstrap, topic, 1)
    now_ms = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(4):  # one batch each
        producer.produce(topic, value=f"old-{i}".encode(), partition=0, timestamp=now_ms - 7_200_000 + i)
        producer.flush(30)
    for i in range(3):
        producer.produce(topic, value=f"new-{i}".encode(), partition=0, timestamp=now_ms + i)
        producer.flush(30)
    run = run_share(client_config(tmp_path, broker.bootstrap), group, topic, "implicit",
                    "group:share.auto.offset.reset=by_duration:PT1H", "idle:3000", "wait:60000")
    _ended_clean(run)
    assert run.got == [Got(0, 4 + i, 1, f"new-{i}") for i in range(3)], run.describe()
