"""Consumer groups: FindCoordinator, the classic group APIs, offsets (transactional ones too:
TxnOffsetCommit, OffsetFetch's require_stable), and KIP-848's
ConsumerGroupHeartbeat/ConsumerGroupDescribe — thin wire shims over ``coordinator``.

This node coordinates every group (and answers for transactional ids too); JoinGroup and
SyncGroup wait on futures the state machine resolves, as Kafka's coordinator delays them.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.handlers.context import GroupApis
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.ops.quotas.client_quotas import parked
from tmqgate.coordinator.coordinator import REFUSED_ANSWER
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC, TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from tmqgate.coordinator.offsets import OffsetEntry
    from tmqgate.protocol.bodies.consumer_group_describe import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupDescribeResponseDescribedGroup,
    )
    from tmqgate.protocol.bodies.consumer_group_heartbeat import (
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )
    from tmqgate.protocol.bodies.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
    from tmqgate.protocol.bodies.describe_groups import (
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        DescribeGroupsResponseDescribedGroup,
    )
    from tmqgate.protocol.bodies.find_coordinator import (
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        FindCoordinatorResponseCoordinator,
    )
    from tmqgate.protocol.bodies.heartbeat import HeartbeatRequest, HeartbeatResponse
    from tmqgate.protocol.bodies.join_group import JoinGroupRequest, JoinGroupResponse
    from tmqgate.protocol.bodies.leave_group import LeaveGroupRequest, LeaveGroupResponse
    from tmqgate.protocol.bodies.list_groups import (
        ListGroupsRequest,
        ListGroupsResponse,
        ListGroupsResponseListedGroup,
    )
    from tmqgate.protocol.bodies.offset_commit import (
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetCommitResponsePartition,
        OffsetCommitResponseTopic,
    )
    from tmqgate.protocol.bodies.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
    from tmqgate.protocol.bodies.offset_fetch import (
        OffsetFetchRequest,
        OffsetFetchRequestTopics,
        OffsetFetchResponse,
        OffsetFetchResponseGroup,
        OffsetFetchResponseTopics,
    )
    from tmqgate.protocol.bodies.sync_group import SyncGroupRequest, SyncGroupResponse
    from tmqgate.protocol.bodies.txn_offset_commit import (
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
        TxnOffsetCommitResponsePartition,
        TxnOffsetCommitResponseTopic,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(GroupApis)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2  # a share-partition's: "group:topic id:partition", coordinated with the group


def _share_key_group(key: str) -> str | None:
    """The group of a share-partition's key "group:topic id:partition" (None: not one)."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "==")
    except (ValueError, binascii.Error):
        return None
    return parts[0] if len(raw) == 16 else None


def _host() -> str:
    """The member's client host as Kafka reports it: Java's InetAddress.toString(), "/1.2.3.4"."""
    client = current_client.get(None)
    return f"/{client.host}" if client is not None else ""


def _group_denied(ctx: GroupApis, op: Operation, group_id: str) -> bool:
    """True when an authorizer refuses `op` on the group (Kafka: GROUP_AUTHORIZATION_FAILED)."""
    auth = ctx.authorizer
    return auth is not None and not auth.allows(op, ResourceType.GROUP, group_id)


def _require_group(ctx: GroupApis, op: Operation, group_id: str) -> None:
    """Refuse the whole request with GROUP_AUTHORIZATION_FAILED unless `op` on the group."""
    if ctx.authorizer is not None:
        ctx.authorizer.require(op, ResourceType.GROUP, group_id)


def _topics_denied(ctx: GroupApis, op: Operation, names: list[str]) -> set[str]:
    auth = ctx.authorizer
    if auth is None:
        return set()
    wanted = set(names)
    return wanted - auth.allowed(op, ResourceType.TOPIC, wanted)


NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR


async def _replicated(ctx: GroupApis, group_id: str, codes: list[ErrorCode]) -> list[ErrorCode]:
    """An offset commit's answers once its state change is on the in-sync replicas (a cluster):
    the entries it wrote become the replication's error if there is one."""
    if not any(code is ErrorCode.NONE for code in codes):
        return codes
    error = await ctx.replicated(group_id)
    return codes if error is None else [error if code is ErrorCode.NONE else code for code in codes]


