"""Consumer-group boilerplate for the compatibility suite.

One way per client to run group members and to ask the group coordinator about a group,
so the tests in `test_groups*.py` only state what must hold:

- `ConsumerGroup(kind, bootstrap, group, topic)` starts members one by one (`add()`), each
  consuming and committing after every batch in a thread of its own (kafka-python,
  confluent-kafka) or as a task on one shared event loop (aiokafka); it reports every
  member's current assignment and everything it consumed, and waits for a balanced,
  settled assignment of given sizes (`wait_balanced`).
- `kind` is a client library, plus "confluent-consumer": confluent-kafka with
  `group.protocol=consumer` (KIP-848, server-side assignment).
- `KillableConsumer` runs a member as a child process (tiny script, confluent-kafka or
  kafka-python) that prints what it consumed, committed and was assigned, so a test can
  SIGKILL it.
- `BackgroundProducer` produces unique values to every partition until stopped.
- Admin calls per client (`describe_group`, `list_groups`, `delete_groups`,
  `committed_offsets`), normalised to plain Python values.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .helpers import wait_until

# Client kinds that can run a group member.  "confluent-consumer" = KIP-848 protocol.
GROUP_KINDS = ("kafka-python", "aiokafka", "confluent", "confluent-consumer")
ADMIN_CLIENTS = ("kafka-python", "aiokafka", "confluent")

# Classic protocol: small session timeout (Kafka's group.min.session.timeout.ms is 6000)
# and frequent heartbeats so rebalances are quick.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
MAX_POLL_INTERVAL_MS = 30000  # = rebalance timeout of the classic JoinGroup


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def kp_subscribe(consumer: Any, topic: str) -> None:
    """Subscribe a kafka-python consumer to `topic` with the topic's metadata in hand.

    Works around a kafka-python 3.0.12 bug.  A leader that joins before it has the topic's
    metadata assigns nothing and rejoins once the metadata arrives.  That rejoin is triggered
    only by the coordinator's metadata snapshot (its base `rejoin_needed` flag stays false),
    and the leader's assignment makes the snapshot match again.  When the JoinGroup/SyncGroup
    round trip outlives a `poll(timeout_ms=...)`, the next poll therefore finds `need_rejoin()`
    false and never collects the finished join: the assignment is dropped and heartbeats stay
    disabled until the broker expires the member.  Seen against both brokers, about one run in
    eight of `test_offsets_survive_restart_and_groups_are_independent` on Apache Kafka.

    `topics()` always fetches fresh metadata; fetched after `subscribe()`, it is recorded in
    the coordinator's snapshot, so the first join assigns the topic's partitions and no
    metadata-triggered rejoin follows.
    """
    consumer.subscribe([topic])
    consumer.topics()


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> None:
    """CreateTopics, then wait until Metadata shows every partition with a leader (a client
    that subscribes earlier may see no partitions and only look again minutes later)."""
    from confluent_kafka.admin import AdminClient

    from .helpers import ConfluentDriver

    ConfluentDriver(bootstrap).create_topic(topic, partitions)
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "compat-group-admin-ck"})

    def ready() -> bool:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        return (md is not None and md.error is None and len(md.partitions) == partitions
                and all(pm.error is None and pm.leader >= 0 for pm in md.partitions.values()))

    wait_until(ready, timeout, 0.2, f"{topic} to have {partitions} partitions with leaders")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Consumed:
    """One record as a member received it."""

    at: float  # time.monotonic() when the client handed it over
    partition: int
    offset: int
    value: bytes


class BackgroundProducer(threading.Thread):
    """Produces unique values (`<prefix>-<n>`) round-robin over the partitions until stopped.

    Only acknowledged values count as produced (`delivered`)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float = 200.0,
                 prefix: str = "v") -> None:
        super().__init__(daemon=True, name=f"producer-{topic}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.prefix = prefix
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.failed: dict[bytes, str] = {}
        self.unflushed = -1
        self.error: BaseException | None = None

    def n_delivered(self) -> int:
        with self.lock:
            return len(self.delivered)

    def values(self) -> set[bytes]:
        with self.lock:
            return set(self.delivered)

    def _report(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.failed[msg.value()] = str(err)
            else:
                self.delivered[msg.value()] = (msg.partition(), msg.offset())

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "client.id": "compat-group-producer",
                          "acks": "all", "linger.ms": 5, "enable.idempotence": True})
            i = 0
            period = 1.0 / self.rate
            nxt = time.monotonic()
            while not self.stop_flag.is_set():
                value = f"{self.prefix}-{i:08d}".encode()
                p.produce(self.topic, value=value, partition=i % self.partitions, on_delivery=self._report)
                i += 1
                nxt += period
                delay = nxt - time.monotonic()
                p.poll(max(0.0, delay))
            self.unflushed = p.flush(60)
        except BaseException as e:  # noqa: BLE001 - surfaced by finish()
            self.error = e

    def finish(self) -> set[bytes]:
        """Stop, flush, check every record was acknowledged; return the produced values."""
        self.stop_flag.set()
        self.join(90)
        assert not self.is_alive(), "producer did not finish flushing"
        assert self.error is None, repr(self.error)
        assert self.unflushed == 0, f"{self.unflushed} records never got a delivery report"
        assert not self.failed, f"{len(self.failed)} failed deliveries, e.g. {list(self.failed.items())[:3]}"
        return self.values()


