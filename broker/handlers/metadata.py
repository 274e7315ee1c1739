"""ApiVersions, Metadata, DescribeCluster, DescribeTopicPartitions: how clients find us and our
topics. A topic's entry is built once, as Metadata's (``topic_metadata``); DescribeTopicPartitions
answers it with its own partition type (KIP-966's ELR fields added)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, api_versions_body, apis_with
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.handlers.context import ClusterApis
from tmqgate.broker.topics import Topic, TopicError, check_topic_name
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.names import topic_name_problem

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.api_versions import ApiVersionsResponse
    from tmqgate.protocol.bodies.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
    from tmqgate.protocol.bodies.describe_topic_partitions import (
        DescribeTopicPartitionsRequest,
        DescribeTopicPartitionsResponse,
        DescribeTopicPartitionsResponseCursor,
        DescribeTopicPartitionsResponseTopic,
    )
    from tmqgate.protocol.bodies.metadata import (
        MetadataRequest,
        MetadataResponse,
        MetadataResponseBroker,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(ClusterApis)

NOT_REQUESTED = -2147483648  # *_authorized_operations when the client did not ask for them
# Leader epoch -1 for a partition of this broker alone: clients skip epoch validation. A
# partition placed on a cluster shows its leader epoch, which clients then send back
# (current_leader_epoch) and validate their positions with (OffsetForLeaderEpoch, KIP-320).
LEADER_EPOCH = -1


@api(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: ClusterApis, req: Request) -> ApiVersionsResponse:
    # (api_versions_body: a plain dict, as the server's UNSUPPORTED_VERSION answer edits it)
    return cast("ApiVersionsResponse", api_versions_body(
        ctx.apis, finalized={"transaction.version": ctx.config.transaction_version, "share.version": 1},
        version=req.api_version))


def topic_metadata(ctx: ClusterApis, topic: Topic) -> MetadataResponseTopic:
    """One topic's metadata entry: each partition's leader, replicas and in-sync replicas —
    on a cluster as etcd places them (an offline partition: LEADER_NOT_AVAILABLE, leader -1,
    its dead replicas offline), else this node, the only replica of all."""
    node = ctx.node.node_id
    live = ctx.live_ids()
    partitions: list[MetadataResponsePartition] = []
    for p in range(topic.partitions):
        state = ctx.topics.partition_state(topic, p)
        if state is None:
            partitions.append({"error_code": 0, "partition_index": p, "leader_id": node, "leader_epoch": LEADER_EPOCH,
                               "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []})
            continue
        partitions.append({
            "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE) if state.leader < 0 else 0,
            "partition_index": p, "leader_id": state.leader, "leader_epoch": state.epoch,
            "replica_nodes": list(state.replicas), "isr_nodes": list(state.isr),
            "offline_replicas": [r for r in state.replicas if r not in live]})
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": partitions,
    }


def brokers(ctx: ClusterApis) -> list[MetadataResponseBroker]:
    return [{"node_id": n, "host": host, "port": port, "rack": None} for n, host, port in ctx.brokers()]


def _missing(name: str | None, topic_id: bytes, code: ErrorCode) -> MetadataResponseTopic:
    return {"error_code": int(code), "name": name, "topic_id": topic_id, "is_internal": False,
            "partitions": []}


@api(ApiKey.METADATA, 0, 13)
async def metadata(ctx: ClusterApis, req: Request) -> MetadataResponse:
    body = cast("MetadataRequest", req.body)
    wanted = body.get("topics")
    allow_auto = body.get("allow_auto_topic_creation", True) and ctx.config.auto_create_topics_enable
    if wanted and req.api_version < 12:
        # Kafka's KafkaApis: v10/v11 carry topic ids in the schema but serve neither ids nor null
        # names; the request fails as a whole, answered per topic (getErrorResponse, name "").
        for entry in wanted:
            if entry.get("name") is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Topic name can not be null for version {req.api_version}")
            if (entry.get("topic_id") or ZERO_UUID) != ZERO_UUID:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Topic IDs are not supported in requests for version {req.api_version}")
    auth = ctx.authorizer
    if wanted is None or (req.api_version == 0 and not wanted):
        everything = ctx.topics.all()
        if auth is not None:  # Kafka lists only the topics the client may DESCRIBE
            allowed = auth.allowed(Operation.DESCRIBE, ResourceType.TOPIC, [t.name for t in everything])
            everything = [t for t in everything if t.name in allowed]
        topics = [topic_metadata(ctx, t) for t in everything]
    else:
        topics = []
        for entry in wanted:
            name, topic_id = entry.get("name"), entry.get("topic_id") or ZERO_UUID
            # By id when one is given: the Java client's forTopicIds leaves the name "" (not null),
            # and Kafka's KafkaApis looks such a topic up by its id.
            if name is None or (not name and topic_id != ZERO_UUID):
                topic = ctx.topics.by_id(topic_id)
                if topic is not None and auth is not None and not auth.allows(
                        Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    topics.append(_missing(None, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
                topics.append(topic_metadata(ctx, topic) if topic else
                              _missing(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if auth is not None and not auth.allows(Operation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(_missing(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            topic = ctx.topics.get(name)
            if topic is None and topic_name_problem(name) is None:
                await ctx.membership.refresh()  # created on another broker since our last read
                topic = ctx.topics.get(name)
            if topic is None and allow_auto and auth is not None and not (
                    auth.allows_cluster(Operation.CREATE) or auth.allows(Operation.CREATE, ResourceType.TOPIC, name)):
                # Auto-creation needs CREATE on the cluster or on the topic (Kafka's KafkaApis).
                topics.append(_missing(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if topic is None and allow_auto:
                created = await _auto_create(ctx, name)
                if isinstance(created, ErrorCode):
                    topics.append(_missing(name, ZERO_UUID, created))
                    continue
                topic = created
            topics.append(topic_metadata(ctx, topic) if topic else
                          _missing(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    cluster_ops = NOT_REQUESTED
    if auth is not None:
        if body.get("include_topic_authorized_operations"):
            for t in topics:
                if t["error_code"] == 0 and (name := t["name"]) is not None:  # (a found topic's: named)
                    t["topic_authorized_operations"] = auth.operations(ResourceType.TOPIC, name)
        if body.get("include_cluster_authorized_operations"):
            cluster_ops = auth.operations(ResourceType.CLUSTER, "kafka-cluster")
    return {
        "throttle_time_ms": 0,
        "brokers": brokers(ctx),
        "cluster_id": ctx.cluster_id(),
        "controller_id": ctx.controller_id(),
        "topics": topics,
        "error_code": 0,
        "cluster_authorized_operations": cluster_ops,
    }


async def _auto_create(ctx: ClusterApis, name: str) -> Topic | ErrorCode:
    """Kafka's auto.create.topics.enable: a Metadata request for a missing topic creates it
    (on a cluster through etcd; a topic another broker made meanwhile is simply there)."""
    try:
        check_topic_name(name)
        factor = ctx.config.default_replication_factor
        return await ctx.topics.cluster.create(name, ctx.config.num_partitions, {}, replication_factor=factor)
    except TopicError as exc:
        if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
            topic = ctx.topics.get(name)
            if topic is not None:
                return topic
        return exc.code


@api(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def describe_cluster(ctx: ClusterApis, req: Request) -> DescribeClusterResponse:
    body = cast("DescribeClusterRequest", req.body)
    ops = NOT_REQUESTED
    auth = ctx.authorizer
    if auth is not None and body.get("include_cluster_authorized_operations"):
        # Kafka: the cluster's operations to a client that may DESCRIBE it, else none (0).
        ops = (auth.operations(ResourceType.CLUSTER, "kafka-cluster")
               if auth.allows_cluster(Operation.DESCRIBE) else 0)
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": body.get("endpoint_type", 1),
        "cluster_id": ctx.cluster_id(),
        "controller_id": ctx.controller_id(),
        "brokers": [{"broker_id": n, "host": h, "port": p, "rack": None, "is_fenced": False}
                    for n, h, p in ctx.brokers()],
        "cluster_authorized_operations": ops,
    }


@api(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: ClusterApis, req: Request) -> DescribeTopicPartitionsResponse:
    """KIP-966's paged topic description (kafka-topics --describe in 4.x): topics in name order
    from the cursor, at most response_partition_limit partitions, then a cursor to go on."""
    body = cast("DescribeTopicPartitionsRequest", req.body)
    limit = max(1, body.get("response_partition_limit") or 2000)
    cursor = body.get("cursor")
    names = sorted(t["name"] for t in body["topics"]) if body["topics"] else [t.name for t in ctx.topics.all()]
    auth = ctx.authorizer
    allowed = None if auth is None else auth.allowed(Operation.DESCRIBE, ResourceType.TOPIC, names)
    if allowed is not None and not body["topics"]:  # listing all: only what may be described
        names = [n for n in names if n in allowed]
    if cursor is not None:
        names = [n for n in names if n >= cursor["topic_name"]]
    out: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: DescribeTopicPartitionsResponseCursor | None = None
    left = limit
    for name in names:
        if allowed is not None and name not in allowed:
            out.append(_described(_missing(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED), []))
            continue
        topic = ctx.topics.get(name)
        if topic is None:
            out.append(_described(_missing(name, ZERO_UUID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), []))
            continue
        entry = topic_metadata(ctx, topic)
        first = cursor["partition_index"] if cursor is not None and name == cursor["topic_name"] else 0
        parts = entry["partitions"][first:]
        if len(parts) > left:
            next_cursor = {"topic_name": name, "partition_index": parts[left]["partition_index"]}
            parts = parts[:left]
        out.append(_described(entry, parts))
        left -= len(parts)
        if next_cursor is not None or left == 0:
            if next_cursor is None and name != names[-1]:
                next_cursor = {"topic_name": names[names.index(name) + 1], "partition_index": 0}
            break
    return {"throttle_time_ms": 0, "topics": out, "next_cursor": next_cursor}


def _described(entry: MetadataResponseTopic,
               parts: list[MetadataResponsePartition]) -> DescribeTopicPartitionsResponseTopic:
    """A topic's Metadata entry as DescribeTopicPartitions answers it: with ``parts`` (its page
    of partitions), each with KIP-966's eligible leader replicas, none here."""
    return {**entry, "partitions": [{**p, "eligible_leader_replicas": [], "last_known_elr": []} for p in parts]}
