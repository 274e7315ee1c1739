"""OffsetForLeaderEpoch: where a leader epoch ends in a partition's log (KIP-101/279). A
follower asks it of its leader before fetching after a change of leader, and truncates what
the leader does not have (broker/cluster/replication.py). A SQL database's vnodes answer from
their leader-epoch cache (their rows and meta entries carry no epoch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import DataPlane
from tmqgate.broker.topics import KAFKA, TSDB
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.offset_for_leader_epoch import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        OffsetForLeaderEpochResponseEpochEndOffset,
        OffsetForLeaderEpochResponseOffsetForLeaderTopicResult,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(DataPlane)


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: DataPlane, req: Request) -> OffsetForLeaderEpochResponse:
    body = cast("OffsetForLeaderEpochRequest", req.body)
    auth = ctx.authorizer
    from_replica = body.get("replica_id", -2) >= 0
    # Kafka: CLUSTER_ACTION for a follower, DESCRIBE on each topic for a client.
    cluster_ok = auth is None or not from_replica or auth.allows_cluster(Operation.CLUSTER_ACTION)
    topics: list[OffsetForLeaderEpochResponseOffsetForLeaderTopicResult] = []
    for t in body["topics"]:
        topic = ctx.topics.get(t["topic"])
        refused = not cluster_ok or (auth is not None and not from_replica and not auth.allows(
            Operation.DESCRIBE, ResourceType.TOPIC, t["topic"]))
        parts: list[OffsetForLeaderEpochResponseEpochEndOffset] = []
        for p in t["partitions"]:
            index = p["partition"]
            entry: OffsetForLeaderEpochResponseEpochEndOffset = {"partition": index, "error_code": 0,
                                                                 "leader_epoch": -1, "end_offset": -1}
            error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if refused
                     else ctx.topics.partition_error(topic, index))
            if error is None and (topic is None or topic.kind not in (KAFKA, TSDB)):
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # views and internal logs keep no epochs
            state = None
            if error is None and topic is not None:
                state = ctx.replication.led_state(topic, index)
            current = p.get("current_leader_epoch", -1)
            if error is None and state is not None and current >= 0 and current != state.epoch:
                error = ErrorCode.FENCED_LEADER_EPOCH if current < state.epoch else ErrorCode.UNKNOWN_LEADER_EPOCH
            if error is not None:
                entry["error_code"] = int(error)
            else:
                assert topic is not None
                epoch, end = ctx.store.epoch_end(topic.db, index, p["leader_epoch"])
                if state is not None and p["leader_epoch"] >= state.epoch:  # the current epoch ends at the log end
                    epoch, end = state.epoch, ctx.store.next_version(topic.db, index)
                entry.update({"leader_epoch": epoch, "end_offset": end})
            parts.append(entry)
        topics.append({"topic": t["topic"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
