"""The group coordinator: every group of this node, their committed offsets, and the clock.

A plain state machine: each event carries ``now_ms``; ``next_deadline()`` says when ``tick``
is next due (session expiry, rebalance and join timeouts). Committed offsets live in the
Store per (group, topic, partition) — TDengine's per-vnode progress, shared by a group and
independent across groups — and group metadata is persisted as JSON whenever a group changes
in a way a restart must see (generation, members and assignments, KIP-848 epochs and targets).

A write the disk refuses (``StorageIOError``: a full disk) changes nothing, in memory either.
Rules, as Apache Kafka's group coordinator keeps them (an append to ``__consumer_offsets``
that fails with KAFKA_STORAGE_ERROR reverts the coordinator's in-memory state to before the
operation and answers NOT_COORDINATOR, so the client looks the coordinator up again and retries;
``CoordinatorOperationExceptionHelper.handleOperationException`` and
``GroupMetadataManager.appendGroupMetadataErrorToResponseError``):

* every event that may change what is persisted (JoinGroup, SyncGroup, LeaveGroup,
  ConsumerGroupHeartbeat, a due timer) runs as one unit (``_event``), and the JoinGroup /
  SyncGroup answers it produces are held until the group is persisted; a classic Heartbeat
  changes only liveness and writes nothing;
* persisted: the held answers go out. Refused: the group is put back as it was — a classic
  group from a copy taken before the event (its parked members are not persisted), a KIP-848
  group from its stored metadata (all of it is persisted), a group the event made is forgotten
  again, so no half-member stays —, every held answer becomes NOT_COORDINATOR in its API's
  shape, the answered members' parked callbacks are cleared (they are no longer waiting), and
  the event's own answer is NOT_COORDINATOR (``Refused``);
* OffsetCommit, OffsetDelete and DeleteGroups write one WriteBatch each and touch memory only
  after it is written; a refused one answers NOT_COORDINATOR and leaves the offsets and the
  group as they were;
* a timer event (``tick``) that is refused is retried no sooner than ``RETRY_MS`` later.

Transactional offsets (TxnOffsetCommit, KIP-98/447; Kafka's ``OffsetMetadataManager``) are
pending per (group, producer id) until the transaction coordinator ends the transaction with
``complete_transaction``: a commit makes them the committed offsets (except a partition a later
plain OffsetCommit wrote: the most recent commit wins, as Kafka keeps it), an abort drops them.
Pending offsets are persisted (a restart keeps them), invisible to OffsetFetch, which answers
UNSTABLE_OFFSET_COMMIT for such a partition when asked ``require_stable``; deleting the group,
its offsets of a partition or a topic drops them too. The same rules for a refused write hold:
nothing changes in memory unless the WriteBatch is written.

On a cluster (issue 16, step 4) a broker coordinates only the groups of the group-state
partitions it leads (``owned``; None: every group, one node): ``load_partition`` when it
becomes a partition's leader (the store holds the partition's groups as the replicated log
says), ``unload_partition`` when it stops — the partition's groups leave memory, and the
JoinGroup / SyncGroup answers they held go out as NOT_COORDINATOR, so their members find the
new coordinator (Kafka's ``GroupMetadataManager`` loading and unloading a partition).

Rebalances are counted from the state changes each persisted event makes (``RebalanceStats``,
plain numbers the broker's metrics read at scrape time): one begins when a group enters
PreparingRebalance (classic) or Assigning/Reconciling (KIP-848) from a settled state, and is
complete when the group is Stable again, with its time from begin to Stable; one that ends in
Empty or Dead is counted as abandoned.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tmqgate.coordinator.classic import (
    ClassicConfig,
    ClassicGroup,
    ClassicGroupState,
    Reply,
    parse_assignment,
    parse_subscription,
)
from tmqgate.coordinator.consumer import (
    ConsumerConfig,
    ConsumerGroup,
    HeartbeatError,
    TopicAccess,
    TopicSource,
)
from tmqgate.protocol import clock
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GroupMember, group_metadata_key, group_metadata_value
from tmqgate.storage.model import StorageIOError

if TYPE_CHECKING:
    from tmqgate.storage import PendingOffset, Store

log = logging.getLogger("tmqgate.coordinator")

Group = ClassicGroup | ConsumerGroup
#: (topic, partition, offset, leader epoch, metadata) as OffsetCommit carries them.
OffsetEntry = tuple[str, int, int, int, str | None]

#: A group whose timer event the disk refused is tried again no sooner than this (ms).
RETRY_MS = 1000
#: What Kafka's coordinator answers when its log append fails with KAFKA_STORAGE_ERROR.
REFUSED = ErrorCode.NOT_COORDINATOR
#: A held JoinGroup / SyncGroup answer refused, in each API's shape (Kafka's
#: ``new JoinGroupResponseData().setErrorCode(...)``: no member id, generation -1).
REFUSED_ANSWER: dict[str, dict[str, Any]] = {
    "join": {"error_code": int(REFUSED), "member_id": "", "generation_id": -1, "leader": "", "members": [],
             "protocol_name": None, "protocol_type": None},
    "sync": {"error_code": int(REFUSED), "assignment": b"", "protocol_type": None, "protocol_name": None},
}


class TxnOffsetsGate(Protocol):
    """The transaction coordinator's check of a TxnOffsetCommit (part T2 wires it in the
    server as ``GroupCoordinator.txn_gate``): Kafka verifies the producer's transaction before
    the group sees the commit — INVALID_PRODUCER_ID_MAPPING for a producer id the transactional
    id does not have, INVALID_PRODUCER_EPOCH / PRODUCER_FENCED for a stale epoch,
    INVALID_TXN_STATE when AddOffsetsToTxn did not add the group to the ongoing transaction."""

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode: ...


class Refused(Exception):
    """The event's write was refused by the disk; the group is as it was before the event."""


