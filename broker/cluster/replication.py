"""Replicated partitions of shared Kafka topics (issue 16, step 2), as Apache Kafka replicates.

A topic created with a replication factor above 1 has, per partition, replicas on as many
brokers (``metadata.view``: replicas, leader, leader epoch, ISR in etcd). Rules:

Leader (this broker leads the partition):
- Each Fetch from a follower (``replica_id`` = one of the partition's replicas) at offset o
  records o as that follower's log end; the follower is caught up when o reaches the leader's
  log end (its caught-up time is then now). A follower's Fetch at another leader epoch than the
  leader's is FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer).
- The high watermark is the smallest log end of the leader and the ISR's members (and of a
  replica being added to the ISR, from the moment the leader asks: Kafka's maximal ISR); it never
  moves back, and it does not move while the ISR is smaller than ``min.insync.replicas``
  (KIP-966, on in Kafka 4.x: an acks=1 write to an under-replicated partition is read only
  once enough replicas have it). Consumers read below it (``Topic.replicated``); ``acks=all`` is answered when it
  passes the batch, or REQUEST_TIMED_OUT at the request's timeout; with fewer in-sync replicas
  than ``min.insync.replicas`` nothing is appended: NOT_ENOUGH_REPLICAS.
- Every ``replica_lag_time_max_ms`` / 2 (and at once when a follower catches up) the leader
  checks the ISR: a member not caught up for ``replica_lag_time_max_ms`` leaves it — at once
  when its fetch offset went back (a wiped or rolled-back log no longer holds what it had) —, a replica
  whose log end reached the high watermark joins it — each change a compare-and-swap of the
  topic's placement in etcd that holds only while the leader and its epoch are unchanged, so
  a deposed leader changes nothing (Kafka's AlterPartition to the controller).
- Batches appended by the leader carry its leader epoch (bytes 12..16 of the batch).
- A leader that has not reached etcd for a session timeout takes no writes
  (NOT_LEADER_OR_FOLLOWER): its lease has lapsed, another broker may lead the partition now.

Follower (this broker is a replica, another the leader):
- One fetch loop per leader broker. After each change of leader or epoch it first asks the
  leader OffsetForLeaderEpoch for the last epoch in its own log and truncates its tail beyond
  the smaller of the leader's end of that epoch and its own (KIP-101/279): what an old leader
  wrote and never got replicated is dropped, so no replica holds records the others lack.
- Then it fetches as a replica from its log end and appends the batches at the leader's
  offsets, with the leader's epochs and the producers' windows (``Wal.append_replica``); it
  keeps the leader's high watermark, which it starts from if it becomes the leader.

A SQL database's vnodes (its rows and meta entries carry no epoch and are not record
batches) replicate the same way, with three differences: the leader answers a follower's Fetch
with each entry as stored, wrapped in a record batch (``raw_batches``: base offset = its
version, last offset delta = its versions - 1, partition leader epoch = the epoch it was written
in, one record whose key is its kind and value its stored bytes, and as headers what the
leader knows of it beside — the open or aborted transaction its rows are in, the idempotent
producer's batch it ends —; transaction markers go as they are); the follower stores each as it
is and makes a meta entry's catalog change with it
(``tdengine.append_replicated``); and epochs come from the vnode's leader-epoch cache
(``Store.assign_epoch``: a leader assigns its epoch at its log end when it takes the vnode, a
follower when it appends an entry of a later epoch), which answers OffsetForLeaderEpoch.

A follower appends the leader's transaction markers as markers (``Wal.append_replica``): they
close the producer's transaction there too, so the aborted index and the last stable offset
are the leader's and read_committed reads the same after a failover.

Not yet: inter-broker security (followers connect to the leader's first listener as
PLAINTEXT clients).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from tmqgate.broker.cluster.peer import PeerConnection, PeerError
from tmqgate.broker.tdengine import append_replicated
from tmqgate.broker.topics import KAFKA, TSDB
from tmqgate.protocol.errors import ErrorCode, peer_error
from tmqgate.protocol.records import CorruptRecord, build_batch, decode_records
from tmqgate.storage import BatchMeta

if TYPE_CHECKING:
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.metadata.view import PartitionState
    from tmqgate.broker.runtime.waiters import DataNotifier
    from tmqgate.broker.topics import Topic, TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.replication")

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
FETCH_VERSION, OFFSETS_EPOCH_VERSION = 12, 4  # Fetch v12 still carries replica_id in its body
FETCH_MAX_BYTES = 8 << 20
_EPOCH_ERRORS = {int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH),
                 int(ErrorCode.UNKNOWN_LEADER_EPOCH), int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                 int(ErrorCode.LEADER_NOT_AVAILABLE)}
Key = tuple[str, int]  # (database, partition)
_KIND_DATA = 0  # storage.keys.KIND_DATA: a record batch as stored
_CONTROL = 0x20  # a batch's attributes bit 5 (byte 22): a transaction marker
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
#: a wrapped entry's marks (record headers): its rows' transaction (producer id, epoch), and the
#: idempotent producer's batch it ends (producer id, epoch, first and last sequence, first and
#: last version)
_TXN, _TXN_MARK = "txn", struct.Struct(">qh")
_PRODUCER, _PRODUCER_MARK = "producer", struct.Struct(">qhiiqq")


@dataclass
class _Follower:
    log_end: int
    caught_up: float  # monotonic seconds when its fetch last reached the leader's log end


@dataclass
class _Led:
    """A replicated partition this broker leads."""

    topic: str
    topic_id: bytes
    state: PartitionState
    followers: dict[int, _Follower] = field(default_factory=dict)
    #: replicas this leader is adding to the ISR in etcd right now: counted in the high
    #: watermark from the moment it asks (Kafka's maximal ISR), so nothing is acknowledged
    #: that a replica joining the ISR lacks
    joining: set[int] = field(default_factory=set)


@dataclass
class _Following:
    """A replicated partition this broker follows."""

    topic: str
    leader: int
    epoch: int
    truncate: bool = True  # ask OffsetForLeaderEpoch before fetching


class Replication:
    """See the module docstring. ``apply`` after every read of the placements."""

    serves_followers = True  # the role's (broker/runtime/replicas.py): a replica_id's Fetch is a follower's

    def __init__(self, node_id: int, store: Store, topics: TopicRegistry, membership: Membership,
                 notifier: DataNotifier, lag_time_max_ms: int, fetch_wait_max_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self._clock = clock  # seconds; a fake one in tests
        self._store = store
        self._topics = topics
        self._membership = membership
        self._notifier = notifier
        self.lag_s = lag_time_max_ms / 1000
        self.fetch_wait_ms = fetch_wait_max_ms
        self._hw = topics.replicated  # (db, partition) → high watermark, led partitions only
        self._led: dict[Key, _Led] = {}
        self._following: dict[Key, _Following] = {}
        self._leader_hw: dict[Key, int] = {}  # a follower's copy of its leader's high watermark
        self._waiters: dict[Key, list[tuple[int, asyncio.Future[None]]]] = {}
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._isr_due = asyncio.Event()
        self._isr_task: asyncio.Task[None] | None = None

    # ---- placements ----------------------------------------------------------------------

    def apply(self) -> None:
        """Take this broker's roles from the placements just read (on the event loop)."""
        led: dict[Key, _Led] = {}
        following: dict[Key, _Following] = {}
        now = self._clock()
        for name, placement in self._topics.placements.items():
            topic = self._topics.get(name)
            if topic is None or topic.kind not in (KAFKA, TSDB) or topic.topic_id != placement.topic_id:
                continue
            for p, state in enumerate(placement.partitions):
                if len(state.replicas) < 2 or self.node_id not in state.replicas or p >= topic.partitions:
                    continue
                key = (topic.db, p)
                if state.leader == self.node_id:
                    was = self._led.get(key)
                    if was is not None and was.state.epoch == state.epoch:
                        was.state = state
                        for f in state.replicas:  # a replica being added by a reassignment
                            if f != self.node_id and f not in was.followers:
                                was.followers[f] = _Follower(-1, now)
                        led[key] = was
                        continue
                    # A new term: followers start as caught up now (they get the lag time to
                    # show up), the high watermark from what this replica last heard.
                    log_end = self._store.next_version(topic.db, p)
                    if topic.kind == TSDB:  # its entries carry no epoch: the cache says where this term starts
                        self._store.assign_epoch(topic.db, p, state.epoch, log_end)
                    led[key] = _Led(name, placement.topic_id, state,
                                    {f: _Follower(-1, now) for f in state.replicas if f != self.node_id})
                    self._hw[key] = min(max(self._leader_hw.get(key, 0), self._hw.get(key, 0)), log_end)
                    log.info("replication: leading %s-%d at epoch %d (ISR %s, high watermark %d)",
                             name, p, state.epoch, list(state.isr), self._hw[key])
                elif state.leader >= 0:
                    was_f = self._following.get(key)
                    if was_f is not None and (was_f.leader, was_f.epoch) == (state.leader, state.epoch):
                        following[key] = was_f
                    else:
                        following[key] = _Following(name, state.leader, state.epoch)
        for key in set(self._led) - set(led):
            self._hw.pop(key, None)
            self._fail_waiters(key)
        self._led = led
        self._following = following
        for key in led:
            self._advance(key)
        for leader in {f.leader for f in following.values()}:
            task = self._fetchers.get(leader)
            if task is None or task.done():
                self._fetchers[leader] = asyncio.create_task(self._fetch_from(leader))
        if led and self._isr_task is None:
            self._isr_task = asyncio.create_task(self._check_isr_loop())

    def stop(self) -> None:
        for task in [*self._fetchers.values(), self._isr_task]:
            if task is not None:
                task.cancel()

    # ---- leader side ---------------------------------------------------------------------

    def led_state(self, topic: Topic, partition: int) -> PartitionState | None:
        """The partition's state when this broker leads it replicated, else None."""
        led = self._led.get((topic.db, partition))
        return None if led is None else led.state

    def leader_hint(self, topic: Topic, partition: int) -> tuple[int, int, tuple[str, int] | None] | None:
        """A shared partition's (leader, leader epoch, the leader's address when it is live),
        for answers that tell a client where the partition went (KIP-951); None for a
        partition of this broker alone."""
        state = self._topics.partition_state(topic, partition)
        if state is None:
            return None
        info = self._membership.view.brokers.get(state.leader)
        return state.leader, state.epoch, None if info is None else (info.host, info.port)

    def follower_fetched(self, topic: Topic, partition: int, replica: int, offset: int,
                         current_epoch: int) -> ErrorCode | None:
        """A follower's Fetch at ``offset`` (see the module docstring); its error, or None."""
        key = (topic.db, partition)
        led = self._led.get(key)
        if led is None or replica not in led.followers:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if current_epoch >= 0 and current_epoch != led.state.epoch:
            return (ErrorCode.FENCED_LEADER_EPOCH if current_epoch < led.state.epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH)
        follower = led.followers[replica]
        if offset < follower.log_end and replica in led.state.isr:
            # Its log went back (a wiped data dir, a lost unsynced tail, a truncation): it no
            # longer holds what it acknowledged, so it must not stay electable — out of the ISR
            # at once, back in when it has caught up again.
            follower.caught_up = float("-inf")
            self._isr_due.set()
        follower.log_end = offset
        if offset >= self._store.next_version(topic.db, partition):
            follower.caught_up = self._clock()
        if replica not in led.state.isr and offset >= self._hw.get(key, 0):
            self._isr_due.set()
        self._advance(key)
        return None

    def raw_batches(self, topic: Topic, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        """A follower's Fetch of a SQL database's vnode: the entries from ``offset`` as stored,
        each wrapped in a record batch (see the module docstring)."""
        entries = self._store.raw_entries(topic.db, partition, offset, max_bytes)
        if not entries:
            return []
        epochs = self._store.epochs(topic.db, partition)
        starts = [start for _, start in epochs]
        txn_rows, batch_ends = self._store.replica_marks(topic.db, partition)
        out = []
        for version, kind, value, count in entries:
            if kind == _KIND_DATA:  # a transaction marker: as it is
                out.append(value)
                continue
            headers = []
            if version in txn_rows:
                headers.append((_TXN, _TXN_MARK.pack(*txn_rows[version])))
            end = batch_ends.get(version + count - 1)
            if end is not None:
                pid, epoch, b = end
                headers.append((_PRODUCER, _PRODUCER_MARK.pack(pid, epoch, *b)))
            i = bisect.bisect_right(starts, version) - 1
            out.append(build_batch([(bytes([kind]), value, headers, 0)], base_offset=version,
                                   partition_leader_epoch=epochs[i][0] if i >= 0 else -1,
                                   last_offset_delta=count - 1))
        return out

    def appended(self, topic: Topic, partition: int) -> None:
        """The leader appended to a replicated partition (its high watermark may move when
        the ISR is this broker alone)."""
        if (topic.db, partition) in self._led:
            self._advance((topic.db, partition))

    def _advance(self, key: Key) -> None:
        led = self._led[key]
        topic = self._topics.get(led.topic)
        if topic is not None and len(led.state.isr) < int(topic.config("min.insync.replicas")):
            return  # KIP-966: no high watermark advance below min.insync.replicas (acks=1 writes wait)
        ends = [self._store.next_version(*key)]
        ends += [led.followers[f].log_end for f in set(led.state.isr) | led.joining if f in led.followers]
        hw = min(ends)
        if hw > self._hw.get(key, 0):
            self._hw[key] = hw
            waiters = self._waiters.get(key)
            if waiters:
                kept = []
                for offset, fut in waiters:
                    if offset <= hw:
                        if not fut.done():
                            fut.set_result(None)
                    else:
                        kept.append((offset, fut))
                self._waiters[key] = kept
            self._notifier.notify(*key)  # consumers waiting at the old high watermark

    def cut_off(self) -> bool:
        """This broker lost etcd for longer than its session: it takes no writes for the
        replicated partitions it leads (NOT_LEADER_OR_FOLLOWER) until it is back."""
        return self._membership.cut_off()

    def not_enough_replicas(self, topic: Topic, partition: int) -> bool:
        """acks=all: fewer in-sync replicas than the topic's min.insync.replicas."""
        led = self._led.get((topic.db, partition))
        return led is not None and len(led.state.isr) < int(topic.config("min.insync.replicas"))

    async def wait_replicated(self, topic: Topic, partition: int, end: int, timeout_s: float) -> bool:
        """Wait until the high watermark reaches ``end`` (the offset after the batch); False
        at the timeout or when this broker stops leading the partition."""
        key = (topic.db, partition)
        if key not in self._led:
            return False
        if self._hw.get(key, 0) >= end:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append((end, fut))
        try:
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except (TimeoutError, ConnectionAbortedError):
            kept = self._waiters.get(key)
            if kept is not None:  # a timed-out wait leaves nothing behind
                self._waiters[key] = [w for w in kept if w[1] is not fut]
            return False

    def _fail_waiters(self, key: Key) -> None:
        for _, fut in self._waiters.pop(key, []):
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("no longer the leader"))

    async def _check_isr_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lag_s / 2):
                    await self._isr_due.wait()
            self._isr_due.clear()
            try:
                await self._check_isr()
            except Exception:  # noqa: BLE001 - etcd unreachable: the next round tries again
                log.exception("replication: the ISR check failed")

    async def _check_isr(self) -> None:
        now = self._clock()
        for key, led in list(self._led.items()):
            state = led.state
            hw = self._hw.get(key, 0)
            isr = [r for r in state.replicas if r == self.node_id or (
                r in led.followers and (now - led.followers[r].caught_up <= self.lag_s if r in state.isr
                                        else led.followers[r].log_end >= hw))]
            if set(isr) != set(state.isr):
                led.joining = set(isr) - set(state.isr)
                try:
                    changed = await self._membership.alter_isr(led.topic, led.topic_id, key[1], state.epoch, isr)
                finally:
                    led.joining = set()
                log.info("replication: %s-%d ISR %s → %s%s", led.topic, key[1], list(state.isr), isr,
                         "" if changed else " refused (no longer the leader at this epoch)")

    # ---- follower side -------------------------------------------------------------------

    async def _fetch_from(self, leader: int) -> None:
        """The fetch loop of the partitions this broker follows from ``leader``."""
        conn: PeerConnection | None = None
        try:
            while True:
                mine = {k: f for k, f in self._following.items() if f.leader == leader}
                if not mine:
                    return
                info = self._membership.view.brokers.get(leader)
                if info is None:
                    await asyncio.sleep(0.2)
                    continue
                if conn is None or (conn.host, conn.port) != (info.host, info.port):
                    if conn is not None:
                        conn.close()
                    conn = PeerConnection(info.host, info.port, f"tmqgate-replica-{self.node_id}",
                                          self._membership.peer_security)
                try:
                    if any(f.truncate for f in mine.values()):
                        await self._truncate(conn, {k: f for k, f in mine.items() if f.truncate})
                    await self._fetch_once(conn, mine)
                except PeerError as exc:
                    log.debug("replication: fetching from %d: %s", leader, exc)
                    await asyncio.sleep(0.2)
        finally:
            if conn is not None:
                conn.close()
            if self._fetchers.get(leader) is asyncio.current_task():
                del self._fetchers[leader]

    def _append_raw(self, key: Key, batch: bytes) -> None:
        """A follower's append of one entry of a SQL database's vnode (see the module
        docstring); ValueError or CorruptRecord when it does not follow this log."""
        db, vnode = key
        if batch[22] & _CONTROL:  # a transaction marker, as a Kafka topic's
            epoch = _I32.unpack_from(batch, 12)[0]
            self._note_epoch(key, epoch, _I64.unpack_from(batch, 0)[0])
            self._store.append_replica(db, vnode, batch)
        else:
            entry = _unwrapped(batch)
            if entry.version != self._store.next_version(db, vnode):
                raise ValueError(f"replica append at {entry.version}, the log ends at "
                                 f"{self._store.next_version(db, vnode)}")
            self._note_epoch(key, entry.epoch, entry.version)
            append_replicated(self._store, self._topics.catalog, db, vnode, entry.version, entry.kind, entry.value,
                              entry.versions, txn_producer=entry.txn_producer, producer_batch=entry.producer_batch)
        self._notifier.notify(db, vnode)

    def _note_epoch(self, key: Key, epoch: int, version: int) -> None:
        if epoch >= 0:
            self._store.assign_epoch(key[0], key[1], epoch, version)  # kept only when later than the last

    def _last_epoch(self, key: Key) -> int:
        return self._store.epoch_end(key[0], key[1], 2**31 - 1)[0]

    async def _truncate(self, conn: PeerConnection, mine: dict[Key, _Following]) -> None:
        asks: dict[str, list[dict[str, Any]]] = {}
        by_name: dict[tuple[str, int], Key] = {}
        for key, f in mine.items():
            last = self._last_epoch(key)
            if last < 0 or self._store.next_version(*key) == 0:
                f.truncate = False  # nothing of its own to check
                continue
            asks.setdefault(f.topic, []).append(
                {"partition": key[1], "current_leader_epoch": f.epoch, "leader_epoch": last})
            by_name[(f.topic, key[1])] = key
        if not asks:
            return
        body = await conn.request(OFFSET_FOR_LEADER_EPOCH, OFFSETS_EPOCH_VERSION, {
            "replica_id": self.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in asks.items()]}, timeout=10)
        for t in body["topics"]:
            for p in t["partitions"]:
                found = by_name.get((t["topic"], p["partition"]))
                if found is None or found not in mine:
                    continue
                key = found
                if p["error_code"] != 0:
                    log.debug("replication: %s-%d: OffsetForLeaderEpoch answered %s (%d)", t["topic"], key[1],
                              peer_error(p["error_code"]).name, p["error_code"])
                    await self._membership.refresh()
                    continue
                log_end = self._store.next_version(*key)
                if p["end_offset"] < 0:
                    target = min(self._leader_hw.get(key, 0), log_end)
                else:
                    own_end = self._store.epoch_end(key[0], key[1], p["leader_epoch"])[1]
                    target = min(p["end_offset"], own_end if own_end >= 0 else log_end, log_end)
                if target < log_end:
                    log.warning("replication: %s-%d truncated from %d to %d (the leader's log at epoch %d)",
                                t["topic"], key[1], log_end, target, mine[key].epoch)
                    self._store.truncate(key[0], key[1], target)
                mine[key].truncate = False

    async def _fetch_once(self, conn: PeerConnection, mine: dict[Key, _Following]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for key, f in mine.items():
            if f.truncate:
                continue
            topics.setdefault(f.topic, []).append({
                "partition": key[1], "current_leader_epoch": f.epoch,
                "fetch_offset": self._store.next_version(*key), "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES})
        if not topics:
            return
        body = await conn.request(FETCH, FETCH_VERSION, {
            "replica_id": self.node_id, "max_wait_ms": self.fetch_wait_ms, "min_bytes": 1,
            "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}, timeout=self.fetch_wait_ms / 1000 + 10)
        stale = False
        for t in body.get("responses") or []:
            topic = self._topics.get(t["topic"])
            if topic is None:
                continue
            for p in t["partitions"]:
                key = (topic.db, p["partition_index"])
                following = mine.get(key)
                if following is None or self._following.get(key) is not following:
                    continue
                f = following
                code = p["error_code"]
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    f.truncate = True
                    continue
                if code in _EPOCH_ERRORS:
                    stale = True
                    continue
                if code != 0:
                    continue
                self._leader_hw[key] = p["high_watermark"]
                for batch in _batches(p.get("records") or b""):
                    try:
                        if topic.kind == TSDB:
                            self._append_raw(key, batch)
                        else:
                            self._store.append_replica(key[0], key[1], batch)
                    except (ValueError, CorruptRecord) as exc:  # not where this log ends: check with the leader
                        log.warning("replication: %s-%d: %s", f.topic, key[1], exc)
                        f.truncate = True
                        break
        if stale:
            await self._membership.refresh()
            await asyncio.sleep(0.1)


class _Wrapped(NamedTuple):
    """A wrapped entry of a SQL database's vnode (``Replication.raw_batches``)."""

    version: int
    epoch: int
    kind: int
    value: bytes
    versions: int
    txn_producer: tuple[int, int] | None  # the open or aborted transaction its rows are in
    producer_batch: tuple[int, int, BatchMeta] | None  # the idempotent producer's batch it ends


def _unwrapped(batch: bytes) -> _Wrapped:
    """The entry in a wrapped batch; CorruptRecord if it is not one."""
    records = decode_records(batch)
    if len(records) != 1:
        raise CorruptRecord("not a wrapped WAL entry")
    record = records[0]
    if record.key is None or len(record.key) != 1 or record.value is None:
        raise CorruptRecord("not a wrapped WAL entry")
    marks = dict(record.headers)
    txn_mark, producer_mark = marks.get(_TXN), marks.get(_PRODUCER)
    try:
        txn = None if txn_mark is None else _TXN_MARK.unpack(txn_mark)
        mark = None if producer_mark is None else _PRODUCER_MARK.unpack(producer_mark)
    except struct.error:
        raise CorruptRecord("a wrapped WAL entry's marks do not parse") from None
    return _Wrapped(_I64.unpack_from(batch, 0)[0], _I32.unpack_from(batch, 12)[0], record.key[0], bytes(record.value),
                    _I32.unpack_from(batch, 23)[0] + 1, txn,
                    None if mark is None else (mark[0], mark[1], BatchMeta(*mark[2:])))


def _batches(records: bytes | memoryview) -> list[bytes]:
    """The whole record batches in a Fetch answer's records (a cut-off last one is left)."""
    out = []
    data = bytes(records)
    pos = 0
    while pos + 12 <= len(data):
        size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if size < 61 or pos + size > len(data):
            break
        out.append(data[pos:pos + size])
        pos += size
    return out
