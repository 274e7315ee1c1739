"""A share group's membership (KIP-932's ShareGroupHeartbeat), as a clocked state machine,
pure (no I/O); issue 30, step 1.

Share groups have no reconciliation: partitions are not owned, only records are (a record is
locked to the member that acquired it, coordinator/share_partition.py), so a member takes
its new assignment on the heartbeat that brings it and nothing waits for a revocation. The
group epoch goes up when a member joins, leaves, changes what it subscribes to, or when a
subscribed topic's partition count changes; the target assignment is recomputed then, and a
member's epoch is the group epoch it last received its assignment at.

Group states (``ShareGroupState``; the values ShareGroupDescribe and ListGroups return),
changed only through ``ShareGroup._transition``, checked against ``GROUP_VALID_PREVIOUS``:

Empty — no members (a new group, or the last one left or expired). → Stable when a member
    joins; → Dead on DeleteGroups.
Stable — one or more members, each given its assignment on its next heartbeat. → Empty when
    the last member leaves or expires.
Dead — deleted (only when Empty); the coordinator forgets the group. No way out.

The assignor (Kafka's ``simple`` for share groups, homogeneous or not): per topic, the
members subscribed to it in member-id order; with no more members than partitions each
partition goes to one member (partition p to member p mod M), with more members each member
gets one partition (member m to partition m mod P), so partitions are shared and every
member has work.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import check

SESSION_TIMEOUT_MS = 45_000  # group.share.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 5_000  # group.share.heartbeat.interval.ms
MAX_SIZE = 200  # group.share.max.size
LEAVE_EPOCH = -1


class ShareGroupState(StrEnum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


GROUP_VALID_PREVIOUS: dict[ShareGroupState, frozenset[ShareGroupState]] = {
    ShareGroupState.EMPTY: frozenset({ShareGroupState.STABLE}),
    ShareGroupState.STABLE: frozenset({ShareGroupState.EMPTY}),
    ShareGroupState.DEAD: frozenset({ShareGroupState.EMPTY}),
}

Assignment = dict[str, list[int]]  # topic → partitions


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)
BY_DURATION = "by_duration:"


def reset_duration_ms(value: str) -> int | None:
    """The look-back of `share.auto.offset.reset=by_duration:D` (D an ISO-8601 duration as
    Java's Duration.parse reads it: PnDTnHnMn.nS, not negative) in ms; None for any other value
    or a malformed duration."""
    text = value.strip()
    if not text.lower().startswith(BY_DURATION):
        return None
    match = _DURATION.fullmatch(text[len(BY_DURATION):].strip())
    if match is None or not any(match.groups()) or text.endswith("T"):
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


@dataclass(frozen=True)
class ShareSettings:
    """One group's share configs as they apply now (its GROUP configs over the broker's defaults;
    broker/dynamic_configs/group_configs.py)."""

    auto_offset_reset: str = "latest"  # share.auto.offset.reset: latest | earliest | by_duration:D
    isolation_level: str = "read_uncommitted"  # share.isolation.level
    record_lock_duration_ms: int = 30_000  # share.record.lock.duration.ms
    delivery_count_limit: int = 5  # share.delivery.count.limit
    partition_max_record_locks: int = 2000  # share.partition.max.record.locks
    session_timeout_ms: int = 45_000  # share.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # share.heartbeat.interval.ms


@dataclass
class ShareMember:
    member_id: str
    subscribed: tuple[str, ...]
    epoch: int = 0
    rack: str | None = None
    client_id: str = ""
    client_host: str = ""
    last_seen_ms: int = 0
    assignment: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class HeartbeatAnswer:
    """ShareGroupHeartbeat's response fields (assignment None: unchanged, not sent)."""

    error: ErrorCode
    member_id: str | None = None
    epoch: int = 0
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    assignment: Assignment | None = None
    message: str | None = None