def produce_values(bootstrap: str, topic: str, per_partition: dict[int, int], prefix: str = "r") -> None:
    """Produce `n` records `<prefix>-<p>-<i>` to each partition p (acks=all, in order)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "client.id": "compat-group-producer"})
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=f"{prefix}-{part}-{i}".encode(), partition=part, on_delivery=cb)
    left = p.flush(60)
    assert left == 0 and not errors, (left, errors[:3])


# --------------------------------------------------------------------------- members


class Member:
    """One group member consuming `topic`; subclasses run it on a particular client."""

    kind = ""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, *,
                 auto_offset_reset: str = "earliest", commit: bool = True,
                 extra: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.client_id = client_id
        self.auto_offset_reset = auto_offset_reset
        self.commit = commit
        self.extra = extra or {}
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self._assigned: frozenset[int] = frozenset()
        self.assign_history: list[tuple[float, frozenset[int]]] = []
        self.records: list[Consumed] = []
        self.commit_errors: list[str] = []
        self.errors: list[BaseException] = []
        self.polls = 0
        self.closed = threading.Event()

    # --- called from the member's own thread/task
    def _set_assigned(self, parts: Iterable[int]) -> None:
        a = frozenset(parts)
        with self.lock:
            self.polls += 1
            if a != self._assigned or not self.assign_history:
                self._assigned = a
                self.assign_history.append((time.monotonic(), a))

    def _add(self, recs: list[Consumed]) -> None:
        if recs:
            with self.lock:
                self.records.extend(recs)

    # --- called from the test
    @property
    def assigned(self) -> frozenset[int]:
        with self.lock:
            return self._assigned

    def n_polls(self) -> int:
        with self.lock:
            return self.polls

    def consumed(self) -> list[Consumed]:
        with self.lock:
            return list(self.records)

    def start(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group cleanly (close the consumer)."""
        raise NotImplementedError

    def check(self) -> None:
        if self.errors:
            raise AssertionError(f"member {self.client_id} ({self.kind}) failed: {self.errors[0]!r}") \
                from self.errors[0]


def _python_client_config(member: Member) -> dict[str, Any]:
    """The consumer settings kafka-python and aiokafka share (the same names in both)."""
    return {
        "bootstrap_servers": member.bootstrap,
        "group_id": member.group,
        "client_id": member.client_id,
        "enable_auto_commit": False,
        "auto_offset_reset": member.auto_offset_reset,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
        "max_poll_interval_ms": MAX_POLL_INTERVAL_MS,
        "fetch_max_wait_ms": 200,
        **member.extra,
    }