def _kick(ctx: GroupApis) -> None:
    ctx.coordinator.kick()


@api(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: GroupApis, req: Request) -> FindCoordinatorResponse:
    body = cast("FindCoordinatorRequest", req.body)
    key_type = body.get("key_type", KEY_TYPE_GROUP)
    ok = key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE)
    code = ErrorCode.NONE if ok else ErrorCode.INVALID_REQUEST
    if ok:  # Kafka creates the coordinator's internal topic on the first request for one
        ctx.topics.ensure_internal(TRANSACTION_STATE_TOPIC if key_type == KEY_TYPE_TRANSACTION
                                   else GROUP_METADATA_TOPIC)

    def found(key: str) -> FindCoordinatorResponseCoordinator:
        if ok and key_type == KEY_TYPE_SHARE:  # the share-partition's state is kept with its group's
            group = _share_key_group(key)
            if group is None:
                return {"node_id": -1, "host": "", "port": -1, "error_code": int(ErrorCode.INVALID_REQUEST),
                        "error_message": ""}  # (Kafka's: empty)
            where = ctx.coordinator_node(KEY_TYPE_GROUP, group)
        else:
            where = ctx.coordinator_node(key_type, key) if ok else None
        if where is None:  # an unknown key type, or a cluster between coordinators
            return {"node_id": -1, "host": "", "port": -1, "error_code": int(
                code if not ok else ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": None if ok else f"Unsupported key type {key_type}."}
        node, host, port = where
        return {"node_id": node, "host": host, "port": port, "error_code": 0, "error_message": None}

    if req.api_version < 4:
        _require_key(ctx, key_type, body.get("key", ""))
        where = found(body.get("key", ""))  # v0-3 answer one key's coordinator at the top level
        return {"throttle_time_ms": 0, "error_code": where["error_code"], "error_message": where["error_message"],
                "node_id": where["node_id"], "host": where["host"], "port": where["port"]}
    return {"throttle_time_ms": 0,
            "coordinators": [{"key": key, **(_key_denied(ctx, key_type, key) or found(key))}
                             for key in body.get("coordinator_keys") or []]}


def _key_denied(ctx: GroupApis, key_type: int, key: str) -> FindCoordinatorResponseCoordinator | None:
    """FindCoordinator's check (DESCRIBE on the group, or on the transactional id): the
    refusal's entry, or None."""
    auth = ctx.authorizer
    if auth is not None and key_type == KEY_TYPE_SHARE:  # brokers' own (Kafka: CLUSTER_ACTION)
        return None if auth.allows_cluster(Operation.CLUSTER_ACTION) else {
            "node_id": -1, "host": "", "port": -1, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            "error_message": None}
    if auth is None or key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        return None
    rt = ResourceType.GROUP if key_type == KEY_TYPE_GROUP else ResourceType.TRANSACTIONAL_ID
    if auth.allows(Operation.DESCRIBE, rt, key):
        return None
    code = (ErrorCode.GROUP_AUTHORIZATION_FAILED if rt == ResourceType.GROUP
            else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return {"node_id": -1, "host": "", "port": -1, "error_code": int(code), "error_message": None}


def _require_key(ctx: GroupApis, key_type: int, key: str) -> None:
    denied = _key_denied(ctx, key_type, key)
    if denied is not None:
        raise KafkaError(ErrorCode(denied["error_code"]))


@api(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: GroupApis, req: Request) -> JoinGroupResponse:
    # (the coordinator takes the request and answers the response body as plain dicts)
    group_id = cast("JoinGroupRequest", req.body)["group_id"]
    _require_group(ctx, Operation.READ, group_id)
    if ctx.elsewhere(group_id):
        result = cast("JoinGroupResponse", dict(REFUSED_ANSWER["join"]))
    else:
        with parked():  # waiting for the other members is not handler time (request_percentage)
                result = cast("JoinGroupResponse", await ctx.coordinator.join_group(
                    req.body, req.api_version, req.client_id or "", _host()))
    if req.api_version < 7 and result.get("protocol_name") is None:
        result["protocol_name"] = ""
    result.setdefault("leader", "")
    result.setdefault("members", [])
    return {"throttle_time_ms": 0, **result}


@api(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: GroupApis, req: Request) -> SyncGroupResponse:
    group_id = cast("SyncGroupRequest", req.body)["group_id"]
    _require_group(ctx, Operation.READ, group_id)
    if ctx.elsewhere(group_id):
        return {"throttle_time_ms": 0, **cast("SyncGroupResponse", REFUSED_ANSWER["sync"])}
    with parked():  # (the coordinator takes the request and answers the response body as plain dicts)
        result = cast("SyncGroupResponse", await ctx.coordinator.sync_group(req.body))
    return {"throttle_time_ms": 0, "assignment": b"", **result}


@api(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: GroupApis, req: Request) -> HeartbeatResponse:
    body = cast("HeartbeatRequest", req.body)
    _require_group(ctx, Operation.READ, body["group_id"])
    if ctx.elsewhere(body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": int(NOT_COORDINATOR)}
    rt = ctx.coordinator
    code = rt.machine.heartbeat(rt.now(), body["group_id"], body["member_id"], body.get("group_instance_id"),
                                body["generation_id"])
    _kick(ctx)
    return {"throttle_time_ms": 0, "error_code": int(code)}


@api(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: GroupApis, req: Request) -> LeaveGroupResponse:
    body = cast("LeaveGroupRequest", req.body)
    _require_group(ctx, Operation.READ, body["group_id"])
    rt = ctx.coordinator
    members: list[tuple[str, str | None]]
    if req.api_version < 3:
        members = [(body["member_id"], None)]
    else:
        members = [(m["member_id"], m.get("group_instance_id")) for m in body.get("members") or []]
    codes: list[ErrorCode]
    if ctx.elsewhere(body["group_id"]):
        top, codes = NOT_COORDINATOR, []
    else:
        top, codes = rt.machine.leave_group(rt.now(), body["group_id"], members)
    _kick(ctx)
    if req.api_version < 3:
        return {"throttle_time_ms": 0, "error_code": int(codes[0] if top is ErrorCode.NONE else top)}
    return {"throttle_time_ms": 0, "error_code": int(top),
            "members": [{"member_id": mid, "group_instance_id": iid, "error_code": int(code)}
                        for (mid, iid), code in zip(members, codes, strict=True)] if codes else []}


@api(ApiKey.OFFSET_COMMIT, 2, 10)
async def offset_commit(ctx: GroupApis, req: Request) -> OffsetCommitResponse:
    body = cast("OffsetCommitRequest", req.body)
    _require_group(ctx, Operation.READ, body["group_id"])  # then READ on each topic
    rt = ctx.coordinator
    by_id = req.api_version >= 10
    entries: list[OffsetEntry] = []
    slots: list[tuple[int, int, int]] = []  # (topic slot, partition slot, entry index)
    topics_out: list[OffsetCommitResponseTopic] = []
    for ti, t in enumerate(body.get("topics") or []):
        if by_id:
            topic = ctx.topics.by_id(bytes(t["topic_id"]))
            name = topic.name if topic is not None else None
        else:
            name = t["name"]
        refused = name is not None and bool(_topics_denied(ctx, Operation.READ, [name]))
        parts_out: list[OffsetCommitResponsePartition] = []
        for pi, p in enumerate(t.get("partitions") or []):
            parts_out.append({"partition_index": p["partition_index"], "error_code": int(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED if refused else ErrorCode.UNKNOWN_TOPIC_ID)})
            if name is None or refused:
                continue
            slots.append((ti, pi, len(entries)))
            entries.append((name, p["partition_index"], p["committed_offset"],
                            p.get("committed_leader_epoch", -1), p.get("committed_metadata")))
        topics_out.append({"name": t.get("name", ""), "topic_id": t.get("topic_id", ZERO_UUID),
                           "partitions": parts_out})
    # A write the disk refuses answers NOT_COORDINATOR on every entry (coordinator.offsets).
    if ctx.elsewhere(body["group_id"]):
        codes = [NOT_COORDINATOR] * len(entries)
    else:
        codes = await _replicated(ctx, body["group_id"], rt.machine.offsets.commit_offsets(
            rt.now(), body["group_id"], body.get("member_id") or "", body.get("group_instance_id"),
            body.get("generation_id_or_member_epoch", -1), req.api_version, entries))
    for ti, pi, ei in slots:
        topics_out[ti]["partitions"][pi]["error_code"] = int(codes[ei])
    return {"throttle_time_ms": 0, "topics": topics_out}


@api(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: GroupApis, req: Request) -> TxnOffsetCommitResponse:
    """TxnOffsetCommit (KIP-98; v3+ carries the consumer's member and generation, KIP-447):
    offsets stored pending for the producer's transaction, the group's committed offsets only
    when it commits. Kafka's checks in its order (KafkaApis.handleTxnOffsetCommitRequest):
    WRITE on the transactional id, READ on the group (each refusal answers every partition),
    READ on each topic, then unknown topics/partitions, then the group (the coordinator).
    v5 is sent by clients that negotiated transaction version 2 (KIP-890 part 2): the group joins
    the transaction implicitly (no AddOffsetsToTxn), as Kafka's ADD_PARTITION operation."""
    body = cast("TxnOffsetCommitRequest", req.body)
    requested = [(t["name"], [p["partition_index"] for p in t.get("partitions") or []])
                 for t in body.get("topics") or []]

    def every(code: ErrorCode) -> TxnOffsetCommitResponse:
        return {"throttle_time_ms": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": p, "error_code": int(code)} for p in parts]}
            for name, parts in requested]}

    auth = ctx.authorizer
    if auth is not None and not auth.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"]):
        return every(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if _group_denied(ctx, Operation.READ, body["group_id"]):
        return every(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    denied = _topics_denied(ctx, Operation.READ, [name for name, _ in requested])
    entries: list[OffsetEntry] = []
    slots: list[tuple[int, int, int]] = []  # (topic slot, partition slot, entry index)
    topics_out: list[TxnOffsetCommitResponseTopic] = []
    for ti, t in enumerate(body.get("topics") or []):
        name = t["name"]
        parts_out: list[TxnOffsetCommitResponsePartition] = []
        for pi, p in enumerate(t.get("partitions") or []):
            parts_out.append({"partition_index": p["partition_index"],
                              "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})
            if name in denied:
                continue
            slots.append((ti, pi, len(entries)))
            entries.append((name, p["partition_index"], p["committed_offset"], p.get("committed_leader_epoch", -1),
                            p.get("committed_metadata")))
        topics_out.append({"name": name, "partitions": parts_out})
    if entries and ctx.elsewhere(body["group_id"]):
        return every(NOT_COORDINATOR)
    if entries and req.api_version >= 5:  # the group joins the transaction at its coordinator (if elsewhere)
        await ctx.txn_cluster.add_group(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                        body["group_id"])
    if entries:
        codes = await _replicated(ctx, body["group_id"], ctx.coordinator.txn_offset_commit(
            body["group_id"], body["transactional_id"], body["producer_id"], body["producer_epoch"],
            body.get("member_id") or "", body.get("generation_id", -1), body.get("group_instance_id"), entries,
            add_group=req.api_version >= 5, gate=ctx.txn_offsets))
        for ti, pi, ei in slots:
            topics_out[ti]["partitions"][pi]["error_code"] = int(codes[ei])
    return {"throttle_time_ms": 0, "topics": topics_out}


def _fetch_group(ctx: GroupApis, group_id: str, topics: list[OffsetFetchRequestTopics] | None, by_id: bool,
                 member_id: str | None = None, member_epoch: int = -1,
                 require_stable: bool = False) -> tuple[ErrorCode, list[OffsetFetchResponseTopics]]:
    rt = ctx.coordinator
    if ctx.elsewhere(group_id):
        return NOT_COORDINATOR, []
    wanted: list[tuple[str, list[int]]] | None = None
    unknown_ids: list[OffsetFetchResponseTopics] = []
    if topics is not None:
        wanted = []
        for t in topics:
            if by_id:
                topic = ctx.topics.by_id(bytes(t["topic_id"]))
                if topic is None:
                    unknown_ids.append({"topic_id": t["topic_id"], "partitions": [
                        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                         "metadata": "", "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID)}
                        for p in t["partition_indexes"]]})
                    continue
                wanted.append((topic.name, list(t["partition_indexes"])))
            else:
                wanted.append((t["name"], list(t["partition_indexes"])))
    refused: list[OffsetFetchResponseTopics] = []
    if ctx.authorizer is not None:
        if wanted is not None:  # named topics one may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED
            denied = _topics_denied(ctx, Operation.DESCRIBE, [n for n, _ in wanted])
            refused = [{"name": n, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)} for p in parts]}
                for n, parts in wanted if n in denied]
            wanted = [(n, parts) for n, parts in wanted if n not in denied]
    code, rows = rt.machine.offsets.fetch_offsets(group_id, wanted, member_id, member_epoch, require_stable)
    if ctx.authorizer is not None and topics is None:  # all topics: only those one may DESCRIBE
        hidden = _topics_denied(ctx, Operation.DESCRIBE, [n for n, _ in rows])
        rows = [(n, parts) for n, parts in rows if n not in hidden]
    out = []
    for name, parts in rows:
        entry: OffsetFetchResponseTopics = {"name": name, "partitions": [
            {"partition_index": p, "committed_offset": off, "committed_leader_epoch": epoch, "metadata": meta,
             "error_code": int(err)} for p, off, epoch, meta, err in parts]}
        if by_id:
            topic = ctx.topics.get(name)
            if topic is None:
                continue
            entry["topic_id"] = topic.topic_id
        out.append(entry)
    if by_id:
        for r in refused:
            topic = ctx.topics.get(r["name"])
            r["topic_id"] = topic.topic_id if topic is not None else ZERO_UUID
    return code, out + refused + unknown_ids


async def _settled(ctx: GroupApis, group_id: str) -> tuple[ErrorCode, list[OffsetFetchResponseTopics]] | None:
    """On a cluster, OffsetFetch answers only what the in-sync replicas have (Kafka's coordinator
    reads its last committed state): it waits for the group's pending changes first; the
    answer instead when they do not get there (None: go on)."""
    if ctx.elsewhere(group_id):
        return None
    error = await ctx.replicated(group_id)
    return None if error is None else (error, [])


@api(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx: GroupApis, req: Request) -> OffsetFetchResponse:
    body = cast("OffsetFetchRequest", req.body)
    v = req.api_version
    if v < 8:
        _require_group(ctx, Operation.DESCRIBE, body["group_id"])
        # require_stable (v7+, KIP-447): UNSTABLE_OFFSET_COMMIT where a transaction is pending.
        code, topics = await _settled(ctx, body["group_id"]) or _fetch_group(  # (v0-7's topics: by name)
            ctx, body["group_id"], cast("list[OffsetFetchRequestTopics] | None", body.get("topics")), False,
            require_stable=bool(body.get("require_stable")))
        if v < 2 and code is not ErrorCode.NONE:
            for t in topics:
                for p in t["partitions"]:
                    p["error_code"] = int(code)
        return {"throttle_time_ms": 0, "error_code": int(code), "topics": list(topics)}  # (v0-7's type: no ids)
    groups: list[OffsetFetchResponseGroup] = []
    for g in body.get("groups") or []:
        if _group_denied(ctx, Operation.DESCRIBE, g["group_id"]):
            groups.append({"group_id": g["group_id"], "topics": [],
                           "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)})
            continue
        code, topics = await _settled(ctx, g["group_id"]) or _fetch_group(
            ctx, g["group_id"], g.get("topics"), v >= 10, g.get("member_id"), g.get("member_epoch", -1),
            bool(body.get("require_stable")))
        groups.append({"group_id": g["group_id"], "error_code": int(code), "topics": topics})
    return {"throttle_time_ms": 0, "groups": groups}


@api(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: GroupApis, req: Request) -> ListGroupsResponse:
    body = cast("ListGroupsRequest", req.body)
    groups = cast("list[ListGroupsResponseListedGroup]", ctx.coordinator.machine.admin.list_groups(
        body.get("states_filter"), body.get("types_filter")))  # (the coordinator's plain dicts)
    if ctx.shares is not None:  # share groups (KIP-932): type and protocol type "share"
        ctx.shares.sync_groups(ctx.coordinator.machine.owns)
        states = {s.lower() for s in body.get("states_filter") or []}
        types = {t.lower() for t in body.get("types_filter") or []}
        groups += [{"group_id": g, "protocol_type": "share", "group_state": group.state.value, "group_type": "share"}
                   for g in sorted(ctx.shares.groups) if (group := ctx.shares.group(g, create=False)) is not None
                   and (not states or group.state.value.lower() in states) and (not types or "share" in types)]
    auth = ctx.authorizer
    if auth is not None and not auth.allows_cluster(Operation.DESCRIBE):
        # Kafka: DESCRIBE on the cluster lists every group, else those one may DESCRIBE.
        allowed = auth.allowed(Operation.DESCRIBE, ResourceType.GROUP, [g["group_id"] for g in groups])
        groups = [g for g in groups if g["group_id"] in allowed]
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


@api(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: GroupApis, req: Request) -> DescribeGroupsResponse:
    admin = ctx.coordinator.machine.admin
    if ctx.shares is not None:
        ctx.shares.sync_groups(ctx.coordinator.machine.owns)
    return {"throttle_time_ms": 0, "groups": [
        _group_error(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) if _group_denied(ctx, Operation.DESCRIBE, g)
        else _group_error(g, NOT_COORDINATOR) if ctx.elsewhere(g)
        else _share_group_described(g, req.api_version) if ctx.shares is not None and g in ctx.shares.groups
        else cast("DescribeGroupsResponseDescribedGroup", admin.describe_group(g, req.api_version))
        for g in cast("DescribeGroupsRequest", req.body).get("groups") or []]}


def _share_group_described(group_id: str, version: int) -> DescribeGroupsResponseDescribedGroup:
    """DescribeGroups of a share group, as Kafka answers for a group of another protocol: Dead,
    and from v6 GROUP_ID_NOT_FOUND saying what it is not."""
    answer = _group_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else ErrorCode.NONE)
    answer["group_state"] = "Dead"
    if version >= 6:
        answer["error_message"] = f"Group {group_id} is not a classic group."
    return answer


def _group_error(group_id: str, code: ErrorCode) -> DescribeGroupsResponseDescribedGroup:
    """Kafka's DescribeGroupsResponse.groupError: unknown state, protocol and operations."""
    return {"group_id": group_id, "error_code": int(code), "error_message": None, "group_state": "",
            "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648}


@api(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: GroupApis, req: Request) -> DeleteGroupsResponse:
    names = cast("DeleteGroupsRequest", req.body).get("groups_names") or []
    if ctx.shares is not None:
        ctx.shares.sync_groups(ctx.coordinator.machine.owns)
    denied = {g for g in names if _group_denied(ctx, Operation.DELETE, g)}
    elsewhere = {g for g in names if g not in denied and ctx.elsewhere(g)}
    shared = {g for g in names if ctx.shares is not None and g not in denied | elsewhere and g in ctx.shares.groups}
    results = dict(ctx.coordinator.machine.admin.delete_groups(
        [g for g in names if g not in denied | elsewhere | shared]))
    if ctx.shares is not None:
        results.update({g: ctx.shares.delete_group(g) for g in shared})
    results.update(dict.fromkeys(elsewhere, NOT_COORDINATOR))
    for g in {g for g, code in results.items() if code is ErrorCode.NONE}:
        results[g] = await ctx.replicated(g) or ErrorCode.NONE
    return {"throttle_time_ms": 0, "results": [
        {"group_id": g, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED if g in denied else results[g])}
        for g in dict.fromkeys(names)]}


@api(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: GroupApis, req: Request) -> OffsetDeleteResponse:
    body = cast("OffsetDeleteRequest", req.body)
    _require_group(ctx, Operation.DELETE, body["group_id"])  # then READ on each topic
    wanted = [(t["name"], [p["partition_index"] for p in t.get("partitions") or []]) for t in body.get("topics") or []]
    denied = _topics_denied(ctx, Operation.READ, [n for n, _ in wanted])
    if ctx.elsewhere(body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": int(NOT_COORDINATOR), "topics": []}
    allowed = [w for w in wanted if w[0] not in denied]
    code, rows = ctx.coordinator.machine.offsets.delete_offsets(body["group_id"], allowed)
    if code is ErrorCode.NONE and any(err is ErrorCode.NONE for _, parts in rows for _, err in parts):
        code = await ctx.replicated(body["group_id"]) or ErrorCode.NONE
    rows = [*rows, *((n, [(p, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts])
                     for n, parts in wanted if n in denied)]
    return {"throttle_time_ms": 0, "error_code": int(code),
            "topics": [{"name": name,
                        "partitions": [{"partition_index": p, "error_code": int(err)} for p, err in parts]}
                       for name, parts in rows]}


@api(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: GroupApis, req: Request) -> ConsumerGroupHeartbeatResponse:
    body = cast("ConsumerGroupHeartbeatRequest", req.body)
    if _group_denied(ctx, Operation.READ, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                "error_message": None, "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0}
    subscribed = body.get("subscribed_topic_names") or []
    if subscribed and _topics_denied(ctx, Operation.DESCRIBE, subscribed):
        # Kafka: a subscription naming a topic one may not DESCRIBE is refused whole.
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                "error_message": None, "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0}
    if ctx.elsewhere(body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": int(NOT_COORDINATOR),
                "error_message": None, "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0}
    rt = ctx.coordinator
    client = current_client.get(None)
    result = cast("ConsumerGroupHeartbeatResponse", rt.machine.consumer_heartbeat(  # (plain dicts in and out)
        rt.now(), req.body, req.client_id or "", _host(), client.principal if client is not None else ""))
    _kick(ctx)
    return {"throttle_time_ms": 0, **result}


@api(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: GroupApis, req: Request) -> ConsumerGroupDescribeResponse:
    ids = cast("ConsumerGroupDescribeRequest", req.body).get("group_ids") or []
    denied = {g for g in ids if _group_denied(ctx, Operation.DESCRIBE, g)}
    refused = {g: ErrorCode.GROUP_AUTHORIZATION_FAILED if g in denied else NOT_COORDINATOR
               for g in ids if g in denied or ctx.elsewhere(g)}
    described = iter(_describable_groups(ctx, cast(  # (the coordinator's plain dicts)
        "list[ConsumerGroupDescribeResponseDescribedGroup]",
        ctx.coordinator.machine.admin.consumer_describe([g for g in ids if g not in refused]))))
    groups: list[ConsumerGroupDescribeResponseDescribedGroup] = [
        {"group_id": g, "error_code": int(refused[g]), "error_message": None,
         "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
         "members": [], "authorized_operations": -2147483648} if g in refused else next(described)
        for g in ids]
    return {"throttle_time_ms": 0, "groups": groups}


def _describable_groups(ctx: GroupApis, groups: list[ConsumerGroupDescribeResponseDescribedGroup]
                        ) -> list[ConsumerGroupDescribeResponseDescribedGroup]:
    """Kafka 4.1 (KAFKA-18813): a group whose members' assignments or target assignments hold
    a topic the caller may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, without members."""
    if ctx.authorizer is None:
        return groups

    def topics(group: ConsumerGroupDescribeResponseDescribedGroup) -> set[str]:
        return {tp["topic_name"] for m in group["members"] for assigned in (m["assignment"], m["target_assignment"])
                for tp in assigned["topic_partitions"]}

    wanted = set().union(*(topics(g) for g in groups if g["error_code"] == 0))
    denied = wanted - ctx.authorizer.allowed(Operation.DESCRIBE, ResourceType.TOPIC, wanted)
    if not denied:
        return groups
    return [{"group_id": g["group_id"], "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
             "error_message": "The group has described topic(s) that the client is not authorized to describe.",
             "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
             "members": [], "authorized_operations": -2147483648}
            if g["error_code"] == 0 and topics(g) & denied else g for g in groups]
