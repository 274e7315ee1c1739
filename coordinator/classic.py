"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) as a clocked state machine.

Kafka's classic coordinator, step by step: members join (a new member first gets
MEMBER_ID_REQUIRED on v4+), the group waits in PreparingRebalance until every known member
has rejoined or the rebalance timeout passes, then starts a new generation, elects a protocol
by vote and hands the leader everyone's metadata; the leader's SyncGroup carries the
assignment, which every member receives (CompletingRebalance → Stable). Heartbeats keep a
member alive; missing them for the session timeout removes it and rebalances. TDengine's
states map as rebalancing ↔ PreparingRebalance/CompletingRebalance, ready ↔ Stable,
clear = the member removed.

JoinGroup and SyncGroup answers are deferred: the caller passes a ``reply`` callable that the
machine calls (now, or later from another event or ``tick``). Nothing here knows asyncio.

States (``ClassicGroupState``; the values are what DescribeGroups and ListGroups return).
Every change goes through ``ClassicGroup._transition``, checked against ``VALID_PREVIOUS``,
which is Kafka's ``ClassicGroupState`` table:

Empty — no members (a new group, or every member left or expired). Restored groups with no
    members start here too.
    actions: JoinGroup from a new member is accepted; JoinGroup naming a member id, SyncGroup,
        Heartbeat and an OffsetCommit with a generation answer UNKNOWN_MEMBER_ID; an
        OffsetCommit with generation < 0 (a "simple" group) is stored.
    → PreparingRebalance: a member joins (the first rebalance of an empty group waits
        group.initial.rebalance.delay.ms, extended while members keep arriving, up to the
        rebalance timeout).
    → Dead: DeleteGroups.
PreparingRebalance — waiting for every known member to (re)join.
    actions: JoinGroup is parked until the join completes; Heartbeat and SyncGroup answer
        REBALANCE_IN_PROGRESS; LeaveGroup and session expiry remove members.
    → CompletingRebalance: every member rejoined (and no MEMBER_ID_REQUIRED id is pending),
        or the join deadline passed with some members in; the first rebalance of an empty
        group completes only when its initial delay is over (at once with a delay of 0), with
        whoever joined — pending ids are not waited for, as in Kafka:
        the generation is bumped, the protocol elected, members that did not rejoin
        removed (static ones kept) and every parked JoinGroup answered.
    → Empty: the join completes with nobody left (the generation is still bumped).
    → Dead: DeleteGroups once the last member left during the initial delay.
CompletingRebalance — the new generation is out; waiting for the leader's SyncGroup.
    actions: followers' SyncGroup is parked; Heartbeat is answered normally; an OffsetCommit
        answers REBALANCE_IN_PROGRESS.
    → Stable: the leader's SyncGroup brings the assignment; every parked SyncGroup is answered.
    → PreparingRebalance: a member joins or changes its protocols, a member leaves or expires,
        or the sync deadline (the rebalance timeout) passes — members that sent no SyncGroup
        are removed; parked SyncGroups answer REBALANCE_IN_PROGRESS and assignments are reset.
    → Dead: allowed by the table (as in Kafka); DeleteGroups needs an empty group, so here
        Dead is entered from Empty or a member-less PreparingRebalance.
Stable — every member has its assignment (also where a group with members is restored).
    actions: SyncGroup returns the member's assignment; JoinGroup from a follower with the same
        protocols returns the current generation; heartbeats and commits are accepted.
    → PreparingRebalance: a new member, the leader rejoining, a follower with new protocols,
        a static member coming back as the leader or with new protocols, a leave or an expiry.
    → Dead: allowed by the table, not reached (see CompletingRebalance).
Dead — deleted; the coordinator forgets the group. JoinGroup answers COORDINATOR_NOT_AVAILABLE
    and every member request UNKNOWN/COORDINATOR_NOT_AVAILABLE. No way out (Dead → Dead is
    allowed, as in Kafka).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tmqgate.protocol.codec import DecodeError, decode_versioned
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.transitions import check

log = logging.getLogger("tmqgate.coordinator")

Reply = Callable[[dict[str, Any]], None]