class _ThreadMember(Member):
    def start(self) -> None:
        self.thread = threading.Thread(target=self._main, daemon=True, name=f"member-{self.client_id}")
        self.thread.start()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 - surfaced by check()
            self.errors.append(e)
        finally:
            self.closed.set()

    def run(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_flag.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.client_id} did not close in {timeout}s"


class KafkaPythonMember(_ThreadMember):
    kind = "kafka-python"

    def config(self) -> dict[str, Any]:
        return _python_client_config(self)

    def run(self) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        c = KafkaConsumer(**self.config())
        try:
            kp_subscribe(c, self.topic)
            while not self.stop_flag.is_set():
                batch = c.poll(timeout_ms=200)
                now = time.monotonic()
                recs = [Consumed(now, tp.partition, m.offset, m.value) for tp, ms in batch.items() for m in ms]
                self._add(recs)
                if recs and self.commit:
                    try:
                        c.commit()
                    except KafkaError as e:  # e.g. CommitFailedError during a rebalance
                        self.commit_errors.append(repr(e))
                self._set_assigned(tp.partition for tp in c.assignment())
        finally:
            c.close(autocommit=False)


class ConfluentMember(_ThreadMember):
    kind = "confluent"
    protocol = "classic"

    def config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": self.auto_offset_reset,
            "fetch.wait.max.ms": 200,
            "enable.partition.eof": False,
            "group.protocol": self.protocol,
        }
        if self.protocol == "classic":
            conf.update({"session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                         "max.poll.interval.ms": MAX_POLL_INTERVAL_MS})
        conf.update(self.extra)
        return conf

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException

        c = Consumer(self.config())
        try:
            c.subscribe([self.topic])
            while not self.stop_flag.is_set():
                msgs = c.consume(num_messages=500, timeout=0.2)
                now = time.monotonic()
                recs = []
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._AUTO_OFFSET_RESET or err.fatal():
                            raise KafkaException(err)
                        self.commit_errors.append(f"consume error: {err}")  # transient, logged only
                        continue
                    recs.append(Consumed(now, m.partition(), m.offset(), m.value()))
                self._add(recs)
                if recs and self.commit:
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as e:
                        self.commit_errors.append(repr(e))
                self._set_assigned(tp.partition for tp in c.assignment())
        finally:
            c.close()


class ConfluentConsumerProtocolMember(ConfluentMember):
    kind = "confluent-consumer"
    protocol = "consumer"


class _AioLoop:
    """One event loop in a thread of its own, hosting every aiokafka member of a group."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="aiokafka-loop")
        self.thread.start()

    def submit(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class AioKafkaMember(Member):
    kind = "aiokafka"

    def __init__(self, *args: Any, loop: _AioLoop, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.aio = loop

    def config(self) -> dict[str, Any]:
        return _python_client_config(self)

    def start(self) -> None:
        self.future = self.aio.submit(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import KafkaError

        try:
            c = AIOKafkaConsumer(**self.config())
            await c.start()
            try:
                c.subscribe([self.topic])
                while not self.stop_flag.is_set():
                    batch = await c.getmany(timeout_ms=200)
                    now = time.monotonic()
                    recs = [Consumed(now, tp.partition, m.offset, m.value) for tp, ms in batch.items() for m in ms]
                    self._add(recs)
                    if recs and self.commit:
                        try:
                            await c.commit()
                        except KafkaError as e:  # CommitFailedError / IllegalStateError mid-rebalance
                            self.commit_errors.append(repr(e))
                    self._set_assigned(tp.partition for tp in c.assignment())
            finally:
                await c.stop()
        except BaseException as e:  # noqa: BLE001 - surfaced by check()
            self.errors.append(e)
        finally:
            self.closed.set()

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_flag.set()
        self.future.result(timeout)


MEMBER_CLASSES: dict[str, type[Member]] = {
    "kafka-python": KafkaPythonMember,
    "aiokafka": AioKafkaMember,
    "confluent": ConfluentMember,
    "confluent-consumer": ConfluentConsumerProtocolMember,
}


class ConsumerGroup:
    """Members of one client kind in one group on one topic; a context manager that closes
    every member still running on exit."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, partitions: int, *,
                 auto_offset_reset: str = "earliest", commit: bool = True,
                 extra: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self.auto_offset_reset = auto_offset_reset
        self.commit = commit
        self.extra = extra
        self.members: list[Member] = []
        self.stopped: list[Member] = []
        self._aio: _AioLoop | None = None

    def add(self, client_id: str | None = None, **kw: Any) -> Member:
        cls = MEMBER_CLASSES[self.kind]
        cid = client_id or f"{self.group}-m{len(self.members) + len(self.stopped)}"
        args: dict[str, Any] = {"auto_offset_reset": self.auto_offset_reset, "commit": self.commit,
                                "extra": self.extra, **kw}
        if cls is AioKafkaMember:
            if self._aio is None:
                self._aio = _AioLoop()
            args["loop"] = self._aio
        m = cls(self.bootstrap, self.group, self.topic, cid, **args)
        m.start()
        self.members.append(m)
        return m

    def remove(self, m: Member) -> None:
        m.stop()
        self.members.remove(m)
        self.stopped.append(m)

    def check(self) -> None:
        for m in self.members + self.stopped:
            m.check()

    def assignments(self) -> dict[str, frozenset[int]]:
        return {m.client_id: m.assigned for m in self.members}

    def describe_assignments(self) -> str:
        return ", ".join(f"{cid}={sorted(a)}" for cid, a in self.assignments().items())

    def balanced(self, sizes: list[int]) -> bool:
        """Every partition assigned to exactly one live member, with these sizes."""
        got = list(self.assignments().values())
        if sorted(len(a) for a in got) != sorted(sizes):
            return False
        union: set[int] = set()
        for a in got:
            if union & a:
                return False
            union |= a
        return union == set(range(self.partitions))

    def wait_balanced(self, sizes: list[int], timeout: float, settle: float = 1.5) -> dict[str, frozenset[int]]:
        """Wait until `balanced(sizes)` has held, unchanged, for `settle` seconds, while every
        member kept polling (so a rebalance in flight would have shown)."""
        deadline = time.monotonic() + timeout
        since: float | None = None
        snap: dict[str, frozenset[int]] = {}
        polls: dict[str, int] = {}
        while True:
            self.check()
            now = time.monotonic()
            cur = self.assignments()
            if self.balanced(sizes) and (since is None or cur == snap):
                if since is None:
                    since, snap = now, cur
                    polls = {m.client_id: m.n_polls() for m in self.members}
                elif now - since >= settle and all(m.n_polls() > polls[m.client_id] + 2 for m in self.members):
                    return cur
            else:
                since = None
            if now > deadline:
                raise AssertionError(
                    f"{self.kind} group {self.group}: no settled assignment of sizes {sorted(sizes)} over "
                    f"{self.partitions} partitions in {timeout}s; have {self.describe_assignments()}")
            time.sleep(0.05)

    def consumed(self) -> list[Consumed]:
        out: list[Consumed] = []
        for m in self.members + self.stopped:
            out.extend(m.consumed())
        return out

    def consumed_values(self) -> set[bytes]:
        return {r.value for r in self.consumed()}

    def first_offsets(self) -> dict[int, int]:
        """Partition -> offset of the first record any member received from it."""
        out: dict[int, int] = {}
        for r in sorted(self.consumed(), key=lambda r: r.at):
            out.setdefault(r.partition, r.offset)
        return out

    def next_offsets(self) -> dict[int, int]:
        """Partition -> one past the highest offset consumed from it."""
        out: dict[int, int] = {}
        for r in self.consumed():
            out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
        return out

    def close(self) -> None:
        errors = []
        for m in list(self.members):
            try:
                self.remove(m)
            except BaseException as e:  # noqa: BLE001 - close the rest first
                errors.append(e)
        if self._aio is not None:
            self._aio.close()
            self._aio = None
        if errors:
            raise errors[0]

    def __enter__(self) -> ConsumerGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def consume_reset_none(kind: str, bootstrap: str, group: str, topic: str, partitions: int,
                       timeout: float = 30.0) -> tuple[set[int], dict[int, int], list[str]]:
    """Subscribe with auto.offset.reset=none ("error" in librdkafka) and poll until every
    partition either raised the client's no-offset error or delivered a record.

    Returns (partitions reported without an offset, first offset received per partition,
    error descriptions)."""
    no_offset: set[int] = set()
    firsts: dict[int, int] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout

    def done() -> bool:
        return len(no_offset | set(firsts)) >= partitions or time.monotonic() > deadline

    if kind == "kafka-python":
        from kafka import KafkaConsumer
        from kafka.errors import NoOffsetForPartitionError

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=f"{group}-none",
                          auto_offset_reset="none", enable_auto_commit=False, fetch_max_wait_ms=200,
                          session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
        try:
            kp_subscribe(c, topic)
            while not done():
                try:
                    for tp, ms in c.poll(timeout_ms=200).items():
                        if ms:
                            firsts.setdefault(tp.partition, ms[0].offset)
                except NoOffsetForPartitionError as e:
                    errors.append(repr(e))
                    no_offset.update(tp.partition for tp in e.args[0])
                    # it raises on every poll until they have a position: give them one
                    # (never fetched: paused) so the other partitions can be consumed
                    for tp in e.args[0]:
                        c.seek(tp, 0)
                    c.pause(*e.args[0])
        finally:
            c.close(autocommit=False)
    elif kind == "aiokafka":
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import NoOffsetForPartitionError as AioNoOffset

        async def go() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=f"{group}-none",
                                 auto_offset_reset="none", enable_auto_commit=False, fetch_max_wait_ms=200,
                                 session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
            await c.start()
            try:
                c.subscribe([topic])
                while not done():
                    try:
                        for tp, ms in (await c.getmany(timeout_ms=200)).items():
                            if ms:
                                firsts.setdefault(tp.partition, ms[0].offset)
                    except AioNoOffset as e:
                        errors.append(repr(e))
                        arg = e.args[0]  # one TopicPartition (a namedtuple) or a collection of them
                        tps = [arg] if hasattr(arg, "partition") else list(arg)
                        no_offset.update(tp.partition for tp in tps)
                        for tp in tps:  # as for kafka-python: position them, never fetch them
                            c.seek(tp, 0)
                        c.pause(*tps)
            finally:
                await c.stop()

        asyncio.run(go())
    else:
        from confluent_kafka import Consumer, KafkaError

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-none",
                      "auto.offset.reset": "error", "enable.auto.commit": False, "fetch.wait.max.ms": 200,
                      "enable.partition.eof": False,
                      "group.protocol": "consumer" if kind == "confluent-consumer" else "classic"})
        try:
            c.subscribe([topic])
            while not done():
                for m in c.consume(num_messages=100, timeout=0.2):
                    err = m.error()
                    if err is None:
                        firsts.setdefault(m.partition(), m.offset())
                    elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                        errors.append(str(err))
                        no_offset.add(m.partition())
                    else:
                        errors.append(f"unexpected: {err}")
        finally:
            c.close()
    return no_offset, firsts, errors


