"""Consumer groups: FindCoordinator, the classic group APIs, offsets, and KIP-848's
ConsumerGroupHeartbeat/ConsumerGroupDescribe — thin wire shims over ``coordinator``.

This node coordinates every group (and answers for transactional ids too); JoinGroup and
SyncGroup wait on futures the state machine resolves, as Kafka's coordinator delays them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.client import current_client
from tmqgate.broker.handlers.context import GroupApis
from tmqgate.broker.quotas import parked
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.coordinator.coordinator import OffsetEntry
    from tmqgate.protocol.messages import Request

api = apis_with(GroupApis)

ZERO_UUID = bytes(16)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _host() -> str:
    """The member's client host as Kafka reports it: Java's InetAddress.toString(), "/1.2.3.4"."""
    client = current_client.get(None)
    return f"/{client.host}" if client is not None else ""


def _kick(ctx: GroupApis) -> None:
    ctx.coordinator.kick()


@api(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: GroupApis, req: Request) -> dict[str, Any]:
    host, port = ctx.node.address()
    node = ctx.node.node_id
    body = req.body
    key_type = body.get("key_type", KEY_TYPE_GROUP)
    ok = key_type in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION)
    code = ErrorCode.NONE if ok else ErrorCode.INVALID_REQUEST
    found = {"node_id": node if ok else -1, "host": host if ok else "", "port": port if ok else -1,
             "error_code": int(code), "error_message": None if ok else f"Unsupported key type {key_type}."}
    if req.api_version < 4:
        return {"throttle_time_ms": 0, **found}
    return {"throttle_time_ms": 0,
            "coordinators": [{"key": key, **found} for key in body.get("coordinator_keys") or []]}


@api(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: GroupApis, req: Request) -> dict[str, Any]:
    with parked():  # waiting for the other members is not handler time (request_percentage)
        result = await ctx.coordinator.join_group(req.body, req.api_version, req.client_id or "", _host())
    if req.api_version < 7 and result.get("protocol_name") is None:
        result["protocol_name"] = ""
    result.setdefault("leader", "")
    result.setdefault("members", [])
    return {"throttle_time_ms": 0, **result}


@api(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: GroupApis, req: Request) -> dict[str, Any]:
    with parked():
        result = await ctx.coordinator.sync_group(req.body)
    return {"throttle_time_ms": 0, "assignment": b"", **result}


@api(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: GroupApis, req: Request) -> dict[str, Any]:
    body = req.body
    rt = ctx.coordinator
    code = rt.machine.heartbeat(rt.now(), body["group_id"], body["member_id"], body.get("group_instance_id"),
                                body["generation_id"])
    _kick(ctx)
    return {"throttle_time_ms": 0, "error_code": int(code)}


@api(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: GroupApis, req: Request) -> dict[str, Any]:
    body = req.body
    rt = ctx.coordinator
    members: list[tuple[str, str | None]]
    if req.api_version < 3:
        members = [(body["member_id"], None)]
    else:
        members = [(m["member_id"], m.get("group_instance_id")) for m in body.get("members") or []]
    top, codes = rt.machine.leave_group(rt.now(), body["group_id"], members)
    _kick(ctx)
    if req.api_version < 3:
        return {"throttle_time_ms": 0, "error_code": int(codes[0] if top is ErrorCode.NONE else top)}
    return {"throttle_time_ms": 0, "error_code": int(top),
            "members": [{"member_id": mid, "group_instance_id": iid, "error_code": int(code)}
                        for (mid, iid), code in zip(members, codes, strict=True)] if codes else []}


@api(ApiKey.OFFSET_COMMIT, 2, 10)
async def offset_commit(ctx: GroupApis, req: Request) -> dict[str, Any]:
    body = req.body
    rt = ctx.coordinator
    by_id = req.api_version >= 10
    entries: list[OffsetEntry] = []
    slots: list[tuple[int, int, int]] = []  # (topic slot, partition slot, entry index)
    topics_out = []
    for ti, t in enumerate(body.get("topics") or []):
        if by_id:
            topic = ctx.topics.by_id(bytes(t["topic_id"]))
            name = topic.name if topic is not None else None
        else:
            name = t["name"]
        parts_out = []
        for pi, p in enumerate(t.get("partitions") or []):
            parts_out.append({"partition_index": p["partition_index"],
                              "error_code": int(ErrorCode.UNKNOWN_TOPIC_ID)})
            if name is None:
                continue
            slots.append((ti, pi, len(entries)))
            entries.append((name, p["partition_index"], p["committed_offset"],
                            p.get("committed_leader_epoch", -1), p.get("committed_metadata")))
        topics_out.append({"name": t.get("name"), "topic_id": t.get("topic_id", ZERO_UUID), "partitions": parts_out})
    # A write the disk refuses answers NOT_COORDINATOR on every entry (coordinator.coordinator).
    codes = rt.machine.commit_offsets(rt.now(), body["group_id"], body.get("member_id") or "",
                                      body.get("group_instance_id"), body.get("generation_id_or_member_epoch", -1),
                                      req.api_version, entries)
    for ti, pi, ei in slots:
        topics_out[ti]["partitions"][pi]["error_code"] = int(codes[ei])
    return {"throttle_time_ms": 0, "topics": topics_out}


def _fetch_group(ctx: GroupApis, group_id: str, topics: list[dict[str, Any]] | None, by_id: bool,
                 member_id: str | None = None, member_epoch: int = -1) -> tuple[ErrorCode, list[dict[str, Any]]]:
    rt = ctx.coordinator
    wanted: list[tuple[str, list[int]]] | None = None
    unknown_ids: list[dict[str, Any]] = []
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
    code, rows = rt.machine.fetch_offsets(group_id, wanted, member_id, member_epoch)
    out = []
    for name, parts in rows:
        entry: dict[str, Any] = {"name": name, "partitions": [
            {"partition_index": p, "committed_offset": off, "committed_leader_epoch": epoch, "metadata": meta,
             "error_code": int(err)} for p, off, epoch, meta, err in parts]}
        if by_id:
            topic = ctx.topics.get(name)
            if topic is None:
                continue
            entry["topic_id"] = topic.topic_id
        out.append(entry)
    return code, out + unknown_ids


@api(ApiKey.OFFSET_FETCH, 1, 10)
async def offset_fetch(ctx: GroupApis, req: Request) -> dict[str, Any]:
    body = req.body
    v = req.api_version
    if v < 8:
        code, topics = _fetch_group(ctx, body["group_id"], body.get("topics"), False)
        if v < 2 and code is not ErrorCode.NONE:
            for t in topics:
                for p in t["partitions"]:
                    p["error_code"] = int(code)
        return {"throttle_time_ms": 0, "error_code": int(code), "topics": topics}
    groups = []
    for g in body.get("groups") or []:
        code, topics = _fetch_group(ctx, g["group_id"], g.get("topics"), v >= 10, g.get("member_id"),
                                    g.get("member_epoch", -1))
        groups.append({"group_id": g["group_id"], "error_code": int(code), "topics": topics})
    return {"throttle_time_ms": 0, "groups": groups}


@api(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: GroupApis, req: Request) -> dict[str, Any]:
    groups = ctx.coordinator.machine.list_groups(req.body.get("states_filter"), req.body.get("types_filter"))
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


@api(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: GroupApis, req: Request) -> dict[str, Any]:
    machine = ctx.coordinator.machine
    return {"throttle_time_ms": 0,
            "groups": [machine.describe_group(g, req.api_version) for g in req.body.get("groups") or []]}


@api(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: GroupApis, req: Request) -> dict[str, Any]:
    results = ctx.coordinator.machine.delete_groups(req.body.get("groups_names") or [])
    return {"throttle_time_ms": 0,
            "results": [{"group_id": g, "error_code": int(code)} for g, code in results]}


@api(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: GroupApis, req: Request) -> dict[str, Any]:
    body = req.body
    wanted = [(t["name"], [p["partition_index"] for p in t.get("partitions") or []]) for t in body.get("topics") or []]
    code, rows = ctx.coordinator.machine.delete_offsets(body["group_id"], wanted)
    return {"throttle_time_ms": 0, "error_code": int(code),
            "topics": [{"name": name, "partitions": [{"partition_index": p, "error_code": int(err)} for p, err in parts]}
                       for name, parts in rows]}


@api(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: GroupApis, req: Request) -> dict[str, Any]:
    rt = ctx.coordinator
    result = rt.machine.consumer_heartbeat(rt.now(), req.body, req.client_id or "", _host())
    _kick(ctx)
    return {"throttle_time_ms": 0, **result}


@api(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: GroupApis, req: Request) -> dict[str, Any]:
    groups = ctx.coordinator.machine.consumer_describe(req.body.get("group_ids") or [])
    return {"throttle_time_ms": 0, "groups": groups}
