"""The admin queries over the coordinator's groups of both protocols: ListGroups,
DescribeGroups, ConsumerGroupDescribe, DeleteGroups, and what SQL's SHOW CONSUMERS /
SHOW SUBSCRIPTIONS and DROP TOPIC ask (``broker.sql``'s ``GroupQueries``).

They read the groups as the coordinator holds them and the offsets as ``GroupOffsets`` does
(a group with offsets and no members is an Empty classic group); only DeleteGroups changes
anything. Its rules, as Kafka keeps them: a group with members (or, classic, a member id a
MEMBER_ID_REQUIRED answer handed out and still awaited) is NON_EMPTY_GROUP; otherwise its
offsets, pending ones and metadata go in one WriteBatch (a classic group's tombstone in the log
with them), and memory changes only after it is written — one the disk refuses answers
NOT_COORDINATOR and leaves the group as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tmqgate.coordinator.classic import ClassicGroup, ClassicGroupState, parse_assignment, parse_subscription
from tmqgate.coordinator.consumer import ConsumerGroup
from tmqgate.coordinator.offsets import REFUSED, Group, GroupOffsets
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import group_metadata_key
from tmqgate.storage.model import StorageIOError

if TYPE_CHECKING:
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.coordinator")


class GroupAdmin:
    """The admin queries over ``groups`` (the coordinator's) and ``offsets``; ``forget`` drops
    a deleted group from the coordinator's memory."""

    def __init__(self, store: Store, groups: Mapping[str, Group], offsets: GroupOffsets,
                 forget: Callable[[str], None]) -> None:
        self.store = store
        self.groups = groups
        self.offsets = offsets
        self._forget = forget

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[dict[str, Any]]:
        wanted_states = {s.lower() for s in states or []}
        wanted_types = {t.lower() for t in types or []}
        out = []
        for group_id in sorted(set(self.groups) | self.offsets.offset_groups):
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
        if group is None and group_id in self.offsets.offset_groups:
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

    def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, ErrorCode]]:
        out = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None and group_id not in self.offsets.offset_groups:
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
            self._forget(group_id)
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
        return sorted(set(self.groups) | self.offsets.offset_groups)