# --------------------------------------------------------------------------- killable member

_KILLABLE_SCRIPT = r'''
import json, sys, time
kind, bootstrap, group, topic, client_id, session_ms, hb_ms = sys.argv[1:8]
session_ms, hb_ms = int(session_ms), int(hb_ms)

def out(**kw):
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()

if kind == "confluent":
    from confluent_kafka import Consumer, KafkaException
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": session_ms, "heartbeat.interval.ms": hb_ms,
                  "fetch.wait.max.ms": 200, "enable.partition.eof": False})
    c.subscribe([topic])
    last = None
    while True:
        msgs = c.consume(num_messages=50, timeout=0.2)
        recs = [[m.partition(), m.offset(), m.value().decode()] for m in msgs if m.error() is None]
        if recs:
            out(consumed=recs)
            nxt = {}
            for p, o, _ in recs:
                nxt[p] = o + 1
            out(committing=nxt)
            try:
                c.commit(asynchronous=False)
                out(committed=nxt)
            except KafkaException as e:
                out(commit_error=str(e))
        a = sorted(tp.partition for tp in c.assignment())
        if a != last:
            out(assigned=a)
            last = a
else:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=session_ms, heartbeat_interval_ms=hb_ms,
                      fetch_max_wait_ms=200, max_poll_records=50)
    c.subscribe([topic])
    c.topics()  # metadata in hand before the first join: see group_helpers.kp_subscribe
    last = None
    while True:
        batch = c.poll(timeout_ms=200)
        recs = [[tp.partition, m.offset, m.value.decode()] for tp, ms in batch.items() for m in ms]
        if recs:
            out(consumed=recs)
            nxt = {}
            for p, o, _ in recs:
                nxt[p] = o + 1
            out(committing=nxt)
            try:
                c.commit()
                out(committed=nxt)
            except KafkaError as e:
                out(commit_error=repr(e))
        a = sorted(tp.partition for tp in c.assignment())
        if a != last:
            out(assigned=a)
            last = a
'''


