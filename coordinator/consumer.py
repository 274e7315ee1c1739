"""KIP-848 consumer groups: ConsumerGroupHeartbeat with server-side assignment, as a clocked state machine.

The shape is TDengine's mnode loop made incremental: a subscribe (epoch 0 heartbeat) puts the
member in the group and bumps the group epoch; the target assignment is recomputed at once by
the sticky even split (`assignor.assign`), so a new member learns its target on the very
heartbeat that joins. Reconciliation follows KIP-848: a member first gives up partitions
that left its target (it keeps its epoch until it stops reporting them), and a partition is
handed to its new owner only after the previous owner released it. Heartbeats keep members
alive; missing them for the session timeout (TDengine's 12 s) removes the member, as does
not revoking within the rebalance timeout.

Group states (``ConsumerGroupState``; the values are what ConsumerGroupDescribe and ListGroups
return). As in Kafka's ``ConsumerGroup.maybeUpdateGroupState`` the state follows from the
epochs: it is recomputed at the end of every event (heartbeat, tick, restore) and a change goes
through ``ConsumerGroup._transition``, checked against ``GROUP_VALID_PREVIOUS``:

Empty — no members. → any live state when a member joins (Stable or Reconciling at once, as the
    target is recomputed in the same heartbeat); → Dead on DeleteGroups.
Assigning — the group epoch is ahead of the assignment epoch: the target assignment is stale.
    The target is recomputed in the same event that bumps the epoch, so this is only seen
    when a joining heartbeat failed (unsupported assignor, bad regex) after adding its member;
    the next event recomputes it.
Reconciling — some member (not away on a static leave, epoch -2) is not at the assignment epoch
    or does not hold exactly its target yet: revocations and hand-overs are under way.
Stable — every member holds its target at the assignment epoch.
Dead — deleted (DeleteGroups, only when Empty); the coordinator forgets the group. No way out.
Between the four live states every move is possible (members join, leave, expire; topics
change; reconciliation ends), so the table allows all of them; only Dead is constrained.

Member states (``MemberState``, internal; Kafka's ``MemberState`` plus JOINING), the outcome
of the member's own last reconciliation; changed only by ``ConsumerGroup._set_member_state``,
checked against ``MEMBER_VALID_PREVIOUS``:

JOINING — joined (or rejoined with epoch 0: it starts over) and holds nothing yet.
    → Stable or UnreleasedPartitions on its next reconciliation; never UnrevokedPartitions
    (it holds nothing to revoke).
STABLE — holds its whole target at its member epoch (which may lag the assignment epoch until
    its next heartbeat reconciles it). → UnrevokedPartitions when its target lost partitions,
    → UnreleasedPartitions when it gained partitions others still hold, → JOINING on rejoin.
UNREVOKED_PARTITIONS — must stop reporting partitions that left its target; it keeps its old
    epoch and the revocation deadline (its rebalance timeout) runs. → Stable or
    UnreleasedPartitions once it reports them gone, → JOINING on rejoin; a miss of the
    revocation deadline removes the member.
UNRELEASED_PARTITIONS — at the assignment epoch, waiting for partitions of its target that
    other members still hold (it heartbeats every RECONCILE_HEARTBEAT_MS meanwhile).
    → Stable when they are released, → UnrevokedPartitions when a new target takes some of
    its partitions, → JOINING on rejoin.
A static leave (epoch -2) is an epoch, not a state: the member keeps its state and partitions
until it comes back (under a new member id it takes over the old one) or its session expires.
Removal (leave, session or revocation timeout) deletes the member; it has no state after that.

Regular expressions (``subscribed_topic_regex``) are resolved as Kafka 4's GroupMetadataManager
does (maybeUpdateRegularExpressions): a member's topics are its names plus what the group's
``resolved`` table says its regex matched — never the live topic list. A regex the group has
not resolved yet adds nothing: the heartbeat that brings it bumps no epoch and schedules a
resolution, which runs at the group's next tick (after the answer is out; Kafka runs it on its
executor); the resolution bumps the group epoch if the group's topics changed, and members get
the new target on their next heartbeat — by then the member asked for, and sees, the topics.
Topics created or deleted later are picked up by a re-resolution that a heartbeat schedules
when the topic list changed and REGEX_MIN_REFRESH_MS passed since the last one (Kafka's
REGEX_BATCH_REFRESH_MIN_INTERVAL_MS), or REGEX_REFRESH_INTERVAL_MS passed at all (Kafka's
group.consumer.regex.refresh.interval.ms default). Resolutions are not persisted: a restored
group resolves its regexes when it is restored. Patterns run on RE2 (``client_regex``), as
Kafka's on RE2/J: linear in the topic name whatever the pattern.

A regex resolves only to topics the member may DESCRIBE (Kafka 4.1, KAFKA-18813): with an
authorizer (``access``, the broker's; coordinator/ asks it through ``TopicAccess``), the
resolution table is keyed by (regex, the member's principal, its host), each key's matches
filtered by that principal's DESCRIBE. Kafka filters a group's resolution by the principal of
the heartbeat that triggered it and persists the result; here each member is filtered by its
own principal (persisted with the member, so a restored group resolves for the same
principals), so members of different principals sharing a regex each get what they may see.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Protocol

from tmqgate.coordinator.assignor import ASSIGNOR_NAMES, DEFAULT_ASSIGNOR, TopicPartition, assign
from tmqgate.coordinator.client_regex import InvalidRegex, compile_client_regex
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import check

log = logging.getLogger("tmqgate.coordinator")

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
#: While a member waits for partitions another member must release, it polls this often (ms).
RECONCILE_HEARTBEAT_MS = 200
#: Kafka's GroupMetadataManager.REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: topic changes re-resolve
#: the group's regexes at most this often.
REGEX_MIN_REFRESH_MS = 10_000
#: Kafka's group.consumer.regex.refresh.interval.ms default: re-resolve at least this often.
REGEX_REFRESH_INTERVAL_MS = 600_000



class ConsumerGroupState(StrEnum):
    """A KIP-848 group's state; the value is the name Kafka's APIs report."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = ConsumerGroupState.EMPTY