@dataclass
class _Held:
    """A JoinGroup/SyncGroup answer callback: what it answers is held during an event."""

    coordinator: GroupCoordinator
    reply: Reply
    kind: str

    def __call__(self, result: dict[str, Any]) -> None:
        outbox = self.coordinator._outbox
        if outbox is None:
            self.reply(result)
        else:
            outbox.append((self, result))


@dataclass
class CoordinatorConfig:
    classic: ClassicConfig = field(default_factory=ClassicConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    offset_metadata_max_bytes: int = 4096
    #: A KIP-848 group's own session timeout / heartbeat interval (Kafka's GroupConfig, set by
    #: IncrementalAlterConfigs on the GROUP resource), by group id; absent: ``consumer``.
    consumer_overrides: dict[str, ConsumerConfig] = field(default_factory=dict)


def _classic_id() -> str:
    return str(uuid.uuid4())


def _consumer_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _clone(value: Any, depth: int) -> Any:
    """Copy dataclasses ``depth`` levels down and every dict, list and set on the way (what an
    event may change in place); anything else (enums, bytes, tuples, frozensets, callbacks,
    config, the topic source) is shared. Some 20x cheaper than ``copy.deepcopy``."""
    if isinstance(value, dict):
        return {k: _clone(v, depth) for k, v in value.items()}
    if isinstance(value, (list, set)):
        return type(value)(_clone(v, depth) for v in value)
    if depth > 0 and dataclasses.is_dataclass(value) and not isinstance(value, (type, _Held)):
        out = copy.copy(value)
        for name, v in vars(out).items():
            if name != "config":
                setattr(out, name, _clone(v, depth - 1))
        return out
    return value


_SETTLED = frozenset({"Empty", "Stable", "Dead"})


@dataclass
class RebalanceStats:
    """Rebalances since start per group protocol ("classic", "consumer"): completed (back to
    Stable), their total time in ms, abandoned (ended Empty or Dead); see the module docstring."""

    completed: dict[str, int] = field(default_factory=dict)
    total_ms: dict[str, int] = field(default_factory=dict)
    abandoned: dict[str, int] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)  # group id -> when its rebalance began (ms)

    def note(self, group_id: str, kind: str, before: str | None, after: str, now: int) -> None:
        """A persisted event took ``group_id`` (of protocol ``kind``) from ``before`` to ``after``."""
        if before == after:
            return
        if after not in _SETTLED:
            if before is None or before in _SETTLED:
                self.started[group_id] = now
            return
        began = self.started.pop(group_id, None)
        if began is None:
            return
        if after == "Stable":
            self.completed[kind] = self.completed.get(kind, 0) + 1
            self.total_ms[kind] = self.total_ms.get(kind, 0) + max(0, now - began)
        else:
            self.abandoned[kind] = self.abandoned.get(kind, 0) + 1