class KillableConsumer:
    """A group member in a child process (so it can be SIGKILLed); reads its JSON-lines report."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        assert kind in ("confluent", "kafka-python"), kind
        self.kind = kind
        self.client_id = client_id
        self.lock = threading.Lock()
        self.assigned: list[int] = []
        self.consumed: list[tuple[int, int, bytes]] = []
        self.committed: dict[int, int] = {}
        self.committing: dict[int, int] = {}
        self.other: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _KILLABLE_SCRIPT, kind, bootstrap, group, topic, client_id,
             str(SESSION_TIMEOUT_MS), str(HEARTBEAT_INTERVAL_MS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.err_reader = threading.Thread(target=self._read_err, daemon=True)
        self.err_reader.start()
        self.stderr: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                with self.lock:
                    self.other.append(line.decode(errors="replace"))
                continue
            with self.lock:
                if "assigned" in ev:
                    self.assigned = ev["assigned"]
                elif "consumed" in ev:
                    self.consumed.extend((p, o, v.encode()) for p, o, v in ev["consumed"])
                elif "committing" in ev:
                    self.committing.update({int(p): o for p, o in ev["committing"].items()})
                elif "committed" in ev:
                    self.committed.update({int(p): o for p, o in ev["committed"].items()})
                else:
                    self.other.append(line.decode(errors="replace"))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def snapshot(self) -> tuple[list[int], int, dict[int, int]]:
        with self.lock:
            return list(self.assigned), len(self.consumed), dict(self.committed)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def freeze(self) -> None:
        """SIGSTOP: it can no longer heartbeat or commit (a SIGKILL follows)."""
        self.proc.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(5)

    def describe(self) -> str:
        with self.lock:
            return (f"killable {self.kind} {self.client_id}: alive={self.alive()} assigned={self.assigned} "
                    f"consumed={len(self.consumed)} committed={self.committed} other={self.other[-3:]} "
                    f"stderr={''.join(self.stderr[-10:])}")


# --------------------------------------------------------------------------- admin


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    partitions: frozenset[tuple[str, int]]


@dataclass
class GroupInfo:
    group_id: str
    state: str  # Kafka's spelling: Stable, Empty, Dead, PreparingRebalance, CompletingRebalance, ...
    protocol_type: str | None  # DescribeGroups' protocol_type ("consumer"); None via confluent
    group_type: str | None = None  # confluent only: "classic" | "consumer" (KIP-848)
    members: list[MemberInfo] = field(default_factory=list)
    error: str | None = None


def _decode_assignment_kp(a: Any) -> frozenset[tuple[str, int]]:
    if not a:
        return frozenset()
    out = set()
    # kafka-python 3: ConsumerProtocolAssignment with assigned_partitions [(topic, [partitions])]
    parts = getattr(a, "assigned_partitions", None)
    if parts is None and isinstance(a, dict):
        parts = a.get("assigned_partitions")
    for item in parts or []:
        if isinstance(item, dict):
            topic, ps = item["topic"], item["partitions"]
        elif hasattr(item, "topic"):
            topic, ps = item.topic, item.partitions
        else:
            topic, ps = item
        out.update((topic, int(p)) for p in ps)
    return frozenset(out)


def _kp_admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-group-admin-kp",
                            request_timeout_ms=30000)


def _ck_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "client.id": "compat-group-admin-ck"})


def _aio_admin_call(bootstrap: str, fn: Callable[[Any], Any]) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    async def go() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="compat-group-admin-aio",
                                    request_timeout_ms=30000)
        await admin.start()
        try:
            return await fn(admin)
        finally:
            await admin.close()

    return asyncio.run(go())


_CK_STATES = {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead", "PREPARING_REBALANCING": "PreparingRebalance",
              "COMPLETING_REBALANCING": "CompletingRebalance", "UNKNOWN": "Unknown"}


def describe_group(client: str, bootstrap: str, group: str) -> GroupInfo:
    """DescribeGroups (or, for confluent on a KIP-848 group, ConsumerGroupDescribe) via `client`'s admin API."""
    if client == "kafka-python":
        admin = _kp_admin(bootstrap)
        try:
            res = admin.describe_groups([group])[group]
        finally:
            admin.close()
        members = [MemberInfo(m["member_id"], m["client_id"], m["client_host"],
                              _decode_assignment_kp(m.get("member_assignment")))
                   for m in res.get("members", [])]
        return GroupInfo(res["group_id"], res["group_state"], res.get("protocol_type"), None, members,
                         res.get("error"))
    if client == "aiokafka":
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

        async def go(admin: Any) -> Any:
            return await admin.describe_consumer_groups([group])

        (resp,) = _aio_admin_call(bootstrap, go)
        (g,) = [g for g in resp.groups if g[1] == group]
        error_code, group_id, state, protocol_type, _protocol, raw_members = g[:6]
        members = []
        for m in raw_members:
            member_id, client_id, host, _meta, assignment = m[:5]
            parts: set[tuple[str, int]] = set()
            if assignment:
                a = ConsumerProtocolMemberAssignment.decode(assignment)
                for topic, ps in a.assignment:
                    parts.update((topic, p) for p in ps)
            members.append(MemberInfo(member_id, client_id, host, frozenset(parts)))
        return GroupInfo(group_id, state, protocol_type, None, members,
                         None if error_code == 0 else f"error {error_code}")
    if client == "confluent":
        admin = _ck_admin(bootstrap)
        d = admin.describe_consumer_groups([group], request_timeout=30)[group].result(timeout=60)
        members = [MemberInfo(m.member_id, m.client_id, m.host,
                              frozenset((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])))
                   for m in d.members]
        gtype = getattr(d, "type", None)
        return GroupInfo(d.group_id, _CK_STATES.get(d.state.name, d.state.name), None,
                         None if gtype is None else gtype.name.lower(), members)
    raise ValueError(client)