ASSIGNING = ConsumerGroupState.ASSIGNING
RECONCILING = ConsumerGroupState.RECONCILING
STABLE = ConsumerGroupState.STABLE
DEAD = ConsumerGroupState.DEAD

_LIVE = frozenset({EMPTY, ASSIGNING, RECONCILING, STABLE})

#: For each group state, the states it may be entered from (a change only; see the notes above).
GROUP_VALID_PREVIOUS: dict[ConsumerGroupState, frozenset[ConsumerGroupState]] = {
    **{state: _LIVE - {state} for state in _LIVE},
    DEAD: frozenset({EMPTY}),
}


class MemberState(Enum):
    """Where a KIP-848 member's reconciliation stands (internal; see the notes above)."""

    JOINING = "joining"
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


#: For each member state, the states it may be entered from (a change only).
MEMBER_VALID_PREVIOUS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.JOINING: frozenset({MemberState.STABLE, MemberState.UNREVOKED_PARTITIONS,
                                    MemberState.UNRELEASED_PARTITIONS}),
    MemberState.STABLE: frozenset({MemberState.JOINING, MemberState.UNREVOKED_PARTITIONS,
                                   MemberState.UNRELEASED_PARTITIONS}),
    MemberState.UNREVOKED_PARTITIONS: frozenset({MemberState.STABLE, MemberState.UNRELEASED_PARTITIONS}),
    MemberState.UNRELEASED_PARTITIONS: frozenset({MemberState.JOINING, MemberState.STABLE,
                                                  MemberState.UNREVOKED_PARTITIONS}),
}


class TopicSource(Protocol):
    """What the coordinator needs to know of topics: ids and partition counts."""

    def lookup(self, name: str) -> tuple[bytes, int] | None: ...

    def name_of(self, topic_id: bytes) -> str | None: ...

    def names(self) -> Iterable[str]: ...


