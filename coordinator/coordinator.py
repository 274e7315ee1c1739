"""The group coordinator: every group of this node, their events, and the clock.

A plain state machine: each event carries ``now_ms``; ``next_deadline()`` says when ``tick``
is next due (session expiry, rebalance and join timeouts). Group metadata is persisted as JSON
whenever a group changes in a way a restart must see (generation, members and assignments,
KIP-848 epochs and targets). Callers reach the groups' offsets through ``offsets`` and the
admin queries through ``admin`` (``coordinator.offsets``, ``coordinator.admin``: their rules).

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
* a timer event (``tick``) that is refused is retried no sooner than ``RETRY_MS`` later.

On a cluster (issue 16, step 4) a broker coordinates only the groups of the group-state
partitions it leads (``owned``; None: every group, one node): ``load_partition`` when it
becomes a partition's leader (the store holds the partition's groups and offsets as the
replicated log says), ``unload_partition`` when it stops — the partition's groups and their
offsets leave memory, and the JoinGroup / SyncGroup answers they held go out as
NOT_COORDINATOR, so their members find the new coordinator (Kafka's ``GroupMetadataManager``
loading and unloading a partition).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmqgate.coordinator.admin import GroupAdmin
from tmqgate.coordinator.classic import ClassicConfig, ClassicGroup, ClassicGroupState, Reply
from tmqgate.coordinator.consumer import ConsumerConfig, ConsumerGroup, HeartbeatError
from tmqgate.coordinator.offsets import REFUSED, Group, GroupOffsets
from tmqgate.protocol import clock
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GroupMember, group_metadata_key, group_metadata_value
from tmqgate.storage.model import StorageIOError

if TYPE_CHECKING:
    from tmqgate.coordinator.consumer import TopicAccess, TopicSource
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.coordinator")

#: A group whose timer event the disk refused is tried again no sooner than this (ms).
RETRY_MS = 1000
#: A held JoinGroup / SyncGroup answer refused, in each API's shape (Kafka's
#: ``new JoinGroupResponseData().setErrorCode(...)``: no member id, generation -1).
REFUSED_ANSWER: dict[str, dict[str, Any]] = {
    "join": {"error_code": int(REFUSED), "member_id": "", "generation_id": -1, "leader": "", "members": [],
             "protocol_name": None, "protocol_type": None},
    "sync": {"error_code": int(REFUSED), "assignment": b"", "protocol_type": None, "protocol_name": None},
}


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
        #: The groups' committed and transactional offsets (OffsetCommit, OffsetFetch, ...).
        self.offsets = GroupOffsets(store, topics, self.groups, self.partition_of,
                                    self.config.offset_metadata_max_bytes)
        #: ListGroups, DescribeGroups, DeleteGroups and SQL's questions over the groups.
        self.admin = GroupAdmin(store, self.groups, self.offsets, self.forget)
        self.rebalances = RebalanceStats()
        self._logged: dict[str, str] = {}  # a classic group's last snapshot in the log (_group_record)
        self._load(now_ms, None if owned is None else (lambda group_id: False))

    # ---- loading and persistence -------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        """This broker coordinates the group (its partition is loaded here)."""
        return self.owned is None or self.partition_of(group_id) in self.owned

    def _load(self, now: int, wanted: Callable[[str], bool] | None = None) -> None:
        """The groups the store holds (those ``wanted`` says), into memory; meanwhile OffsetFetch
        answers COORDINATOR_LOAD_IN_PROGRESS."""
        ok: Callable[[str], bool] = wanted or (lambda group_id: True)
        self.offsets.loading = True
        try:
            self.offsets.load(ok)
            for group_id, raw in self.store.group_metadata().items():
                if ok(group_id):
                    self._restore(group_id, raw, now)
        finally:
            self.offsets.loading = False

    def load_partition(self, partition: int, now: int) -> None:
        """This broker now leads the group-state partition: its groups, as stored, into memory."""
        assert self.owned is not None
        self.unload_partition(partition)
        self.owned.add(partition)
        self._load(now, lambda group_id: self.partition_of(group_id) == partition)

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
        self.offsets.unload(ours)
        for group_id in [g for g in self._retry_at if ours(g)]:
            del self._retry_at[group_id]
        for group_id in [g for g in self._logged if ours(g)]:
            del self._logged[group_id]

    def forget(self, group_id: str) -> None:
        """The group is gone from the store (DeleteGroups): out of memory, with its offsets."""
        self.groups.pop(group_id, None)
        self._retry_at.pop(group_id, None)
        self._logged.pop(group_id, None)
        self.offsets.forget(group_id)

    def _restore(self, group_id: str, raw: bytes | None, now: int) -> None:
        """The group as its persisted metadata says (forgotten if there is none)."""
        self.groups.pop(group_id, None)
        if raw is None:
            return
        try:
            data = json.loads(raw)
            if data.get("type") == "consumer":
                self.groups[group_id] = ConsumerGroup.restore(group_id, data,
                                                              self.consumer_config(group_id), self.topics,
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
        synced (Stable) and when a group that had members becomes empty; not again for the same snapshot (nor for
        KIP-848 groups, whose ConsumerGroup* records are not written)."""
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
        self.offsets.check_topics()
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
                reply({"error_code": int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
                       "member_id": body.get("member_id") or "",
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
                        group = ConsumerGroup(group_id, self.consumer_config(group_id), self.topics,
                                              self.new_consumer_id,
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