def list_groups(client: str, bootstrap: str) -> dict[str, str | None]:
    """ListGroups via `client`'s admin API: group id -> state (None when the client's ListGroups
    version carries no state)."""
    if client == "kafka-python":
        admin = _kp_admin(bootstrap)
        try:
            res = admin.list_groups()
        finally:
            admin.close()
        return {g["group_id"]: g.get("group_state") for g in res}
    if client == "aiokafka":
        async def go(admin: Any) -> Any:
            return await admin.list_consumer_groups()

        res = _aio_admin_call(bootstrap, go)
        return {g[0]: None for g in res}
    if client == "confluent":
        admin = _ck_admin(bootstrap)
        r = admin.list_consumer_groups(request_timeout=30).result(timeout=60)
        assert not r.errors, r.errors
        return {g.group_id: _CK_STATES.get(g.state.name, g.state.name) for g in r.valid}
    raise ValueError(client)


def delete_groups(client: str, bootstrap: str, groups: list[str]) -> dict[str, str | None]:
    """DeleteGroups: group -> None when deleted, else the Kafka error name (e.g. NON_EMPTY_GROUP)."""
    if client == "kafka-python":
        from kafka.errors import for_code

        admin = _kp_admin(bootstrap)
        try:
            res = admin.delete_groups(groups)
        finally:
            admin.close()
        out: dict[str, str | None] = {}
        for g, r in res.items():
            if r == "OK":
                out[g] = None
            else:
                err = [c for c in range(-1, 130) if for_code(c).__name__ == r]
                out[g] = for_code(err[0]).message if err else r
        return out
    if client == "confluent":
        from confluent_kafka import KafkaException

        admin = _ck_admin(bootstrap)
        fs = admin.delete_consumer_groups(groups, request_timeout=30)
        out = {}
        for g, f in fs.items():
            try:
                f.result(timeout=60)
                out[g] = None
            except KafkaException as e:
                out[g] = e.args[0].name()
        return out
    raise ValueError(f"{client} has no DeleteGroups admin API")


