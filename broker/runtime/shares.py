"""Share groups on this broker (KIP-932; issue 30, step 2): the groups this broker coordinates,
the share-partitions of the partitions it leads, and the members' share sessions.

Why three parts: as in Kafka, a share group's membership lives with its coordinator (the
broker FindCoordinator names, which answers ShareGroupHeartbeat), while its records' states
live with each partition's leader (ShareFetch and ShareAcknowledge go there), so a record is
locked and settled where it is read. The machines are pure (coordinator/share_group.py,
coordinator/share_partition.py); this module holds them, keyed, with the clock and the group
configs they run with.

Rules:
- A share-partition (group, topic id, partition) is made by the first ShareFetch that names
  it; its start is the log start (`share.auto.offset.reset` earliest) or the high watermark
  (latest, Kafka's default) then.
- A share session is a member's on this broker (KIP-932's share sessions, like KIP-227's
  fetch sessions): epoch 0 opens it (an older one of the member is closed first), each later
  ShareFetch or ShareAcknowledge must bring the next epoch (INVALID_SHARE_SESSION_EPOCH, none:
  SHARE_SESSION_NOT_FOUND) and the session fetches from every partition it holds; -1 closes
  it. Closing a session, or its member leaving the group, gives back what the member held.
- At most `max_sessions` sessions (group.share.max.share.sessions): a new one past them is
  refused with SHARE_SESSION_LIMIT_REACHED, as Kafka's share session cache refuses it.
- A session unused for the share session timeout is closed as if its member had gone, and so
  is one whose connection closes (a killed consumer's records are not left to their locks).
- Durable: a share-partition's state (its start and state batches, `SharePartition.snapshot`)
  is kept by its persister (`SharePersister`, Kafka's persister) after every fetch that
  acquired from it and every acknowledgement, before the answer goes out; an acquired record
  is kept as its lock running out would leave it, so after a restart or a move nothing
  acknowledged comes again and no delivery is forgotten. One node keeps it in its store
  (storage/share_state.py, `StorePersister`); a cluster with the group's coordinator, where it
  is a group state key replicated with the group's (broker/cluster/share_state.py).
- A partition leader reads the state before it uses a share-partition that is not live here
  at the partition's current leader epoch (a broker that leads a partition again does not
  trust its old copy). AlterShareGroupOffsets and DeleteShareGroupOffsets, at the coordinator,
  write the state at the next state epoch (`set_start`); a leader's write of its older copy is
  then refused (FENCED_STATE_EPOCH) and the copy dropped, to be read again.
- The groups' ids are kept too (Empty after a restart, as Kafka lists them); memberships and
  sessions are not: members join again, as after a coordinator move.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tmqgate.coordinator.share_group import ShareGroup, ShareSettings
from tmqgate.coordinator.share_partition import RecordState, SharePartition, Snapshot, StateBatch
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage.model import StateNotReplicated
from tmqgate.storage.share_state import Stored

if TYPE_CHECKING:
    from tmqgate.broker.topics import Topic
    from tmqgate.storage import Store
    from tmqgate.storage.share_state import ShareStates

#: the first epoch of a share session, and the one that closes it
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must bring
    partitions: set[tuple[bytes, int]] = field(default_factory=set)  # (topic id, partition)
    last_used_ms: int = 0


PartitionKey = tuple[str, bytes, int]  # (group id, topic id, partition)


class SharePersister(Protocol):
    """Where share-partitions' states are kept (Kafka's persister): the store here
    (`StorePersister`), or on a cluster the group's coordinator (broker/cluster/share_state.py)."""

    @property
    def here(self) -> StorePersister: ...  # the store's, which the coordinator's APIs use

    async def read(self, key: PartitionKey) -> tuple[ErrorCode, Stored | None]: ...

    async def write(self, key: PartitionKey, state: Stored, fence: bool = True) -> ErrorCode: ...


