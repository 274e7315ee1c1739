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

The assignor (Kafka's ``simple`` for share groups): balance first, then stickiness. With M
members and P partitions each partition is shared by S = ceil(M / P) members (1 while there
are enough partitions), and the S·P places go out as evenly as they can, so two members'
counts differ by at most one. A member keeps what it was last given, within its count and
the sharing; only the places left over move, to the members short of theirs.
Sticky because a member whose partition moves away cannot acknowledge what it fetched there
(the Java client fails those acknowledgements itself, NOT_LEADER_OR_FOLLOWER, and the records
come again when their locks run out): a join or a leave moves no partition that balance does
not need moved. When all members subscribe to the same topics the balance is over all their
partitions; otherwise it is per topic, among the members subscribed to it (Kafka's
homogeneous and heterogeneous builders).
"""

from __future__ import annotations

import heapq
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


def assign(members: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int],
           current: Mapping[str, Assignment] | None = None) -> dict[str, Assignment]:
    """The simple assignor (see the module docstring): member id → topic → partitions, from
    what each member subscribes to, each topic's partition count and what each was last
    given (`current`)."""
    current = current or {}
    topics = sorted({t for subs in members.values() for t in subs})
    if len(set(members.values())) <= 1:  # homogeneous: one balance over every partition
        pools = [(list(members), [(t, p) for t in topics for p in range(partitions.get(t, 0))])]
    else:
        pools = [([m for m, subs in members.items() if t in subs], [(t, p) for p in range(partitions.get(t, 0))])
                 for t in topics]
    out: dict[str, Assignment] = {m: {} for m in members}
    for takers, targets in pools:
        wanted = set(targets)
        held = {m: sorted((t, p) for t, ps in current.get(m, {}).items() for p in ps if (t, p) in wanted)
                for m in takers}
        for m, places in _share_out(targets, held).items():
            for t, p in places:
                out[m].setdefault(t, []).append(p)
    return {m: {t: sorted(ps) for t, ps in sorted(a.items())} for m, a in out.items()}


def _share_out(targets: list[tuple[str, int]], held: dict[str, list[tuple[str, int]]]
               ) -> dict[str, list[tuple[str, int]]]:
    """One balance (see the module docstring): `held` maps each member to the places it was
    last given here; the answer, each member's places now."""
    if not targets or not held:
        return {m: [] for m in held}
    sharing = -(-len(held) // len(targets))
    places = sharing * len(targets)
    # the counts differ by one at most; the larger ones go to the members holding more
    order = sorted(held, key=lambda m: (-len(held[m]), m))
    each, more = divmod(places, len(order))
    count = {m: each + (i < more) for i, m in enumerate(order)}
    keep = {m: held[m][:count[m]] for m in order}
    holders: dict[tuple[str, int], list[str]] = {tp: [] for tp in targets}
    for m in order:
        for tp in keep[m]:
            holders[tp].append(m)
    for tp, who in holders.items():  # shared by more than `sharing` (members left): the last ones give it up
        while len(who) > sharing:
            keep[who.pop()].remove(tp)
    # places short, partition by partition: to the member furthest below its count (first in
    # `order` on a tie) that does not hold the partition yet
    short = [(len(keep[m]) - count[m], i, m) for i, m in enumerate(order) if len(keep[m]) < count[m]]
    heapq.heapify(short)
    for tp in targets:
        skipped = []
        while len(holders[tp]) < sharing and short:
            gap, i, m = heapq.heappop(short)
            if m in holders[tp]:
                skipped.append((gap, i, m))
                continue
            keep[m].append(tp)
            holders[tp].append(m)
            if gap + 1 < 0:
                heapq.heappush(short, (gap + 1, i, m))
        for entry in skipped:
            heapq.heappush(short, entry)
    return keep


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
            # from what each member was last given: that is what it fetches from (a target not
            # yet heartbeated out moves nothing)
            self._target = assign({m.member_id: m.subscribed for m in self.members.values()}, seen,
                                  {m.member_id: m.assignment for m in self.members.values()})
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