def assign(members: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    """The simple assignor (see the module docstring): member id → topic → partitions."""
    out: dict[str, Assignment] = {m: {} for m in members}
    for topic in sorted({t for subs in members.values() for t in subs}):
        count = partitions.get(topic, 0)
        subscribers = sorted(m for m, subs in members.items() if topic in subs)
        if count <= 0 or not subscribers:
            continue
        if len(subscribers) <= count:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(topic, []).append(p)
        else:
            for i, m in enumerate(subscribers):
                out[m][topic] = [i % count]
    return out


class ShareGroup:
    """One share group's members and assignment (see the module docstring)."""

    def __init__(self, group_id: str, now_ms: Callable[[], int], *, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, max_size: int = MAX_SIZE) -> None:
        self.group_id = group_id
        self.now_ms = now_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.state = ShareGroupState.EMPTY
        self.epoch = 0  # the group epoch
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self._partitions: dict[str, int] = {}  # what the target was computed from
        self._target: dict[str, Assignment] = {}

    def _transition(self, target: ShareGroupState) -> None:
        if target is not self.state:
            self.state = check("ShareGroup", GROUP_VALID_PREVIOUS, self.state, target)

    def _settle_state(self) -> None:
        self._transition(ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY)

    # -- events ------------------------------------------------------------------------------

    def heartbeat(self, member_id: str, member_epoch: int, subscribed: list[str] | None,
                  partitions: Mapping[str, int], *, rack: str | None = None, client_id: str = "",
                  client_host: str = "") -> HeartbeatAnswer:
        """A ShareGroupHeartbeat: join (epoch 0, with the topics it subscribes to), stay
        (its current epoch), or leave (-1). `partitions`: the partition count of each topic
        that exists now."""
        if self.state is ShareGroupState.DEAD:
            return HeartbeatAnswer(ErrorCode.GROUP_ID_NOT_FOUND, message="the group was deleted")
        if not member_id:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST)  # (Kafka: no message)
        if member_epoch == LEAVE_EPOCH:
            if member_id not in self.members:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            self.remove(member_id)
            return HeartbeatAnswer(ErrorCode.NONE, member_id, LEAVE_EPOCH, self.heartbeat_interval_ms)
        member = self.members.get(member_id)
        if member_epoch == 0:
            if member is None:
                if not subscribed:
                    return HeartbeatAnswer(ErrorCode.INVALID_REQUEST,
                                           message="SubscribedTopicNames must be set in first request.")
                if len(self.members) >= self.max_size:
                    return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                           message=f"The share group has reached its maximum capacity of "
                                                   f"{self.max_size} members.")
                member = self.members[member_id] = ShareMember(member_id, tuple(sorted(set(subscribed))))
                self.epoch += 1
            elif subscribed is not None:  # a member joining again keeps its id
                self._subscribe(member, subscribed)
            member.epoch = 0
        elif member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, member_id,
                                   message=f"Member {member_id} is not a member of share group {self.group_id}.")
        elif member_epoch != member.epoch:
            return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH, member_id,
                                   message=f"The share group member has a smaller member epoch ({member_epoch}) "
                                           f"than the one known by the group coordinator ({member.epoch}).")
        elif subscribed is not None:
            self._subscribe(member, subscribed)
        member.rack, member.client_id, member.client_host = rack, client_id, client_host
        member.last_seen_ms = self.now_ms()
        self._settle_state()
        self._retarget(partitions)
        if member.epoch == self.assignment_epoch:
            return HeartbeatAnswer(ErrorCode.NONE, member_id, member.epoch, self.heartbeat_interval_ms)
        member.epoch = self.assignment_epoch
        member.assignment = self._target.get(member_id, {})
        return HeartbeatAnswer(ErrorCode.NONE, member_id, member.epoch, self.heartbeat_interval_ms,
                               {t: list(ps) for t, ps in member.assignment.items()})

    def _subscribe(self, member: ShareMember, subscribed: list[str]) -> None:
        topics = tuple(sorted(set(subscribed)))
        if topics != member.subscribed:
            member.subscribed = topics
            self.epoch += 1

    def _retarget(self, partitions: Mapping[str, int]) -> None:
        """Recompute the target when the group epoch moved or a subscribed topic changed."""
        subscribed = {t for m in self.members.values() for t in m.subscribed}
        seen = {t: partitions.get(t, 0) for t in subscribed}
        if seen != self._partitions:
            self._partitions = seen
            if self.assignment_epoch == self.epoch:
                self.epoch += 1  # topic metadata changed: a new epoch, as Kafka's
        if self.assignment_epoch != self.epoch:
            self._target = assign({m.member_id: m.subscribed for m in self.members.values()}, seen)
            self.assignment_epoch = self.epoch

    def remove(self, member_id: str) -> None:
        """A member left or its session expired: the group epoch moves on."""
        if self.members.pop(member_id, None) is not None:
            self.epoch += 1
            self._settle_state()

    def expire(self) -> list[str]:
        """Remove members whose heartbeats stopped for the session timeout; their ids (their
        acquired records go back: SharePartition.member_left)."""
        deadline = self.now_ms() - self.session_timeout_ms
        gone = [m for m, member in self.members.items() if member.last_seen_ms <= deadline]
        for member_id in gone:
            self.remove(member_id)
        return gone

    def delete(self) -> ErrorCode:
        """DeleteGroups: only an empty group goes."""
        if self.state is not ShareGroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        self._transition(ShareGroupState.DEAD)
        return ErrorCode.NONE