class StorePersister:
    """The states in this broker's store: one node's, or (`replicated`) those of the groups a
    cluster broker coordinates, each write then waited on until the group's state partition's
    in-sync replicas have it. A write at an older state epoch than the kept one is fenced
    (FENCED_STATE_EPOCH), unless `fence` is off (the coordinator's own change)."""

    def __init__(self, states: ShareStates,
                 replicated: Callable[[str], Awaitable[ErrorCode | None]] | None = None) -> None:
        self._states = states
        self._replicated = replicated

    @property
    def here(self) -> StorePersister:
        return self

    async def read(self, key: PartitionKey) -> tuple[ErrorCode, Stored | None]:
        return ErrorCode.NONE, self._states.read(key)

    async def write(self, key: PartitionKey, state: Stored, fence: bool = True) -> ErrorCode:
        kept = self._states.read(key)
        if fence and kept is not None and kept.epoch > state.epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        try:
            self._states.write(key, state.start, state.batches, state.epoch)
        except StateNotReplicated:
            return ErrorCode.NOT_COORDINATOR
        if self._replicated is not None:
            return await self._replicated(key[0]) or ErrorCode.NONE
        return ErrorCode.NONE


class PartitionEnds(Protocol):
    """A partition's high watermark as its leader has it (DescribeShareGroupOffsets' lag, at the
    group's coordinator: Kafka asks the leaders): here, or on a cluster from the leader."""

    async def end(self, topic: Topic, index: int) -> int | None: ...  # None: no leader answers


