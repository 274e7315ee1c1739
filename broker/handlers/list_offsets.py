"""ListOffsets: earliest, latest, max timestamp, and the first offset at or after a timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import DataPlane
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import decode_records, parse_header

if TYPE_CHECKING:
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.list_offsets import (
        ListOffsetsRequest,
        ListOffsetsResponse,
        ListOffsetsResponsePartitionResponse,
        ListOffsetsResponseTopicResponse,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(DataPlane)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
EARLIEST_PENDING_UPLOAD = -5
LATEST_TIERED = -6


def _first_record_at(ctx: DataPlane, topic: Topic, vnode: int, base: int, ts: int) -> tuple[int, int]:
    """The storage time index finds the entry; this finds the record, as Kafka returns it: the
    first offset (not below log start) whose timestamp is at least `ts`. A view topic may have
    filtered out every row of that entry, so the scan goes on through later ones."""
    store = ctx.store
    offset = max(base, topic.log_start(store, vnode))
    end = topic.high_watermark(store, vnode)
    while offset < end:
        batches = topic.read(store, vnode, offset, 1 << 16)
        if not batches:
            break
        for batch in batches:
            header = parse_header(batch)
            for record in decode_records(batch):
                stamp = header.max_timestamp if header.timestamp_type == 1 else record.timestamp
                if record.offset >= offset and stamp >= ts:
                    return record.offset, stamp
            offset = max(offset, header.next_offset)
    return -1, -1


def _max_timestamp(topic: Topic, store: Any, vnode: int) -> tuple[int, int]:
    """An internal topic's record of the largest timestamp (the first such), by a scan."""
    best = (-1, -1)
    offset, end = 0, topic.high_watermark(store, vnode)
    while offset < end:
        batches = topic.read(store, vnode, offset, 1 << 16)
        if not batches:
            break
        for batch in batches:
            for record in decode_records(batch):
                if record.timestamp > best[1]:
                    best = (record.offset, record.timestamp)
            offset = max(offset, parse_header(batch).next_offset)
    return best


@api(ApiKey.LIST_OFFSETS, 1, 10)
async def list_offsets(ctx: DataPlane, req: Request) -> ListOffsetsResponse:
    body = cast("ListOffsetsRequest", req.body)
    store = ctx.store
    topics: list[ListOffsetsResponseTopicResponse] = []
    auth = ctx.authorizer
    allowed = None if auth is None else auth.allowed(  # DESCRIBE on the topic, as Kafka
        Operation.DESCRIBE, ResourceType.TOPIC, {t["name"] for t in body["topics"]})
    for t in body["topics"]:
        topic = ctx.topics.get(t["name"])
        parts: list[ListOffsetsResponsePartitionResponse] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            entry: ListOffsetsResponsePartitionResponse = {"partition_index": index, "error_code": 0, "timestamp": -1,
                                     "offset": -1, "leader_epoch": -1}
            error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if allowed is not None and t["name"] not in allowed
                     else ctx.topics.partition_error(topic, index, leader_epoch=p.get("current_leader_epoch", -1)))
            if error is not None:
                entry["error_code"] = int(error)
                parts.append(entry)
                continue
            assert topic is not None
            ts = p["timestamp"]
            if ts in (EARLIEST, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD):
                entry["offset"] = topic.log_start(store, index)
            elif ts == LATEST and body.get("isolation_level", 0) == 1:  # read_committed: the LSO
                entry["offset"] = topic.last_stable_offset(store, index)
            elif ts == LATEST:
                entry["offset"] = topic.high_watermark(store, index)
            elif ts == LATEST_TIERED:
                pass  # nothing is tiered: offset -1, as Kafka answers for a local-only topic
            elif topic.log is not None and ts >= 0:  # an internal topic: scanned from its start
                entry["offset"], entry["timestamp"] = _first_record_at(ctx, topic, index, 0, ts)
            elif topic.log is not None and ts == MAX_TIMESTAMP:
                entry["offset"], entry["timestamp"] = _max_timestamp(topic, store, index)
            elif ts == MAX_TIMESTAMP:
                found = store.max_timestamp_offset(topic.db, index)
                if found is not None:
                    entry["offset"], entry["timestamp"] = _first_record_at(ctx, topic, index, found[0], found[1])
            elif ts >= 0:
                found = store.offset_for_timestamp(topic.db, index, ts)
                if found is not None:
                    entry["offset"], entry["timestamp"] = _first_record_at(ctx, topic, index, found[0], ts)
            else:
                entry["error_code"] = int(ErrorCode.INVALID_REQUEST)
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