class GroupCoordinator:
    """All groups of this node. Not thread-safe; the runtime drives it from one event loop."""

    def __init__(self, store: Store, topics: TopicSource, config: CoordinatorConfig | None = None,
                 now_ms: int = 0, new_id: Callable[[], str] | None = None,
                 new_consumer_id: Callable[[], str] | None = None,
                 owned: set[int] | None = None, partition_of: Callable[[str], int] | None = None,
                 access: TopicAccess | None = None) -> None:
        self.store = store
        #: The authorizer's DESCRIBE filter of KIP-848 regex topics (None: no authorizer).
        self.access = access
        #: The group-state partitions this broker coordinates (None: all; see the module docstring).
        self.owned = owned
        self.partition_of = partition_of or (lambda group_id: 0)
        self.topics = topics
        self.config = config or CoordinatorConfig()
        self.new_id = new_id or _classic_id
        self.new_consumer_id = new_consumer_id or _consumer_id
        self.groups: dict[str, Group] = {}
        self._outbox: list[tuple[_Held, dict[str, Any]]] | None = None
        self._retry_at: dict[str, int] = {}  # group id -> no timer event before (ms): a refused write
        self.loading = True
        self._offset_groups: set[str] = set()
        self._topic_ids: dict[str, bytes] = {}
        #: group -> producer id -> (topic, partition) -> its pending transactional offset
        self._pending: dict[str, dict[int, dict[tuple[str, int], PendingOffset]]] = {}
        #: The transaction coordinator's check of TxnOffsetCommit (None: not checked).
        self.txn_gate: TxnOffsetsGate | None = None
        self.rebalances = RebalanceStats()
        self._logged: dict[str, str] = {}  # a classic group's last snapshot in the log (_group_record)
        self._load(now_ms, None if owned is None else (lambda group_id: False))
        self.loading = False

    # ---- loading and persistence -------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        """This broker coordinates the group (its partition is loaded here)."""
        return self.owned is None or self.partition_of(group_id) in self.owned

    def _load(self, now: int, wanted: Callable[[str], bool] | None = None) -> None:
        """The groups the store holds (those ``wanted`` says), into memory."""
        ok: Callable[[str], bool] = wanted or (lambda group_id: True)
        pending = {g: v for g, v in self.store.txn_offsets().items() if ok(g)}
        self._offset_groups |= {g for g in self.store.offset_groups() if ok(g)}
        self._pending.update(pending)
        self._offset_groups |= set(pending)  # Kafka: the replayed commit makes a "simple" group
        for group_id, raw in self.store.group_metadata().items():
            if ok(group_id):
                self._restore(group_id, raw, now)
        self._topic_ids = self._current_topics()

    def load_partition(self, partition: int, now: int) -> None:
        """This broker now leads the group-state partition: its groups, as stored, into memory."""
        assert self.owned is not None
        self.unload_partition(partition)
        self.owned.add(partition)
        self.loading = True
        try:
            self._load(now, lambda group_id: self.partition_of(group_id) == partition)
        finally:
            self.loading = False

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads the group-state partition: its groups leave memory; the
        answers their members wait for are NOT_COORDINATOR."""
        assert self.owned is not None
        self.owned.discard(partition)
        def ours(group_id: str) -> bool:
            return self.partition_of(group_id) == partition

        for group_id in [g for g in self.groups if ours(g)]:
            group = self.groups.pop(group_id)
            if isinstance(group, ClassicGroup):
                for member in group.members.values():
                    for callback in (member.join_reply, member.sync_reply):
                        if isinstance(callback, _Held):
                            callback(dict(REFUSED_ANSWER[callback.kind]))
                    member.join_reply = member.sync_reply = None
        for group_id in [g for g in self._offset_groups if ours(g)]:
            self._offset_groups.discard(group_id)
        for group_id in [g for g in self._pending if ours(g)]:
            del self._pending[group_id]
        for group_id in [g for g in self._retry_at if ours(g)]:
            del self._retry_at[group_id]
        for group_id in [g for g in self._logged if ours(g)]:
            del self._logged[group_id]

    def _restore(self, group_id: str, raw: bytes | None, now: int) -> None:
        """The group as its persisted metadata says (forgotten if there is none)."""
        self.groups.pop(group_id, None)
        if raw is None:
            return
        try:
            data = json.loads(raw)
            if data.get("type") == "consumer":
                self.groups[group_id] = ConsumerGroup.restore(group_id, data, self.consumer_config(group_id), self.topics,
                                                              self.new_consumer_id, now, self.access)
            else:
                self.groups[group_id] = ClassicGroup.restore(group_id, data, self.config.classic, self.new_id, now)
        except (ValueError, KeyError, TypeError):
            log.exception("group %s: unreadable metadata, dropped", group_id)

    def _persist(self, group: Group) -> None:
        if group.dirty:
            data = json.dumps(group.snapshot())
            record = self._group_record(group, data)
            self.store.put_group_metadata(group.group_id, data.encode(), record)
            if record is not None:
                self._logged[group.group_id] = data
            group.dirty = False

    def _group_record(self, group: Group, data: str) -> tuple[bytes, bytes] | None:
        """Kafka's GroupMetadata record of a classic group's change, for ``__consumer_offsets``:
        written when the first JoinGroup makes the group, when a generation's assignment is
        synced (Stable) and when a group that had members becomes empty; not again for the same snapshot (nor for KIP-848 groups, whose
        ConsumerGroup* records are not written)."""
        if not isinstance(group, ClassicGroup) or self._logged.get(group.group_id) == data:
            return None
        if group.state is ClassicGroupState.STABLE and group.members:
            members = [GroupMember(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                   m.session_timeout_ms, m.metadata(group.protocol_name), m.assignment)
                       for m in group.members.values()]
            protocol, leader = group.protocol_name, group.leader_id
        elif group.state is ClassicGroupState.EMPTY and group.generation > 0:
            members, protocol, leader = [], None, None
        elif (group.generation == 1 and group.state is ClassicGroupState.COMPLETING_REBALANCE
              and group.group_id not in self._logged):
            # the first join completed: Kafka wrote the group when that JoinGroup made it, empty
            # and of no protocol type yet (persisted here, at the group's first write)
            value = group_metadata_value("", 0, None, None, clock.now_ms(), [])
            return group_metadata_key(group.group_id), value
        else:
            return None
        value = group_metadata_value(group.protocol_type or "", group.generation, protocol, leader,
                                     clock.now_ms(), members)
        return group_metadata_key(group.group_id), value

    @contextmanager
    def _event(self, group_id: str, now: int, own: _Held | None = None) -> Iterator[None]:
        """One event on ``group_id``, persisted or undone (see the module docstring's rules):
        raises ``Refused`` when the disk refused its write. ``own`` is the event's own answer
        callback: refused, it is answered NOT_COORDINATOR even if the event had parked it.

        A classic group is copied before the event (its parked members are not in what is
        persisted); a KIP-848 group persists all it has, so a refused event restores it from
        its stored metadata and costs no copy when the write goes through."""
        before = self.groups.get(group_id)
        state_before = None if before is None else str(before.state)
        saved = _clone(before, 2) if isinstance(before, ClassicGroup) else None
        outer, self._outbox = self._outbox, []
        held = self._outbox
        try:
            yield
            group = self.groups.get(group_id)
            if group is not None:
                self._persist(group)
                self.rebalances.note(group_id, group.kind, state_before, str(group.state), now)
            elif before is not None and state_before is not None:  # the event removed the group
                self.rebalances.note(group_id, before.kind, state_before, "Dead", now)
        except StorageIOError as exc:
            self._outbox = outer
            if own is not None and all(callback is not own for callback, _ in held):
                held.append((own, {}))
            if group_id not in self._retry_at:
                log.warning("group %s: the disk refused the write, the group is as it was: %s", group_id, exc)
            if saved is not None:
                self.groups[group_id] = saved
                self._unpark(saved, {id(callback) for callback, _ in held})
            else:
                self._restore(group_id, self.store.get_group_metadata(group_id), now)
            for callback, _ in held:
                callback(dict(REFUSED_ANSWER[callback.kind]))
            raise Refused(str(exc)) from exc
        except BaseException:  # not the disk: what was answered goes out, the error goes on
            self._outbox = outer
            for callback, result in held:
                callback(result)
            raise
        self._outbox = outer
        self._retry_at.pop(group_id, None)
        for callback, result in held:
            callback(result)

    @staticmethod
    def _unpark(group: ClassicGroup, answered: set[int]) -> None:
        """Members whose parked JoinGroup/SyncGroup was answered (refused) wait no longer."""
        for member in group.members.values():
            if id(member.join_reply) in answered:
                member.join_reply = None
            if id(member.sync_reply) in answered:
                member.sync_reply = None

    def _current_topics(self) -> dict[str, bytes]:
        out = {}
        for name in self.topics.names():
            found = self.topics.lookup(name)
            if found is not None:
                out[name] = found[0]
        return out

    # ---- clock -------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        times = []
        for group_id, g in self.groups.items():
            t = g.next_deadline()
            if t is not None:
                times.append(max(t, self._retry_at.get(group_id, t)))
        return min(times) if times else None

    def tick(self, now: int) -> None:
        """Fire every deadline that has passed and react to topic changes."""
        self._check_topics()
        for group_id, group in list(self.groups.items()):
            if self._retry_at.get(group_id, now) > now:
                continue
            if isinstance(group, ClassicGroup):
                due = group.next_deadline()
                if due is None or due > now:
                    continue  # nothing due: a classic group's tick would do nothing (and cost a copy)
            try:
                with self._event(group_id, now):
                    group.tick(now)
            except Refused:
                if group_id in self.groups:
                    self._retry_at[group_id] = now + RETRY_MS

    def _check_topics(self) -> None:
        """A deleted (or deleted and re-created) topic loses its committed offsets, as in Kafka
        (a refused delete is tried again at the next tick)."""
        current = self._current_topics()
        gone = [name for name, tid in self._topic_ids.items() if current.get(name) != tid]
        try:
            for name in gone:
                for group_id in list(self._offset_groups):
                    self.store.delete_offsets(group_id, name)  # pending transactional ones too
                    self._drop_pending(group_id, {name: None})
        except StorageIOError as exc:
            log.warning("offsets of deleted topics %s not deleted yet: %s", gone, exc)
            return
        self._topic_ids = current

    # ---- classic protocol --------------------------------------------------------------

    def join_group(self, now: int, body: dict[str, Any], version: int, client_id: str, client_host: str,
                   reply: Reply) -> None:
        group_id = body.get("group_id") or ""
        if not group_id:
            reply({"error_code": int(ErrorCode.INVALID_GROUP_ID), "member_id": body.get("member_id") or "",
                   "generation_id": -1, "leader": "", "members": [], "protocol_name": None})
            return
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            if not group.is_empty():
                reply({"error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), "member_id": body.get("member_id") or "",
                       "generation_id": -1, "leader": "", "members": [], "protocol_name": None})
                return
            group = None
        held = _Held(self, reply, "join")
        try:
            with self._event(group_id, now, held):
                if group is None:
                    group = ClassicGroup(group_id, self.config.classic, self.new_id)
                    self.groups[group_id] = group
                group.join(now, body, version, client_id, client_host, held)
                if (group.is_empty() and not group.pending and group.generation == 0
                        and group.state is ClassicGroupState.EMPTY):
                    del self.groups[group_id]  # a refused join leaves nothing behind
        except Refused:
            pass  # answered NOT_COORDINATOR through ``held``

    def sync_group(self, now: int, body: dict[str, Any], reply: Reply) -> None:
        group = self.groups.get(body.get("group_id") or "")
        if not isinstance(group, ClassicGroup):
            reply({"error_code": int(ErrorCode.UNKNOWN_MEMBER_ID), "assignment": b""})
            return
        held = _Held(self, reply, "sync")
        try:
            with self._event(group.group_id, now, held):
                group.sync(now, body, held)
        except Refused:
            pass  # answered NOT_COORDINATOR through ``held``

    def heartbeat(self, now: int, group_id: str, member_id: str, instance_id: str | None,
                  generation: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID
        code = group.heartbeat(now, member_id, instance_id, generation)  # liveness only: nothing to persist
        return code

    def leave_group(self, now: int, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return ErrorCode.UNKNOWN_MEMBER_ID, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        try:
            with self._event(group_id, now):
                codes = [group.leave(now, mid, iid) for mid, iid in members]
        except Refused:
            return REFUSED, []  # Kafka: the top-level code, no member entries
        return ErrorCode.NONE, codes

    # ---- KIP-848 -----------------------------------------------------------------------

    def consumer_config(self, group_id: str) -> ConsumerConfig:
        """The KIP-848 settings of this group: its own (GroupConfig) or the broker's."""
        return self.config.consumer_overrides.get(group_id, self.config.consumer)

    def set_consumer_config(self, group_id: str, config: ConsumerConfig | None) -> None:
        """Give a group its own KIP-848 settings (None: the broker's again). As Kafka, they
        apply from the group's members' next heartbeats: the interval in the answer, the
        session deadline it sets."""
        if config is None:
            self.config.consumer_overrides.pop(group_id, None)
        else:
            self.config.consumer_overrides[group_id] = config
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            group.config = self.consumer_config(group_id)

    def consumer_heartbeat(self, now: int, body: dict[str, Any], client_id: str, client_host: str,
                           principal: str = "") -> dict[str, Any]:
        group_id = body.get("group_id") or ""
        interval = self.consumer_config(group_id).heartbeat_interval_ms
        try:
            if not group_id:
                raise HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
            group = self.groups.get(group_id)
            if isinstance(group, ClassicGroup):
                if not group.is_empty() or group.pending:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
                group = None
            if group is None and body["member_epoch"] != 0:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} not found.")
            refusal: HeartbeatError | None = None
            try:
                with self._event(group_id, now):
                    if group is None:
                        group = ConsumerGroup(group_id, self.consumer_config(group_id), self.topics, self.new_consumer_id,
                                              access=self.access)
                        self.groups[group_id] = group
                    try:
                        answer = group.heartbeat(now, body, client_id, client_host, principal)
                    except HeartbeatError as exc:  # what the group changed before refusing is kept
                        refusal = exc
            except Refused:
                # Kafka: handleOperationException's answer, the code alone (no message, no member).
                return {"error_code": int(REFUSED), "error_message": None, "member_id": None, "member_epoch": 0,
                        "heartbeat_interval_ms": 0, "assignment": None}
            if refusal is not None:
                raise refusal
            return answer
        except HeartbeatError as exc:
            return {"error_code": int(exc.code), "error_message": exc.message, "member_id": body.get("member_id"),
                    "member_epoch": body.get("member_epoch", -1), "heartbeat_interval_ms": interval,
                    "assignment": None}

    def consumer_describe(self, group_ids: Iterable[str]) -> list[dict[str, Any]]:
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if isinstance(group, ConsumerGroup):
                out.append(group.describe())
                continue
            message = f"Group {group_id} is not a consumer group." if group else f"Group {group_id} not found."
            out.append({"error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "error_message": message,
                        "group_id": group_id, "group_state": "", "members": [],
                        "authorized_operations": -2147483648})
        return out

    # ---- offsets -----------------------------------------------------------------------

    def commit_offsets(self, now: int, group_id: str, member_id: str, instance_id: str | None, generation: int,
                       version: int, offsets: list[OffsetEntry]) -> list[ErrorCode]:
        """Validate membership as Kafka does, then store; one error code per entry."""
        group = self.groups.get(group_id)
        if not group_id:
            code = ErrorCode.INVALID_GROUP_ID
        elif group is None:
            code = ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        elif isinstance(group, ConsumerGroup):
            code = group.commit_check(member_id, generation, version, [(t, p) for t, p, *_ in offsets])
        else:
            code = group.commit_check(member_id, instance_id, generation)
        if code is not ErrorCode.NONE:
            return [code] * len(offsets)
        codes: list[ErrorCode] = []
        good: list[OffsetEntry] = []
        limit = self.config.offset_metadata_max_bytes
        for entry in offsets:
            topic, partition, _, _, metadata = entry
            found = self.topics.lookup(topic)
            if found is None or not 0 <= partition < found[1]:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif metadata is not None and len(metadata.encode()) > limit:
                codes.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            else:
                codes.append(ErrorCode.NONE)
                good.append(entry)
        if good:
            pending = self._pending.get(group_id, {})
            touched = {(topic, partition) for topic, partition, *_ in good}
            supersede = [(pid, topic, partition) for pid, parts in pending.items()
                         for topic, partition in touched & parts.keys() if not parts[(topic, partition)].superseded]
            try:
                self.store.commit_offsets(group_id, good, supersede=supersede)
            except StorageIOError as exc:
                # Kafka: OffsetCommitRequest.getErrorResponse(NOT_COORDINATOR), every partition.
                log.warning("group %s: offset commit refused by the disk: %s", group_id, exc)
                return [REFUSED] * len(offsets)
            self._offset_groups.add(group_id)
            for pid, topic, partition in supersede:  # the most recent commit wins at the commit
                parts = pending[pid]
                parts[(topic, partition)] = parts[(topic, partition)]._replace(superseded=True)
        if isinstance(group, ClassicGroup) and member_id in group.members:
            group.members[member_id].last_heartbeat_ms = now  # a commit proves liveness, as in Kafka
        return codes

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False,
                      ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, int, int, str, ErrorCode]]]]]:
        """Committed offsets: (topic, [(partition, offset, leader epoch, metadata, error)]).

        A partition without a commit answers offset -1, so the client applies auto.offset.reset.
        ``require_stable`` (OffsetFetch v7+, KIP-447): a partition with pending transactional
        offsets answers UNSTABLE_OFFSET_COMMIT and offset -1 (the client retries); without it
        the last committed offset is answered. Asking for all topics lists the committed ones.
        """
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            code = group.fetch_check(member_id, member_epoch)
            if code is not ErrorCode.NONE:
                return code, []
        if group_id not in self._offset_groups:
            stored = {}
        else:
            stored = self.store.fetch_offsets(group_id, None if topics is None else [t for t, _ in topics])
        unstable = self._pending_partitions(group_id) if require_stable else set()
        out = []
        if topics is None:
            by_topic: dict[str, list[tuple[int, int, int, str, ErrorCode]]] = {}
            for (topic, partition), c in sorted(stored.items()):
                by_topic.setdefault(topic, []).append(
                    (partition, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT) if (topic, partition) in unstable
                    else (partition, c.offset, c.leader_epoch, c.metadata or "", ErrorCode.NONE))
            return ErrorCode.NONE, list(by_topic.items())
        for topic, partitions in topics:
            rows = []
            for p in partitions:
                found = stored.get((topic, p))
                if (topic, p) in unstable:
                    rows.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
                elif found:
                    rows.append((p, found.offset, found.leader_epoch, found.metadata or "", ErrorCode.NONE))
                else:
                    rows.append((p, -1, -1, "", ErrorCode.NONE))
            out.append((topic, rows))
        return ErrorCode.NONE, out

    # ---- transactional offsets -----------------------------------------------------------

    def _pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """(topic, partition)s of the group with a pending transactional offset."""
        out: set[tuple[str, int]] = set()
        for parts in self._pending.get(group_id, {}).values():
            out.update(parts)
        return out

    def pending_offsets(self, group_id: str) -> dict[int, dict[tuple[str, int], PendingOffset]]:
        """The group's pending transactional offsets per producer id (a copy)."""
        return {pid: dict(parts) for pid, parts in self._pending.get(group_id, {}).items()}

    def _drop_pending(self, group_id: str, topics: dict[str, set[int] | None] | None) -> None:
        """Forget pending offsets the store just deleted: all the group's (``topics`` None) or
        those of these topics (partitions None: the whole topic)."""
        producers = self._pending.get(group_id)
        if producers is None:
            return
        def dropped(topic: str, partition: int) -> bool:
            if topics is None:
                return True
            if topic not in topics:
                return False
            wanted = topics[topic]
            return wanted is None or partition in wanted

        for pid, parts in list(producers.items()):
            for tp in [tp for tp in parts if dropped(*tp)]:
                del parts[tp]
            if not parts:
                del producers[pid]
        if not producers:
            del self._pending[group_id]

    def _txn_commit_check(self, group: Group | None, member_id: str, instance_id: str | None,
                          generation: int, partitions: list[tuple[str, int]]) -> ErrorCode:
        """Kafka's validateTransactionalOffsetCommit: the group's validateOffsetCommit with
        isTransactional, a stale member epoch answered ILLEGAL_GENERATION."""
        if group is None:
            # No such group: a "simple" one is made (the commit's offsets keep it), unless the
            # producer claims a generation of it.
            return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if isinstance(group, ClassicGroup):
            if group.state is ClassicGroupState.DEAD:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            if generation < 0 and group.is_empty():
                return ErrorCode.NONE
            if generation >= 0 or member_id or instance_id is not None:
                return group.commit_check(member_id, instance_id, generation, transactional=True)
            return ErrorCode.NONE  # TxnOffsetCommit v0-v2 carries no member: accepted in any state
        if generation < 0 and group.is_empty():
            return ErrorCode.NONE
        if generation == -1 and not member_id and instance_id is None:
            return ErrorCode.NONE  # an old producer (v0-v2) without member information
        code = group.commit_check(member_id, generation, 9, partitions)  # KIP-1251's epochs, as OffsetCommit's
        return ErrorCode.ILLEGAL_GENERATION if code is ErrorCode.STALE_MEMBER_EPOCH else code

    def txn_offset_commit(self, now: int, group_id: str, transactional_id: str, producer_id: int,
                          producer_epoch: int, member_id: str, generation_id: int, group_instance_id: str | None,
                          topics: list[OffsetEntry], add_group: bool = False) -> list[ErrorCode]:
        """TxnOffsetCommit: one error code per entry, as Kafka answers it. ``add_group``
        (v5+, transaction version 2, KIP-890): the gate adds the group to the transaction
        itself instead of requiring AddOffsetsToTxn.

        Unknown topics and partitions are answered UNKNOWN_TOPIC_OR_PARTITION before anything
        else (KafkaApis checks the metadata first; a request with none left is not validated);
        the rest is validated against the group (``_txn_commit_check``), then stored pending for
        the producer's transaction — invisible to OffsetFetch until ``complete_transaction``.
        The transaction itself is the transaction coordinator's business: ``txn_gate``, when
        wired, is asked after the group id and before the group (Kafka's order)."""
        codes: list[ErrorCode] = []
        known: list[int] = []
        for i, (topic, partition, _, _, _) in enumerate(topics):
            found = self.topics.lookup(topic)
            if found is None or not 0 <= partition < found[1]:
                codes.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                codes.append(ErrorCode.NONE)
                known.append(i)
        if not known:
            return codes
        code = ErrorCode.NONE if group_id else ErrorCode.INVALID_GROUP_ID
        if code is ErrorCode.NONE and self.txn_gate is not None:
            # Kafka verifies the transaction before the group validates the commit.
            code = self.txn_gate.check_txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id,
                                                         add=add_group)
        if code is ErrorCode.NONE:
            code = self._txn_commit_check(self.groups.get(group_id), member_id, group_instance_id, generation_id,
                                          [(topics[i][0], topics[i][1]) for i in known])
        if code is not ErrorCode.NONE:
            for i in known:
                codes[i] = code
            return codes
        good: list[OffsetEntry] = []
        limit = self.config.offset_metadata_max_bytes
        for i in known:
            metadata = topics[i][4]
            if metadata is not None and len(metadata.encode()) > limit:
                codes[i] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                good.append(topics[i])
        if not good:
            return codes
        try:
            stored = self.store.commit_txn_offsets(group_id, producer_id, producer_epoch, good)
        except StorageIOError as exc:
            # Kafka: KAFKA_STORAGE_ERROR becomes NOT_COORDINATOR on every partition it validated.
            log.warning("group %s: transactional offset commit of %s refused by the disk: %s",
                        group_id, transactional_id, exc)
            validated = set(known)
            return [REFUSED if i in validated else c for i, c in enumerate(codes)]
        self._offset_groups.add(group_id)
        self._pending.setdefault(group_id, {}).setdefault(producer_id, {}).update(stored)
        group = self.groups.get(group_id)
        if isinstance(group, ClassicGroup) and member_id in group.members:
            group.members[member_id].last_heartbeat_ms = now
        return codes

    def pending_groups(self, producer_id: int, partition: int) -> list[str]:
        """The groups of a group-state partition holding offsets of the producer's transaction
        (on a cluster, a marker for that partition of ``__consumer_offsets`` ends them)."""
        return sorted(g for g, producers in self._pending.items()
                      if producer_id in producers and self.partition_of(g) == partition)

    def complete_transaction(self, group_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The producer's transaction ended (the transaction coordinator's marker for the
        group): commit makes its pending offsets for the group the committed offsets (a
        partition a later plain OffsetCommit wrote keeps that one), abort drops them. Nothing
        pending: nothing to do (Kafka ignores such a marker). Raises ``StorageIOError`` when
        the disk refused the write: nothing changed, the caller tries again later."""
        if producer_id not in self._pending.get(group_id, {}):
            return
        written = self.store.complete_txn_offsets(group_id, producer_id, commit)
        producers = self._pending[group_id]
        del producers[producer_id]
        if not producers:
            del self._pending[group_id]
        if written:
            self._offset_groups.add(group_id)
        log.debug("group %s: transaction of producer %d (epoch %d) %s, %d offsets committed", group_id,
                  producer_id, producer_epoch, "committed" if commit else "aborted", len(written))

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]],
                       ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, ErrorCode]]]]]:
        group = self.groups.get(group_id)
        if group is None and group_id not in self._offset_groups:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        subscribed: set[str] = set()
        if group is not None and not group.is_empty():
            found = group.subscribed_topics()
            if found is None:
                return ErrorCode.NON_EMPTY_GROUP, []
            subscribed = found
        out = []
        deleted = []
        for topic, partitions in topics:
            if topic in subscribed:
                out.append((topic, [(p, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for p in partitions]))
                continue
            deleted.append((topic, partitions))
            out.append((topic, [(p, ErrorCode.NONE) for p in partitions]))
        try:
            self.store.delete_partitions(group_id, deleted)  # pending transactional ones too
        except StorageIOError as exc:
            log.warning("group %s: offset delete refused by the disk: %s", group_id, exc)
            return REFUSED, []  # Kafka: the top-level code alone
        gone: dict[str, set[int] | None] = {}
        for topic, partitions in deleted:
            gone[topic] = set(partitions) | (gone.get(topic) or set())
        self._drop_pending(group_id, gone)
        return ErrorCode.NONE, out

    # ---- listing, describing, deleting -------------------------------------------------

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[dict[str, Any]]:
        wanted_states = {s.lower() for s in states or []}
        wanted_types = {t.lower() for t in types or []}
        out = []
        for group_id in sorted(set(self.groups) | self._offset_groups):
            group = self.groups.get(group_id)
            if group is None:
                entry = {"group_id": group_id, "protocol_type": "", "group_state": ClassicGroupState.EMPTY.value,
                         "group_type": "classic"}
            else:
                entry = {"group_id": group_id, "protocol_type": group.protocol_type or "",
                         "group_state": group.state.value, "group_type": group.kind}
            if wanted_states and entry["group_state"].lower() not in wanted_states:
                continue
            if wanted_types and entry["group_type"] not in wanted_types:
                continue
            out.append(entry)
        return out

    def describe_group(self, group_id: str, version: int) -> dict[str, Any]:
        group = self.groups.get(group_id)
        base = {"group_id": group_id, "error_code": 0, "error_message": None, "protocol_type": "",
                "protocol_data": "", "members": [], "authorized_operations": -2147483648}
        if group is None and group_id in self._offset_groups:
            return {**base, "group_state": ClassicGroupState.EMPTY.value}
        if not isinstance(group, ClassicGroup):
            if version >= 6:
                message = f"Group {group_id} is not a classic group." if group else f"Group {group_id} not found."
                return {**base, "group_state": ClassicGroupState.DEAD.value,
                        "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "error_message": message}
            return {**base, "group_state": ClassicGroupState.DEAD.value}
        stable = group.state is ClassicGroupState.STABLE
        return {
            **base, "group_state": group.state.value, "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                 "client_host": m.client_host,
                 "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                 "member_assignment": m.assignment if stable else b""}
                for m in group.members.values()
            ],
        }

    def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None and group_id not in self._offset_groups:
                out.append((group_id, ErrorCode.GROUP_ID_NOT_FOUND))
                continue
            if group is not None and (not group.is_empty() or getattr(group, "pending", None)):
                out.append((group_id, ErrorCode.NON_EMPTY_GROUP))
                continue
            try:
                # offsets and metadata, all or nothing; a classic group's tombstone in the log
                self.store.delete_group(group_id, [] if isinstance(group, ConsumerGroup)
                                        else [(group_metadata_key(group_id), None)])
            except StorageIOError as exc:
                log.warning("group %s: delete refused by the disk: %s", group_id, exc)
                out.append((group_id, REFUSED))  # the group stays as it was
                continue
            if group is not None:
                group.delete()
            self.groups.pop(group_id, None)
            self._retry_at.pop(group_id, None)
            self._logged.pop(group_id, None)
            self._offset_groups.discard(group_id)
            self._pending.pop(group_id, None)
            out.append((group_id, ErrorCode.NONE))
        return out

    def members(self) -> list[dict[str, Any]]:
        """Every live member of every group, for SHOW CONSUMERS / SHOW SUBSCRIPTIONS: group,
        member id, client id, state (TDengine's rebalancing or ready), subscribed topics, the
        current assignment {topic: [partitions]} and the coordinator-clock time it joined."""
        out = []
        for group_id, group in sorted(self.groups.items()):
            if isinstance(group, ClassicGroup):
                ready = group.state is ClassicGroupState.STABLE
                for m in group.members.values():
                    out.append({"group": group_id, "member_id": m.member_id, "client_id": m.client_id,
                                "host": m.client_host, "state": "ready" if ready else "rebalancing",
                                "topics": sorted(parse_subscription(m.metadata(group.protocol_name))),
                                "assignment": parse_assignment(m.assignment) if ready else {},
                                "joined_ms": m.joined_ms})
            else:
                for cm in group.members.values():
                    assignment: dict[str, list[int]] = {}
                    for topic, partition in sorted(cm.assigned):
                        assignment.setdefault(topic, []).append(partition)
                    settled = cm.member_epoch == group.assignment_epoch and not cm.revoking
                    out.append({"group": group_id, "member_id": cm.member_id, "client_id": cm.client_id,
                                "host": cm.client_host, "state": "ready" if settled else "rebalancing",
                                "topics": sorted(group.member_topics(cm)), "assignment": assignment,
                                "joined_ms": cm.joined_ms})
        return out

    def groups_subscribed_to(self, topic: str) -> set[str]:
        """Groups with live members subscribed to `topic` (DROP TOPIC refuses while any is)."""
        return {g for g, group in self.groups.items() if topic in (group.subscribed_topics() or set())}

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | self._offset_groups)
