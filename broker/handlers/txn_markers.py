"""The transactional data plane's own APIs: WriteTxnMarkers (API 27) and DescribeProducers
(API 61), as Apache Kafka's KafkaApis answers them.

- WriteTxnMarkers — what a transaction coordinator sends partition leaders, and what
  `kafka-transactions abort` sends for a hanging transaction: ALTER or CLUSTER_ACTION on the
  cluster (else the request is refused, CLUSTER_AUTHORIZATION_FAILED), then one marker per partition
  through the MarkerWriter (broker/runtime/txn_markers.py); a marker whose epoch is older than the
  producer's on the partition is INVALID_PRODUCER_EPOCH (Kafka's ProducerAppendInfo).
- DescribeProducers — READ on the topic (else TOPIC_AUTHORIZATION_FAILED for its partitions):
  the producers with state on each partition, with their open transaction's first offset
  (`kafka-transactions describe-producers` and `find-hanging`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import TxnDataApis
from tmqgate.broker.topics import TMQ, Topic
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.internal_topics import GROUP_METADATA_TOPIC

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.describe_producers import (
        DescribeProducersRequest,
        DescribeProducersResponse,
        DescribeProducersResponsePartitionResponse,
        DescribeProducersResponseTopicResponse,
    )
    from tmqgate.protocol.bodies.write_txn_markers import (
        WriteTxnMarkersRequest,
        WriteTxnMarkersResponse,
        WriteTxnMarkersResponseWritableTxnMarkerResult,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(TxnDataApis)


@api(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def write_txn_markers(ctx: TxnDataApis, req: Request) -> WriteTxnMarkersResponse:
    auth = ctx.authorizer
    if auth is not None and not auth.allows_cluster(Operation.ALTER):  # Kafka: ALTER, else CLUSTER_ACTION
        auth.require_cluster(Operation.CLUSTER_ACTION)
    results: list[WriteTxnMarkersResponseWritableTxnMarkerResult] = []
    for marker in cast("WriteTxnMarkersRequest", req.body)["markers"]:
        pid, epoch = marker["producer_id"], marker["producer_epoch"]
        wanted = [(t["name"], p) for t in marker["topics"] for p in t["partition_indexes"]]
        errors: dict[tuple[str, int], ErrorCode] = {}
        writable = []
        for name, partition in wanted:
            topic = ctx.topics.get(name)
            if name == GROUP_METADATA_TOPIC and ctx.cluster.over_brokers:
                # a cluster's transaction coordinator ends the group offsets of the partition here
                errors[(name, partition)] = await ctx.cluster.end_group_offsets(
                    pid, epoch, marker["transaction_result"], partition)
                continue
            error = ctx.topics.partition_error(topic, partition)
            if ctx.cluster.over_brokers and error is not None:  # not the leader: the sender finds it
                errors[(name, partition)] = error
                continue
            window = (ctx.store.producer_window(topic.db, partition, pid)
                      if topic is not None and topic.kind != TMQ and 0 <= partition < topic.partitions else None)
            if window is not None and epoch < window.epoch:
                errors[(name, partition)] = ErrorCode.INVALID_PRODUCER_EPOCH
            else:
                writable.append((name, partition))
        errors.update(ctx.markers.write(pid, epoch, marker["transaction_result"], marker["coordinator_epoch"],
                                        writable))
        results.append({"producer_id": pid, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": int(errors[(t["name"], p)])} for p in t["partition_indexes"]]}
            for t in marker["topics"]]})
    return {"markers": results}


def _replica_here(ctx: TxnDataApis, topic: Topic | None, index: int) -> bool:
    """This broker holds a replica of the partition (a follower: its log and producer state)."""
    state = None if topic is None else ctx.topics.partition_state(topic, index)
    return state is not None and ctx.topics.node_id in state.replicas


@api(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: TxnDataApis, req: Request) -> DescribeProducersResponse:
    body = cast("DescribeProducersRequest", req.body)
    auth = ctx.authorizer
    names = {t["name"] for t in body["topics"]}
    allowed = names if auth is None else auth.allowed(Operation.READ, ResourceType.TOPIC, names)
    topics: list[DescribeProducersResponseTopicResponse] = []
    for t in body["topics"]:
        topic = ctx.topics.get(t["name"])
        parts: list[DescribeProducersResponsePartitionResponse] = []
        for index in t["partition_indexes"]:
            entry: DescribeProducersResponsePartitionResponse = {
                "partition_index": index, "error_code": 0, "error_message": None, "active_producers": []}
            error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if t["name"] not in allowed
                     else ctx.topics.partition_error(topic, index))
            if error is ErrorCode.NOT_LEADER_OR_FOLLOWER and _replica_here(ctx, topic, index):
                error = None  # Kafka answers from any replica's log (find-hanging asks each broker)
            if error is not None:
                entry["error_code"] = int(error)
            else:
                assert topic is not None
                entry["active_producers"] = [
                    {"producer_id": p.producer_id, "producer_epoch": p.epoch, "last_sequence": p.last_sequence,
                     "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
                     "current_txn_start_offset": p.current_txn_start_offset}
                    # an internal topic's records are the broker's own: no producers (as on Kafka)
                    for p in ([] if topic.is_internal else ctx.store.active_producers(topic.db, index))]
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