class ClassicGroupState(StrEnum):
    """A classic group's state; the value is the name Kafka's APIs report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = ClassicGroupState.EMPTY
PREPARING = ClassicGroupState.PREPARING_REBALANCE
COMPLETING = ClassicGroupState.COMPLETING_REBALANCE
STABLE = ClassicGroupState.STABLE
DEAD = ClassicGroupState.DEAD

#: For each state, the states it may be entered from (Kafka's ClassicGroupState table).
VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    EMPTY: frozenset({PREPARING}),
    PREPARING: frozenset({STABLE, COMPLETING, EMPTY}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    DEAD: frozenset({STABLE, PREPARING, COMPLETING, EMPTY, DEAD}),
}


@dataclass
class ClassicConfig:
    """Kafka's group.* broker settings that the classic protocol reads."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    join_reply: Reply | None = None
    sync_reply: Reply | None = None
    joined_ms: int = 0  # coordinator clock time of joining (SHOW CONSUMERS up time)

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


def _error(code: ErrorCode, **extra: Any) -> dict[str, Any]:
    return {"error_code": int(code), **extra}


@dataclass
class ClassicGroup:
    """One classic group; every method takes the current time (ms) and never blocks."""

    group_id: str
    config: ClassicConfig
    new_id: Callable[[], str]
    state: ClassicGroupState = EMPTY  # changed only by _transition
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # member id → join deadline (MEMBER_ID_REQUIRED)
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id → member id
    join_deadline: int | None = None
    initial_delay: bool = False  # the first rebalance of an empty group waits group.initial.rebalance.delay.ms
    initial_remaining_ms: int = 0
    joined_during_delay: bool = False
    sync_deadline: int | None = None
    dirty: bool = False  # persist at the end of the event

    kind = "classic"

    def _transition(self, target: ClassicGroupState) -> None:
        """The one place the state changes; a move VALID_PREVIOUS does not list raises."""
        previous = self.state
        self.state = check(f"classic group {self.group_id}", VALID_PREVIOUS, self.state, target)
        if log.isEnabledFor(logging.INFO):
            members = sorted(self.members)
            log.info("group %s (classic): %s -> %s, generation %d, %d member(s) %s", self.group_id, previous.value,
                     target.value, self.generation, len(members), members,
                     extra={"event": "group_state", "group": self.group_id, "protocol": "classic",
                            "from_state": previous.value, "to_state": target.value,
                            "generation": self.generation, "members": members})

    def _log_assignment(self) -> None:
        """The assignment the leader gave, per member (readable for the consumer protocol)."""
        readable = self.protocol_type == "consumer"
        given = {m.member_id: (parse_assignment(m.assignment) if readable else f"{len(m.assignment)} bytes")
                 for m in self.members.values()}
        log.info("group %s (classic): generation %d assigned %s", self.group_id, self.generation, given,
                 extra={"event": "group_assignment", "group": self.group_id, "protocol": "classic",
                        "generation": self.generation, "assignment": given})

    # ---- queries -----------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not self.members

    def next_deadline(self) -> int | None:
        times = [*self.pending.values()]
        if self.join_deadline is not None:
            times.append(self.join_deadline)
        if self.sync_deadline is not None:
            times.append(self.sync_deadline)
        for m in self.members.values():
            if m.join_reply is None and m.sync_reply is None:
                times.append(m.last_heartbeat_ms + m.session_timeout_ms)
        return min(times) if times else None

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members' consumer-protocol metadata names (None if not a consumer group)."""
        if self.protocol_type != "consumer" or self.state == EMPTY:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            topics |= parse_subscription(m.metadata(self.protocol_name))
        return topics

    # ---- events ------------------------------------------------------------------------

    def join(self, now: int, body: dict[str, Any], version: int, client_id: str, client_host: str,
             reply: Reply) -> None:
        member_id = body.get("member_id") or ""
        instance_id = body.get("group_instance_id")
        session = body["session_timeout_ms"]
        rebalance = body.get("rebalance_timeout_ms", -1)
        if rebalance is None or rebalance < 0:
            rebalance = session
        protocol_type = body.get("protocol_type") or ""
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in body.get("protocols") or []]
        base: dict[str, Any] = {"member_id": member_id, "generation_id": -1, "protocol_name": None,
                                "protocol_type": None,
                "leader": "", "members": []}
        if self.state == DEAD:
            reply(_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, **base))
            return
        if not self.config.min_session_timeout_ms <= session <= self.config.max_session_timeout_ms:
            reply(_error(ErrorCode.INVALID_SESSION_TIMEOUT, **base))
            return
        if not self._supports(protocol_type, protocols):
            reply(_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, **base))
            return
        fields = dict(instance_id=instance_id, client_id=client_id, client_host=client_host,
                      session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                      protocol_type=protocol_type, protocols=protocols)
        if not member_id:
            new_id = f"{instance_id or client_id}-{self.new_id()}"
            if instance_id is not None:
                if instance_id in self.static:
                    self._replace_static(now, self.static[instance_id], new_id, fields, reply)
                else:
                    self._add_member(now, ClassicMember(new_id, **fields), reply)
            elif version >= 4:
                # KIP-394: hand out the id first, so a member that never comes back costs nothing.
                self.pending[new_id] = now + session
                reply(_error(ErrorCode.MEMBER_ID_REQUIRED, **{**base, "member_id": new_id}))
            else:
                self._add_member(now, ClassicMember(new_id, **fields), reply)
            return
        if member_id in self.pending and instance_id is None:
            del self.pending[member_id]
            self._add_member(now, ClassicMember(member_id, **fields), reply)
            return
        if instance_id is not None and instance_id in self.static and self.static[instance_id] != member_id:
            reply(_error(ErrorCode.FENCED_INSTANCE_ID, **base))
            return
        member = self.members.get(member_id)
        if member is None or self.state == EMPTY:
            reply(_error(ErrorCode.UNKNOWN_MEMBER_ID, **base))
            return
        if member.instance_id is not None and instance_id != member.instance_id:
            reply(_error(ErrorCode.FENCED_INSTANCE_ID, **base))
            return
        same = member.protocols == protocols
        if self.state == PREPARING:
            self._update(member, fields, reply)
            self._try_complete_join(now)
        elif self.state == COMPLETING and same:
            reply(self._join_response(member))
        elif self.state == STABLE and same and member_id != self.leader_id:
            reply(self._join_response(member))
        else:
            self._update(member, fields, reply)
            self._prepare_rebalance(now)

    def sync(self, now: int, body: dict[str, Any], reply: Reply) -> None:
        member_id = body.get("member_id") or ""
        base = {"assignment": b"", "protocol_type": self.protocol_type, "protocol_name": self.protocol_name}
        code = self._validate(member_id, body.get("group_instance_id"), body.get("generation_id", -1))
        if code is not ErrorCode.NONE:
            reply(_error(code, **base))
            return
        ptype, pname = body.get("protocol_type"), body.get("protocol_name")
        if (ptype is not None and ptype != self.protocol_type) or (pname is not None and pname != self.protocol_name):
            reply(_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, **base))
            return
        member = self.members[member_id]
        if self.state == PREPARING:
            reply(_error(ErrorCode.REBALANCE_IN_PROGRESS, **base))
        elif self.state == STABLE:
            member.last_heartbeat_ms = now
            reply(_error(ErrorCode.NONE, **{**base, "assignment": member.assignment}))
        else:  # CompletingRebalance
            member.sync_reply = reply
            member.last_heartbeat_ms = now
            if member_id == self.leader_id:
                given = {a["member_id"]: bytes(a["assignment"] or b"") for a in body.get("assignments") or []}
                for m in self.members.values():
                    m.assignment = given.get(m.member_id, b"")
                self._transition(STABLE)
                if log.isEnabledFor(logging.INFO):
                    self._log_assignment()
                self.sync_deadline = None
                self.dirty = True
                for m in self.members.values():
                    if m.sync_reply is not None:
                        r, m.sync_reply = m.sync_reply, None
                        r(_error(ErrorCode.NONE, **{**base, "assignment": m.assignment}))

    def heartbeat(self, now: int, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        code = self._validate(member_id, instance_id, generation)
        if code is not ErrorCode.NONE:
            return code
        self.members[member_id].last_heartbeat_ms = now
        if self.state == PREPARING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, now: int, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in self.pending:
            del self.pending[member_id]
            self._try_complete_join(now)
            return ErrorCode.NONE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(now, member_id)
        return ErrorCode.NONE

    def commit_check(self, member_id: str, instance_id: str | None, generation: int,
                     transactional: bool = False) -> ErrorCode:
        """Whether an OffsetCommit may be written (Kafka's classic validateOffsetCommit); a
        transactional one (TxnOffsetCommit) is not held back by a rebalance."""
        if generation < 0 and self.is_empty():
            return ErrorCode.NONE  # a "simple" group: manual assignment with a group.id
        code = self._validate(member_id, instance_id, generation)
        if code is not ErrorCode.NONE:
            return code
        if self.state == COMPLETING and not transactional:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def tick(self, now: int) -> None:
        for mid, deadline in list(self.pending.items()):
            if deadline <= now:
                del self.pending[mid]
                self._try_complete_join(now)
        if self.join_deadline is not None and self.join_deadline <= now:
            if self.initial_delay and self.joined_during_delay and self.initial_remaining_ms > 0:
                step = min(self.config.initial_rebalance_delay_ms, self.initial_remaining_ms)
                self.initial_remaining_ms -= step
                self.joined_during_delay = False
                self.join_deadline = now + step
            else:
                self._complete_join(now)
        if self.sync_deadline is not None and self.sync_deadline <= now and self.state == COMPLETING:
            self.sync_deadline = None
            for mid in [m.member_id for m in self.members.values() if m.sync_reply is None]:
                self._remove(now, mid, rebalance=False)
            self._prepare_rebalance(now)
        for m in list(self.members.values()):
            if (m.join_reply is None and m.sync_reply is None
                    and m.last_heartbeat_ms + m.session_timeout_ms <= now and m.member_id in self.members):
                self._remove(now, m.member_id)

    def delete(self) -> None:
        """DeleteGroups on an empty group: it is Dead from now on."""
        self._transition(DEAD)

    # ---- internals ---------------------------------------------------------------------

    def _validate(self, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        if self.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None and instance_id in self.static and self.static[instance_id] != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _select_protocol(self) -> str | None:
        """Kafka's vote: each member votes for its most preferred protocol all members support."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next((name for name, _ in m.protocols if name in candidates), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name]) if votes else None

    def _update(self, member: ClassicMember, fields: dict[str, Any], reply: Reply) -> None:
        for key in ("client_id", "client_host", "session_timeout_ms", "rebalance_timeout_ms", "protocols"):
            setattr(member, key, fields[key])
        if member.join_reply is not None and member.join_reply is not reply:
            member.join_reply(_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id,
                                     generation_id=-1, leader="", members=[], protocol_name=None))
        member.join_reply = reply

    def _add_member(self, now: int, member: ClassicMember, reply: Reply) -> None:
        member.joined_ms = now
        if not self.members:
            self.protocol_type = member.protocol_type
        member.join_reply = reply
        member.last_heartbeat_ms = now
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        if self.initial_delay:
            self.joined_during_delay = True
        self._prepare_rebalance(now)

    def _replace_static(self, now: int, old_id: str, new_id: str, fields: dict[str, Any], reply: Reply) -> None:
        """A static member came back (new member id, same group.instance.id): fence the old id."""
        old = self.members.pop(old_id)
        for cb in (old.join_reply, old.sync_reply):
            if cb is not None:
                cb(_error(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id, generation_id=-1, leader="",
                          members=[], assignment=b""))
        member = ClassicMember(new_id, **fields)
        member.assignment = old.assignment
        member.last_heartbeat_ms = now
        self.members[new_id] = member
        self.static[member.instance_id or ""] = new_id
        was_leader = self.leader_id == old_id
        if was_leader:
            self.leader_id = new_id
        if self.state == STABLE and old.protocols == member.protocols and not was_leader:
            self.dirty = True
            reply(self._join_response(member))
            return
        member.join_reply = reply
        if self.state == PREPARING:
            self._try_complete_join(now)
        else:
            self._prepare_rebalance(now)

    def _remove(self, now: int, member_id: str, rebalance: bool = True) -> None:
        member = self.members.pop(member_id)
        if member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]
        for cb in (member.join_reply, member.sync_reply):
            if cb is not None:
                cb(_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id, generation_id=-1, leader="",
                          members=[], assignment=b""))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if not rebalance:
            return
        if self.state in (STABLE, COMPLETING):
            self._prepare_rebalance(now)
        elif self.state == PREPARING:
            self._try_complete_join(now)

    def _prepare_rebalance(self, now: int) -> None:
        if self.state == COMPLETING:
            # Kafka resets the assignment and fails pending syncs so members rejoin.
            for m in self.members.values():
                m.assignment = b""
                if m.sync_reply is not None:
                    r, m.sync_reply = m.sync_reply, None
                    r(_error(ErrorCode.REBALANCE_IN_PROGRESS, assignment=b"",
                             protocol_type=self.protocol_type, protocol_name=self.protocol_name))
        self.sync_deadline = None
        if self.state == PREPARING:
            self._try_complete_join(now)
            return
        if self.state == EMPTY:
            # Kafka's initial rebalance ends on its timer alone, with whoever is in: members
            # that only got an id (MEMBER_ID_REQUIRED) are not waited for. With a delay of 0
            # the timer fires at once: the lone member's join completes now.
            delay = self.config.initial_rebalance_delay_ms
            self.initial_delay = True
            self.joined_during_delay = False
            self.initial_remaining_ms = max(self._rebalance_timeout() - delay, 0)
            self.join_deadline = now + delay
            self._transition(PREPARING)
            if delay <= 0:
                self._complete_join(now)
            return
        self.initial_delay = False
        self.join_deadline = now + self._rebalance_timeout()
        self._transition(PREPARING)
        self._try_complete_join(now)

    def _rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _try_complete_join(self, now: int) -> None:
        if self.state != PREPARING or self.initial_delay:
            return
        if all(m.join_reply is not None for m in self.members.values()) and not self.pending:
            self._complete_join(now)

    def _complete_join(self, now: int) -> None:
        self.join_deadline = None
        self.initial_delay = False
        for m in list(self.members.values()):
            if m.join_reply is None and m.instance_id is None:
                self._remove(now, m.member_id, rebalance=False)
        self.generation += 1
        self.dirty = True
        if not self.members:
            self._transition(EMPTY)
            self.protocol_name = None
            self.leader_id = None
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members or self.members[self.leader_id].join_reply is None:
            joined = [m.member_id for m in self.members.values() if m.join_reply is not None]
            self.leader_id = joined[0] if joined else next(iter(self.members))
        self._transition(COMPLETING)
        self.sync_deadline = now + self._rebalance_timeout()
        for m in self.members.values():
            if m.join_reply is not None:
                r, m.join_reply = m.join_reply, None
                m.last_heartbeat_ms = now
                r(self._join_response(m))

    def _join_response(self, member: ClassicMember) -> dict[str, Any]:
        members = []
        if member.member_id == self.leader_id:
            members = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                        "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]
        return _error(ErrorCode.NONE, generation_id=self.generation, protocol_type=self.protocol_type,
                      protocol_name=self.protocol_name, leader=self.leader_id or "",
                      member_id=member.member_id, members=members, skip_assignment=False)

    # ---- persistence -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        stable = self.state == STABLE
        return {
            "type": "classic", "protocol_type": self.protocol_type, "generation": self.generation,
            "protocol_name": self.protocol_name if stable else None,
            "leader": self.leader_id if stable else None,
            "members": [
                {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
                 "rebalance_timeout_ms": m.rebalance_timeout_ms,
                 "protocols": [[n, _b64(meta)] for n, meta in m.protocols],
                 "assignment": _b64(m.assignment)}
                for m in self.members.values()
            ] if stable else [],
        }

    @classmethod
    def restore(cls, group_id: str, data: dict[str, Any], config: ClassicConfig, new_id: Callable[[], str],
                now: int) -> ClassicGroup:
        members = data.get("members") or []
        # The initial state, not a transition: a group with members comes back Stable.
        group = cls(group_id, config, new_id, state=STABLE if members else EMPTY,
                    generation=data.get("generation", 0), protocol_type=data.get("protocol_type"))
        for m in members:
            member = ClassicMember(
                m["member_id"], m.get("instance_id"), m.get("client_id", ""), m.get("client_host", ""),
                m["session_timeout_ms"], m["rebalance_timeout_ms"], data.get("protocol_type") or "",
                [(n, _unb64(meta)) for n, meta in m["protocols"]], _unb64(m["assignment"]), now)
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
        if group.members:
            group.protocol_name = data.get("protocol_name")
            group.leader_id = data.get("leader") if data.get("leader") in group.members else next(iter(group.members))
        return group


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def parse_subscription(metadata: bytes) -> set[str]:
    """Topic names from a consumer-protocol Subscription (empty if it cannot be read)."""
    try:
        return set(decode_versioned("ConsumerProtocolSubscription", metadata)["topics"])
    except DecodeError:
        return set()


def parse_assignment(assignment: bytes) -> dict[str, list[int]]:
    """{topic: partitions} from a consumer-protocol Assignment (empty if it cannot be read)."""
    try:
        body = decode_versioned("ConsumerProtocolAssignment", assignment)
    except DecodeError:
        return {}
    return {t["topic"]: list(t["partitions"]) for t in body["assigned_partitions"]}