class LocalEnds:
    """Every partition is led here."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def end(self, topic: Topic, index: int) -> int | None:
        return topic.high_watermark(self._store, index)


def _snapshot(stored: Stored) -> Snapshot:
    return Snapshot(stored.start, tuple(StateBatch(f, last, RecordState(st), n) for f, last, st, n in stored.batches))


class ShareRuntime:
    """The share groups, share-partitions and share sessions of this broker."""

    def __init__(self, now_ms: Callable[[], int], settings: Callable[[str], ShareSettings],
                 states: ShareStates | None = None, max_sessions: int = 2000,
                 persister: SharePersister | None = None) -> None:
        self.now_ms = now_ms
        self.max_sessions = max_sessions  # group.share.max.share.sessions
        self.settings = settings  # group id → its share configs now
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._states = states
        # /metrics (broker/ops/metrics.py, read at scrape): records settled by type, and the
        # requests that carried acknowledgements
        self.acknowledged: dict[str, int] = {}
        self.acknowledgements = 0
        #: where the share-partitions' states are kept: the store here, or on a cluster the
        #: group's coordinator (broker/cluster/share_state.py)
        self.persister: SharePersister | None = persister or (StorePersister(states) if states is not None else None)
        #: the leader epoch the live share-partition was read at, and its state epoch
        self._epochs: dict[PartitionKey, tuple[int, int]] = {}
        self._read: dict[PartitionKey, Stored | None] = {}  # read, made live on first use
        self._unsaved: set[PartitionKey] = set()  # made at share.auto.offset.reset, not kept yet
        self.sync_groups(lambda group_id: True)

    async def prepare(self, key: PartitionKey, leader_epoch: int, recheck: bool = False) -> ErrorCode:
        """Before the share-partition is used at the partition's `leader_epoch`: read its state
        if it is not live here, or was live under another leader epoch (this broker led the
        partition before; another leader may have changed it since) or was fenced. `recheck`
        (a session takes the partition in): read it anyway, and start again from it if the
        coordinator set its offsets meanwhile (a newer state epoch: the group was empty then)."""
        live = key in self.partitions and self._epochs.get(key, (None,))[0] == leader_epoch
        if live and not recheck:
            return ErrorCode.NONE
        if self.persister is None:
            if not live:
                self.partitions.pop(key, None)
                self._epochs[key] = (leader_epoch, 0)
            return ErrorCode.NONE
        before = self.partitions.get(key)
        code, stored = await self.persister.read(key)
        if code is not ErrorCode.NONE:
            return code
        after = self.partitions.get(key)
        if after is not None and after is not before and self._epochs.get(key, (None,))[0] == leader_epoch:
            return ErrorCode.NONE  # another request made it live as this one read: it may hold records now
        if live and (stored.epoch if stored is not None else 0) == self._epochs[key][1]:
            return ErrorCode.NONE  # still the state it holds
        self.partitions.pop(key, None)
        self._read[key] = stored
        self._epochs[key] = (leader_epoch, stored.epoch if stored is not None else 0)
        return ErrorCode.NONE

    async def save(self, key: PartitionKey) -> ErrorCode:
        """Write the share-partition's state (before the answer that changed it goes out); the
        error if it could not be kept (a fenced copy is dropped: the next use reads it again)."""
        sp = self.partitions.get(key)
        if sp is None or self.persister is None:
            return ErrorCode.NONE
        self._unsaved.discard(key)
        snap = sp.snapshot()
        leader_epoch, epoch = self._epochs.get(key, (-1, 0))
        code = await self.persister.write(key, Stored(snap.start, [
            (b.first, b.last, b.state.value, b.delivery_count) for b in snap.batches], epoch))
        if code is ErrorCode.FENCED_STATE_EPOCH:
            self.partitions.pop(key, None)
            self._epochs.pop(key, None)
        return code

    async def initialized(self, key: PartitionKey) -> ErrorCode:
        """Keep a share-partition just made (at share.auto.offset.reset) before it is used."""
        return await self.save(key) if key in self._unsaved else ErrorCode.NONE

    async def set_start(self, key: PartitionKey, start: int) -> ErrorCode:
        """AlterShareGroupOffsets (start >= 0) or DeleteShareGroupOffsets (-1: start again at
        share.auto.offset.reset), at the group's coordinator: written at the next state epoch,
        which fences the copy a partition leader holds (it reads the state again)."""
        self.partitions.pop(key, None)
        self._epochs.pop(key, None)
        self._read.pop(key, None)
        self._unsaved.discard(key)
        if self.persister is None:
            return ErrorCode.NONE
        code, stored = await self.persister.read(key)
        if code is not ErrorCode.NONE:
            return code
        return await self.persister.write(key, Stored(start, [], (stored.epoch if stored else 0) + 1), fence=False)

    # -- the coordinator's part ---------------------------------------------------------------

    def sync_groups(self, owns: Callable[[str], bool]) -> None:
        """The groups here are the kept ones this broker coordinates (`owns`): a kept group it
        took over is here, Empty until its members join; one it no longer coordinates is not
        (its new coordinator has it)."""
        for group_id in [g for g in self.groups if not owns(g)]:
            del self.groups[group_id]
        if self._states is not None:
            for group_id in self._states.groups():
                if group_id not in self.groups and owns(group_id):
                    self.groups[group_id] = self._new_group(group_id)

    def group(self, group_id: str, create: bool) -> ShareGroup | None:
        group = self.groups.get(group_id)
        if group is None and self._states is not None and self._states.has_group(group_id):
            group = self.groups[group_id] = self._new_group(group_id)  # kept, taken over: Empty
        if group is None and create:
            group = self.groups[group_id] = self._new_group(group_id)
            if self._states is not None:
                with contextlib.suppress(StateNotReplicated):  # no longer its coordinator: it has moved
                    self._states.add_group(group_id)
        if group is not None:
            s = self.settings(group_id)
            group.session_timeout_ms, group.heartbeat_interval_ms = s.session_timeout_ms, s.heartbeat_interval_ms
            for member in group.expire():
                self.member_gone(group_id, member)
        return group

    def _new_group(self, group_id: str) -> ShareGroup:
        s = self.settings(group_id)
        return ShareGroup(group_id, self.now_ms, session_timeout_ms=s.session_timeout_ms,
                          heartbeat_interval_ms=s.heartbeat_interval_ms)

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        code = group.delete()
        if code is ErrorCode.NONE:
            del self.groups[group_id]
            self.forget([k for k in self.keys() if k[0] == group_id])
            if self._states is not None:
                self._states.remove_group(group_id)  # (raises StateNotReplicated as forget does)
        return code

    def counted(self, kind: str, records: int) -> None:
        """`records` records acknowledged as `kind` (Accept, Release, Reject, Renew, Gap)."""
        self.acknowledged[kind] = self.acknowledged.get(kind, 0) + records

    def group_states(self) -> dict[str, int]:
        """How many share groups are in each state."""
        out: dict[str, int] = {}
        for group in self.groups.values():
            out[group.state.value] = out.get(group.state.value, 0) + 1
        return out

    def stored(self, group_id: str) -> dict[PartitionKey, Stored]:
        """The group's share-partitions' states as kept here (at its coordinator: every one
        of the group's; started again ones left out)."""
        if self._states is None:
            return {}
        return {k: v for k, v in self._states.of_group(group_id).items() if v.start >= 0}

    def keys(self) -> set[PartitionKey]:
        """Every share-partition this broker has, live or stored."""
        return {*self.partitions, *(self._states.load() if self._states is not None else ())}

    def forget(self, doomed: list[PartitionKey]) -> None:
        """Drop these share-partitions, here and in the store (a group deleted, a topic gone)."""
        for key in doomed:
            self.partitions.pop(key, None)
            self._epochs.pop(key, None)
            self._read.pop(key, None)
            self._unsaved.discard(key)
        if self._states is not None:
            self._states.delete(doomed)

    # -- the partition leader's part ----------------------------------------------------------

    def share_partition(self, group_id: str, topic_id: bytes, partition: int,
                        start: Callable[[str], int]) -> SharePartition:
        """The share-partition, made at `start(share.auto.offset.reset)` when new; its limits
        follow the group's configs as they are now."""
        s = self.settings(group_id)
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            stored = self._read.pop(key, None)
            if stored is not None and stored.start >= 0:
                sp = self.partitions[key] = SharePartition.restore(_snapshot(stored), self.now_ms)
            else:  # kept at once, as Kafka's InitializeShareGroupState (described from then on)
                sp = self.partitions[key] = SharePartition(start(s.auto_offset_reset), self.now_ms)
                self._unsaved.add(key)
        sp.lock_ms, sp.delivery_limit, sp.max_locks = (s.record_lock_duration_ms, s.delivery_count_limit,
                                                       s.partition_max_record_locks)
        return sp

    def session(self, group_id: str, member_id: str, epoch: int) -> tuple[ShareSession | None, ErrorCode]:
        """The member's session for a request at `epoch` (opening or closing it as the epoch
        says), or the error to answer."""
        self.expire_sessions()
        key = (group_id, member_id)
        current = self.sessions.get(key)
        if epoch == INITIAL_EPOCH:
            if current is not None:
                self.close(current)
            elif len(self.sessions) >= self.max_sessions:
                return None, ErrorCode.SHARE_SESSION_LIMIT_REACHED
            current = self.sessions[key] = ShareSession(group_id, member_id, 1)
        elif current is None:
            return None, ErrorCode.SHARE_SESSION_NOT_FOUND
        elif epoch == FINAL_EPOCH:
            del self.sessions[key]  # closed once the request's acknowledgements are applied
        elif epoch != current.epoch:
            return None, ErrorCode.INVALID_SHARE_SESSION_EPOCH
        else:
            current.epoch += 1
        current.last_used_ms = self.now_ms()
        return current, ErrorCode.NONE

    def connection_closed(self, session: ShareSession) -> None:
        """The connection the session was opened on closed (Kafka's share session cache
        listens for it): the session ends, and what its member held goes back at once — if it
        is still the member's session (not one opened again since)."""
        if self.sessions.get((session.group_id, session.member_id)) is session:
            self.close(session)

    def close(self, session: ShareSession) -> None:
        """The session ends: what its member holds in its partitions goes back."""
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]
        for key, sp in self.partitions.items():  # its partitions now, and those it forgot meanwhile
            if key[0] == session.group_id:
                sp.member_left(session.member_id)

    def member_gone(self, group_id: str, member_id: str) -> None:
        """A member left its group or was expired: its session here (if any) closes."""
        session = self.sessions.get((group_id, member_id))
        if session is not None:
            self.close(session)

    def expire_sessions(self) -> None:
        now = self.now_ms()
        for session in list(self.sessions.values()):
            if now - session.last_used_ms > self.settings(session.group_id).session_timeout_ms:
                self.close(session)
