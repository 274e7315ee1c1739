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
  is written to the store (storage/share_state.py) after every fetch that acquired from it and
  every acknowledgement, before the answer goes out, and read back at start; an acquired
  record is written as its lock running out would leave it, so after a restart nothing
  acknowledged comes again and no delivery is forgotten. The groups' ids are kept too (Empty
  after a restart, as Kafka lists them); memberships and sessions are not: members join
  again, as after a coordinator move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tmqgate.coordinator.share_group import ShareGroup, ShareSettings
from tmqgate.coordinator.share_partition import RecordState, SharePartition, Snapshot, StateBatch
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
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


class ShareRuntime:
    """The share groups, share-partitions and share sessions of this broker."""

    def __init__(self, now_ms: Callable[[], int], settings: Callable[[str], ShareSettings],
                 states: ShareStates | None = None, max_sessions: int = 2000) -> None:
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
        self._stored: dict[PartitionKey, Snapshot] = {}  # read at start, made live on first use
        if states is not None:
            for group_id in states.groups():  # Empty until members join again
                self.groups[group_id] = self._new_group(group_id)
            for key, (start, batches) in states.load().items():
                self._stored[key] = Snapshot(start, tuple(StateBatch(f, last, RecordState(st), n)
                                                          for f, last, st, n in batches))

    def save(self, key: PartitionKey) -> None:
        """Write the share-partition's state (before the answer that changed it goes out)."""
        sp = self.partitions.get(key)
        if sp is None or self._states is None:
            return
        snap = sp.snapshot()
        self._states.write(key, snap.start, [(b.first, b.last, b.state.value, b.delivery_count)
                                             for b in snap.batches])

    # -- the coordinator's part ---------------------------------------------------------------

    def group(self, group_id: str, create: bool) -> ShareGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = self._new_group(group_id)
            if self._states is not None:
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
            self.forget([k for k in {*self.partitions, *self._stored} if k[0] == group_id])
            if self._states is not None:
                self._states.remove_group(group_id)
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

    def keys(self) -> set[PartitionKey]:
        """Every share-partition this broker has, live or stored."""
        return {*self.partitions, *self._stored}

    def existing(self, group_id: str, topic_id: bytes, partition: int) -> SharePartition | None:
        """The share-partition if this broker has one (made live from the store if need be)."""
        key = (group_id, topic_id, partition)
        if key in self._stored and key not in self.partitions:
            self.partitions[key] = SharePartition.restore(self._stored.pop(key), self.now_ms)
        return self.partitions.get(key)

    def forget(self, doomed: list[PartitionKey]) -> None:
        """Drop these share-partitions, here and in the store."""
        for key in doomed:
            self.partitions.pop(key, None)
            self._stored.pop(key, None)
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
            stored = self._stored.pop(key, None)
            sp = self.partitions[key] = (SharePartition.restore(stored, self.now_ms) if stored is not None
                                         else SharePartition(start(s.auto_offset_reset), self.now_ms))
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