class TopicAccess(Protocol):
    """The broker's authorizer as the coordinator needs it (KAFKA-18813)."""

    def describable(self, principal: str, host: str, topics: Iterable[str]) -> set[str]:
        """The topics among `topics` that `principal` connected from `host` (the member's
        client host as reported, "/1.2.3.4") may DESCRIBE."""
        ...


#: A key of a group's regex resolutions: (regex, principal, client host); the last two are ""
#: without an authorizer (the resolution is then shared by every member of that regex).
RegexKey = tuple[str, str, str]


@dataclass
class ConsumerConfig:
    session_timeout_ms: int = 12_000
    heartbeat_interval_ms: int = 1000


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    member_epoch: int = 0
    previous_epoch: int = -1
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    # the member epoch at which each partition it holds (assigned or revoking) became its own:
    # a commit with an older epoch is accepted for partitions held since (KIP-1251)
    assigned_at: dict[TopicPartition, int] = field(default_factory=dict)
    session_deadline: int = 0
    revocation_deadline: int | None = None
    last_sent: frozenset[TopicPartition] | None = None
    joined_ms: int = 0  # coordinator clock time of joining (SHOW CONSUMERS up time)
    state: MemberState = MemberState.JOINING  # changed only by ConsumerGroup._set_member_state
    principal: str = ""  # of the connection of its last heartbeat: what its regex may resolve to

    def topics(self, resolved: Mapping[RegexKey, frozenset[str]], key: RegexKey | None) -> set[str]:
        """Its topic names plus what its regex (resolution key `key`) resolved to (nothing
        while unresolved)."""
        out = set(self.subscribed_names)
        if key is not None:
            out |= resolved.get(key, frozenset())
        return out

    def held_since(self, tp: TopicPartition, epoch: int) -> bool:
        """Whether it has held `tp` since member epoch `epoch` or earlier (one it does not hold: no)."""
        at = self.assigned_at.get(tp)
        return at is not None and at <= epoch


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass
class ConsumerGroup:
    group_id: str
    config: ConsumerConfig
    topics: TopicSource
    new_id: Callable[[], str]
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    image: tuple[tuple[str, bytes, int], ...] | None = None
    resolved: dict[RegexKey, frozenset[str]] = field(default_factory=dict)  # regex key -> the topics it matched
    resolved_names: frozenset[str] | None = None  # the topic list the last resolution saw
    resolved_ms: int = 0  # when the last resolution ran
    resolve_at: int | None = None  # a resolution is scheduled (runs at the next tick)
    dirty: bool = False
    state: ConsumerGroupState = EMPTY  # changed only by _transition, at the end of each event
    access: TopicAccess | None = None  # the authorizer's DESCRIBE filter of regex topics (None: none)

    kind = "consumer"
    protocol_type = "consumer"

    # ---- states ------------------------------------------------------------------------

    def _transition(self, target: ConsumerGroupState) -> None:
        """The one place the group state changes (a no-change is not a transition)."""
        if target is not self.state:
            previous = self.state
            self.state = check(f"consumer group {self.group_id}", GROUP_VALID_PREVIOUS, self.state, target)
            if log.isEnabledFor(logging.INFO):
                assignment = ({mid: sorted(f"{t}-{p}" for t, p in tps) for mid, tps in sorted(self.target.items())}
                              if target is STABLE else None)
                log.info("group %s (consumer): %s -> %s, epoch %d, %d member(s) %s%s", self.group_id,
                         previous.value, target.value, self.group_epoch, len(self.members), sorted(self.members),
                         f", assignment {assignment}" if assignment is not None else "",
                         extra={"event": "group_state", "group": self.group_id, "protocol": "consumer",
                                "from_state": previous.value, "to_state": target.value,
                                "epoch": self.group_epoch, "members": sorted(self.members),
                                "assignment": assignment})

    def _settle(self) -> None:
        """Move to the state the epochs say (Kafka's maybeUpdateGroupState); ends every event."""
        if self.state is not DEAD:
            self._transition(self._epochs_state())

    def _epochs_state(self) -> ConsumerGroupState:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        for mid, m in self.members.items():
            if m.member_epoch == STATIC_LEAVE_EPOCH:
                continue
            if m.member_epoch != self.assignment_epoch or m.revoking or m.assigned != self.target.get(mid, set()):
                return RECONCILING
        return STABLE

    def _set_member_state(self, member: ConsumerMember, target: MemberState) -> None:
        """The one place a member's state changes (a no-change is not a transition)."""
        if target is not member.state:
            member.state = check(f"member {member.member_id} of consumer group {self.group_id}",
                                 MEMBER_VALID_PREVIOUS, member.state, target)

    def delete(self) -> None:
        """DeleteGroups on an empty group: it is Dead from now on."""
        self._transition(DEAD)

    # ---- queries -----------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members

    def regex_key(self, member: ConsumerMember) -> RegexKey | None:
        """The key of the member's regex in ``resolved`` (None: it has no regex)."""
        if not member.subscribed_regex:
            return None
        if self.access is None:
            return (member.subscribed_regex, "", "")
        return (member.subscribed_regex, member.principal, member.client_host)

    def member_topics(self, member: ConsumerMember) -> set[str]:
        """The member's topics: its names plus what its regex resolved to for it."""
        return member.topics(self.resolved, self.regex_key(member))

    def subscribed_topics(self) -> set[str]:
        out: set[str] = set()
        for m in self.members.values():
            out |= self.member_topics(m)
        return out

    def next_deadline(self) -> int | None:
        times = [m.session_deadline for m in self.members.values()]
        times += [m.revocation_deadline for m in self.members.values() if m.revocation_deadline is not None]
        if self.resolve_at is not None:
            times.append(self.resolve_at)
        return min(times) if times else None

    # ---- events ------------------------------------------------------------------------

    def heartbeat(self, now: int, body: dict[str, Any], client_id: str, client_host: str,
                  principal: str = "") -> dict[str, Any]:
        """One ConsumerGroupHeartbeat from `principal`; returns the response body (errors
        raise HeartbeatError)."""
        try:
            return self._heartbeat(now, body, client_id, client_host, principal)
        finally:
            self._settle()

    def _heartbeat(self, now: int, body: dict[str, Any], client_id: str, client_host: str,
                   principal: str) -> dict[str, Any]:
        member_id = body.get("member_id") or ""
        epoch = body["member_epoch"]
        instance_id = body.get("instance_id")
        owned = self._owned(body.get("topic_partitions"))
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now, member_id, instance_id, epoch)
        if epoch == 0:
            member = self._join(now, body, member_id, instance_id)
        else:
            known = self.members.get(member_id)
            if known is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {self.group_id}.")
            if instance_id is not None and self.static.get(instance_id, member_id) != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID)
            if epoch != known.member_epoch and not (
                    epoch == known.previous_epoch and owned is not None and owned <= known.assigned):
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                     f"The member epoch {epoch} is fenced; the current epoch is {known.member_epoch}.")
            member = known
        self._update(member, body, client_id, client_host, principal)
        self._maybe_schedule_resolution(now)
        self.refresh()
        self._reconcile(now, member, owned)
        member.session_deadline = now + self.config.session_timeout_ms
        full = epoch == 0 or (owned is not None and owned != member.assigned)
        response: dict[str, Any] = {
            "error_code": 0, "error_message": None, "member_id": member.member_id,
            "member_epoch": member.member_epoch, "heartbeat_interval_ms": self._interval(member),
            "assignment": None,
        }
        current = frozenset(member.assigned)
        if full or member.last_sent != current:
            member.last_sent = current
            response["assignment"] = {"topic_partitions": self._topic_partitions(current)}
        return response

    def commit_check(self, member_id: str, epoch: int, version: int,
                     partitions: Iterable[TopicPartition] = ()) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit (4.3, KIP-1251): the member's epoch commits
        any partition; an older one (OffsetCommit v9+) commits ``partitions`` only if the member
        holds each of them (assigned or revoking) since that epoch or before — a commit sent
        just before a heartbeat moved the member's epoch is not refused; a newer one is stale."""
        if epoch < 0 and not member_id and self.is_empty():
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch == member.member_epoch:
            return ErrorCode.NONE
        if version < 9:
            return ErrorCode.ILLEGAL_GENERATION
        if epoch < member.member_epoch and all(member.held_since(tp, epoch) for tp in partitions):
            return ErrorCode.NONE
        return ErrorCode.STALE_MEMBER_EPOCH

    def fetch_check(self, member_id: str | None, epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch, also accepting the member's previous epoch.

        A client builds OffsetFetch with the epoch it knows; when a heartbeat that moves its
        epoch is answered while that fetch is on the wire, the fetch arrives one epoch behind.
        The Java consumer (4.x) treats STALE_MEMBER_EPOCH on OffsetFetch as fatal for that call
        and logs an ERROR. Kafka sees this race rarely (5 s heartbeats, and it validates
        against the last committed state); at TDengine's 1 s heartbeats it shows when members
        leave one after another. A fetch is a read, so the epoch just replaced is accepted;
        commits stay exact (clients retry those with the new epoch)."""
        if member_id is None or epoch < 0:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != member.member_epoch and not (epoch > 0 and epoch == member.previous_epoch):
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def tick(self, now: int) -> None:
        for mid, m in list(self.members.items()):
            if m.session_deadline <= now or (m.revocation_deadline is not None and m.revocation_deadline <= now):
                self._remove(mid)
        if self.resolve_at is not None and self.resolve_at <= now:
            self.resolve_regexes(now)
        self.refresh()
        self._settle()

    def _maybe_schedule_resolution(self, now: int) -> None:
        """Kafka's maybeUpdateRegularExpressions, run on a heartbeat: schedule a resolution for
        a regex not resolved yet, or when the topic list changed and the last resolution is
        REGEX_MIN_REFRESH_MS old, or every REGEX_REFRESH_INTERVAL_MS."""
        if self.resolve_at is not None:
            return
        used = {k for m in self.members.values() if (k := self.regex_key(m)) is not None}
        if not used:
            if self.resolved:
                self.resolved = {}
            return
        age = now - self.resolved_ms
        if (used - self.resolved.keys()
                or (age > REGEX_MIN_REFRESH_MS and frozenset(self.topics.names()) != self.resolved_names)
                or age > REGEX_REFRESH_INTERVAL_MS):
            self.resolve_at = now

    def resolve_regexes(self, now: int, bump: bool = True) -> None:
        """Resolve every regex a member uses against the topic list (the scheduled resolution),
        each key's matches filtered by its principal's DESCRIBE; bumps the group epoch if that
        changes the group's topics (not on restore)."""
        before = self.subscribed_topics()
        names = frozenset(self.topics.names())
        used = {k for m in self.members.values() if (k := self.regex_key(m)) is not None}
        matched: dict[str, frozenset[str]] = {}
        for regex in {k[0] for k in used}:
            try:
                pattern = compile_client_regex(regex)
            except InvalidRegex as exc:  # stored before RE2 (Python's re took it): it matches nothing
                log.warning("group %s: regex %r is not valid (%s); it matches no topic", self.group_id, regex, exc)
                matched[regex] = frozenset()
                continue
            matched[regex] = frozenset(n for n in names if pattern.fullmatch(n))
        resolved = {}
        for key in used:
            regex, principal, host = key
            topics = matched[regex]
            if self.access is not None and topics:
                topics = frozenset(self.access.describable(principal, host, topics))
            resolved[key] = topics
        self.resolved, self.resolved_names, self.resolved_ms, self.resolve_at = resolved, names, now, None
        if bump and self.subscribed_topics() != before:
            self._bump()
        log.debug("group %s: resolved regexes %s", self.group_id, {k: sorted(t) for k, t in resolved.items()})

    def refresh(self) -> None:
        """Re-read the subscribed topics' metadata; a change (topic created, deleted, grown)
        bumps the group epoch; a bumped epoch recomputes the target assignment."""
        image = self._image()
        if image != self.image:
            self.image = image
            self.dirty = True
            if self.group_epoch == self.assignment_epoch and self.members:
                self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()

    # ---- internals ---------------------------------------------------------------------

    def _owned(self, topic_partitions: list[dict[str, Any]] | None) -> set[TopicPartition] | None:
        if topic_partitions is None:
            return None
        out: set[TopicPartition] = set()
        for tp in topic_partitions:
            name = self.topics.name_of(bytes(tp["topic_id"]))
            if name is not None:
                out.update((name, p) for p in tp["partitions"])
        return out

    def _join(self, now: int, body: dict[str, Any], member_id: str, instance_id: str | None) -> ConsumerMember:
        if body.get("subscribed_topic_names") is None and body.get("subscribed_topic_regex") is None:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                 "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if any(tp["partitions"] for tp in body.get("topic_partitions") or []):
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if not member_id:
            member_id = self.new_id()
        held = self.members.get(member_id)
        if held is not None and held.instance_id != instance_id:
            # Another live member's id: taking it over would orphan that member's static entry.
            raise HeartbeatError(ErrorCode.INVALID_REQUEST,
                                 f"Member id {member_id} is held by another member of the group.")
        if instance_id is not None and instance_id in self.static and self.static[instance_id] != member_id:
            old = self.members[self.static[instance_id]]
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"Static member {old.member_id} with instance id {instance_id} is not released.")
            # The static member is back under a new id: it takes over the old one's place and assignment.
            del self.members[old.member_id]
            old_id, old.member_id = old.member_id, member_id
            old.member_epoch = old.previous_epoch if old.previous_epoch >= 0 else self.assignment_epoch
            old.last_sent = None
            self.members[member_id] = old
            self.target[member_id] = self.target.pop(old_id, set())
            self.static[instance_id] = member_id
            self.dirty = True
            return old
        member = self.members.get(member_id)
        if member is None:
            member = ConsumerMember(member_id, instance_id=instance_id, session_deadline=now, joined_ms=now)
            self.members[member_id] = member
            if instance_id is not None:
                self.static[instance_id] = member_id
            self._bump()
        else:
            # A known member rejoining from epoch 0 starts over; its target stays its own.
            member.assigned, member.revoking, member.revocation_deadline = set(), set(), None
            member.assigned_at = {}
            member.previous_epoch, member.member_epoch, member.last_sent = member.member_epoch, 0, None
            self._set_member_state(member, MemberState.JOINING)
            self.dirty = True
        return member

    def _update(self, member: ConsumerMember, body: dict[str, Any], client_id: str, client_host: str,
                principal: str) -> None:
        names = body.get("subscribed_topic_names")
        regex = body.get("subscribed_topic_regex")
        assignor = body.get("server_assignor")
        if assignor is not None and assignor not in ASSIGNOR_NAMES:
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                                 f"Supported assignors: {', '.join(ASSIGNOR_NAMES)}.")
        if regex is not None:
            try:
                compile_client_regex(regex)
            except InvalidRegex as exc:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, str(exc)) from None
        if client_id != member.client_id or client_host != member.client_host or principal != member.principal:
            # A new principal or host is a new regex key: resolved again for it (until then its
            # regex adds nothing), so a member never keeps topics resolved for another principal.
            member.client_id, member.client_host, member.principal = client_id, client_host, principal
            self.dirty = True
        changed = False
        if names is not None and sorted(names) != sorted(member.subscribed_names):
            member.subscribed_names = list(names)
            changed = True
        if regex is not None and (regex or None) != member.subscribed_regex:
            # Kafka: the subscription changed now only if the old regex gave topics or the new
            # one is resolved already; an unresolved one waits for its resolution.
            old, member.subscribed_regex = member.subscribed_regex, regex or None
            changed = changed or old is not None or self.regex_key(member) in self.resolved
            self.dirty = True
        if assignor is not None:
            member.server_assignor = assignor
        timeout = body.get("rebalance_timeout_ms", -1)
        if timeout is not None and timeout > 0:
            member.rebalance_timeout_ms = timeout
        if body.get("rack_id") is not None:
            member.rack_id = body["rack_id"]
        if changed:
            self._bump()

    def _bump(self) -> None:
        if self.group_epoch == self.assignment_epoch:
            self.group_epoch += 1
        self.dirty = True

    def _leave(self, now: int, member_id: str, instance_id: str | None, epoch: int) -> dict[str, Any]:
        if instance_id is not None and instance_id in self.static:
            member_id = member_id or self.static[instance_id]
            if self.static[instance_id] != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID)
        member = self.members.get(member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {self.group_id}.")
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member leaving for a while keeps its partitions until its session expires.
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch = member.member_epoch
            member.member_epoch = STATIC_LEAVE_EPOCH
            # Kafka's resetAssignedPartitionsEpochsToZero: the member back under its instance id
            # commits what it keeps with any epoch it is given
            member.assigned_at = dict.fromkeys(member.assigned_at, 0)
            member.session_deadline = now + self.config.session_timeout_ms
            self.dirty = True
        else:
            self._remove(member_id)
        return {"error_code": 0, "error_message": None, "member_id": member_id, "member_epoch": epoch,
                "heartbeat_interval_ms": 0, "assignment": None}

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        self.target.pop(member_id, None)
        self._bump()
        self.refresh()

    def _image(self) -> tuple[tuple[str, bytes, int], ...]:
        out = []
        for name in sorted(self.subscribed_topics()):
            found = self.topics.lookup(name)
            if found is not None:
                out.append((name, found[0], found[1]))
        return tuple(out)

    def _compute_target(self) -> None:
        partitions = {name: n for name, _, n in (self.image or ())}
        subs = {mid: self.member_topics(m) for mid, m in self.members.items()}
        self.target = assign(list(self.members), subs, partitions, self.target)
        self.assignment_epoch = self.group_epoch
        self.dirty = True

    def _reconcile(self, now: int, member: ConsumerMember, owned: set[TopicPartition] | None) -> None:
        if member.revoking:
            if owned is None or owned & member.revoking:
                return  # still waiting for the member to give those up
            for tp in member.revoking:
                member.assigned_at.pop(tp, None)
            member.revoking = set()
            member.revocation_deadline = None
            self.dirty = True
        target = self.target.get(member.member_id, set())
        gone = member.assigned - target
        if gone:
            member.assigned -= gone
            member.revoking = gone
            member.revocation_deadline = now + member.rebalance_timeout_ms
            self._set_member_state(member, MemberState.UNREVOKED_PARTITIONS)
            self.dirty = True
            return
        if member.member_epoch != self.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, self.assignment_epoch
            self.dirty = True
        held: set[TopicPartition] = set()
        for other in self.members.values():
            if other is not member:
                held |= other.assigned | other.revoking
        free = (target - member.assigned) - held
        if free:
            member.assigned |= free
            member.assigned_at.update(dict.fromkeys(free, member.member_epoch))
            self.dirty = True
        self._set_member_state(member, MemberState.STABLE if member.assigned == target
                               else MemberState.UNRELEASED_PARTITIONS)

    def _interval(self, member: ConsumerMember) -> int:
        target = self.target.get(member.member_id, set())
        if member.assigned != target or member.revoking:
            return min(self.config.heartbeat_interval_ms, RECONCILE_HEARTBEAT_MS)
        return self.config.heartbeat_interval_ms

    def _topic_partitions(self, tps: Iterable[TopicPartition], names: bool = False) -> list[dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for topic, p in tps:
            by_topic.setdefault(topic, []).append(p)
        out = []
        for topic in sorted(by_topic):
            found = self.topics.lookup(topic)
            entry: dict[str, Any] = {"topic_id": found[0] if found else ZERO_UUID,
                                     "partitions": sorted(by_topic[topic])}
            if names:
                entry["topic_name"] = topic
            out.append(entry)
        return out

    # ---- describe and persistence ------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "error_code": 0, "error_message": None, "group_id": self.group_id,
            "group_state": self.state.value,
            "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
            "assignor_name": DEFAULT_ASSIGNOR, "authorized_operations": -2147483648,
            "members": [
                {"member_id": mid, "instance_id": m.instance_id, "rack_id": m.rack_id,
                 "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                 "subscribed_topic_names": sorted(m.subscribed_names), "subscribed_topic_regex": m.subscribed_regex,
                 "assignment": {"topic_partitions": self._topic_partitions(m.assigned, names=True)},
                 "target_assignment": {
                     "topic_partitions": self._topic_partitions(self.target.get(mid, ()), names=True)},
                 "member_type": 1}
                for mid, m in self.members.items()
            ],
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "type": "consumer", "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
            "image": [[n, tid.hex(), c] for n, tid, c in (self.image or ())],
            "members": [
                {"member_id": mid, "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
                 "client_host": m.client_host, "principal": m.principal, "subscribed_names": m.subscribed_names,
                 "subscribed_regex": m.subscribed_regex, "server_assignor": m.server_assignor,
                 "rebalance_timeout_ms": m.rebalance_timeout_ms, "member_epoch": m.member_epoch,
                 "previous_epoch": m.previous_epoch, "assigned": sorted(m.assigned), "revoking": sorted(m.revoking),
                 "assigned_at": sorted([t, p, e] for (t, p), e in m.assigned_at.items()),
                 "target": sorted(self.target.get(mid, ()))}
                for mid, m in self.members.items()
            ],
        }

    @classmethod
    def restore(cls, group_id: str, data: dict[str, Any], config: ConsumerConfig, topics: TopicSource,
                new_id: Callable[[], str], now: int, access: TopicAccess | None = None) -> ConsumerGroup:
        group = cls(group_id, config, topics, new_id, data["group_epoch"], data["assignment_epoch"], access=access)
        group.image = tuple((n, bytes.fromhex(tid), c) for n, tid, c in data.get("image") or [])
        for m in data.get("members") or []:
            assigned = {(t, p) for t, p in m["assigned"]}
            revoking = {(t, p) for t, p in m["revoking"]}
            target = {(t, p) for t, p in m["target"]}
            member = ConsumerMember(
                m["member_id"], m.get("instance_id"), m.get("rack_id"), m.get("client_id", ""),
                m.get("client_host", ""), list(m.get("subscribed_names") or []), m.get("subscribed_regex"),
                m.get("server_assignor"), m.get("rebalance_timeout_ms", 300_000), m["member_epoch"],
                m.get("previous_epoch", -1), assigned, revoking, session_deadline=now + config.session_timeout_ms,
                # the initial member state, not a transition: what the restored fields say
                state=_restored_member_state(m["member_epoch"], group.assignment_epoch, assigned, revoking, target))
            member.principal = m.get("principal", "")
            # state written before KIP-1251 was kept: what it holds, held since its epoch
            member.assigned_at = ({(t, p): e for t, p, e in m["assigned_at"]} if "assigned_at" in m
                                  else dict.fromkeys(assigned | revoking, member.member_epoch))
            if member.revoking:
                member.revocation_deadline = now + member.rebalance_timeout_ms
            group.members[member.member_id] = member
            group.target[member.member_id] = target
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
        if any(m.subscribed_regex for m in group.members.values()):
            group.resolve_regexes(now, bump=False)  # Kafka replays its resolved regexes; here they are resolved again
        group._settle()
        return group


def _restored_member_state(epoch: int, assignment_epoch: int, assigned: set[TopicPartition],
                           revoking: set[TopicPartition], target: set[TopicPartition]) -> MemberState:
    """A restored member's state as its persisted fields say (member states are not persisted)."""
    if revoking:
        return MemberState.UNREVOKED_PARTITIONS
    if epoch == 0 and not assigned:
        return MemberState.JOINING
    if epoch == assignment_epoch and assigned != target:
        return MemberState.UNRELEASED_PARTITIONS
    return MemberState.STABLE