def committed_offsets(client: str, bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """OffsetFetch for every partition the group committed, via `client`'s admin API."""
    if client == "kafka-python":
        admin = _kp_admin(bootstrap)
        try:
            res = admin.list_group_offsets({group: None})[group]
        finally:
            admin.close()
        return {(tp.topic, tp.partition): om.offset for tp, om in res.items() if om.offset >= 0}
    if client == "aiokafka":
        async def go(admin: Any) -> Any:
            return await admin.list_consumer_group_offsets(group)

        res = _aio_admin_call(bootstrap, go)
        return {(tp.topic, tp.partition): om.offset for tp, om in res.items() if om.offset >= 0}
    if client == "confluent":
        from confluent_kafka import ConsumerGroupTopicPartitions

        admin = _ck_admin(bootstrap)
        r = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                              request_timeout=30)[group].result(timeout=60)
        out = {}
        for tp in r.topic_partitions:
            assert tp.error is None, tp
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
        return out
    raise ValueError(client)


def _retriable(e: BaseException) -> bool:
    if getattr(e, "retriable", False) is True:  # kafka-python and aiokafka error classes
        return True
    err = e.args[0] if e.args else None
    return bool(getattr(err, "retriable", None) and err.retriable())  # confluent KafkaError


def committed_offsets_after_restart(client: str, bootstrap: str, group: str,
                                    timeout: float = 60.0) -> dict[tuple[str, int], int]:
    """`committed_offsets`, retrying the retriable errors (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, ...) a coordinator answers while it comes back up; the
    consumers retry those themselves, the admin clients hand them to the caller."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return committed_offsets(client, bootstrap, group)
        except Exception as e:  # noqa: BLE001 - only retriable ones are retried
            if not _retriable(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def commit_offsets(client: str, bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit these offsets for `group` as a standalone (assign, not subscribe) consumer."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                          client_id=f"{group}-committer")
        try:
            c.assign([TopicPartition(topic, p) for p in offsets])
            c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
        finally:
            c.close(autocommit=False)
        return
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                 client_id=f"{group}-committer")
            await c.start()
            try:
                c.assign([TopicPartition(topic, p) for p in offsets])
                await c.commit({TopicPartition(topic, p): o for p, o in offsets.items()})
            finally:
                await c.stop()

        asyncio.run(go())
        return
    if client == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "client.id": f"{group}-committer"})
        try:
            c.assign([TopicPartition(topic, p) for p in offsets])
            res = c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            assert all(tp.error is None for tp in res), res
        finally:
            c.close()
        return
    raise ValueError(client)


def consumer_heartbeat(conn: Any, body: dict[str, Any]) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat v1 (KIP-848) over a RawConn: ``body`` over the empty fields,
    retried while a freshly started Kafka still loads its group coordinator."""
    def beat() -> dict[str, Any]:
        return conn.request(68, 1, {
            "member_id": "", "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None, **body})

    return wait_until(beat, 60, 0.2, "the group coordinator", ok=lambda a: a["error_code"] not in (14, 15, 16))
