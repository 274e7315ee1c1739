"""DescribeQuorum (``kafka-metadata-quorum describe --status / --replication``), as it applies to
a tmqgate cluster, whose metadata quorum is etcd rather than Kafka's ``__cluster_metadata``
Raft log (issue 16, step 3). Rules:

- Asked for ``__cluster_metadata`` partition 0 (anything else: UNKNOWN_TOPIC_OR_PARTITION),
  with DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise), as Kafka's.
- The leader is the controller (elected through etcd), its epoch the controller epoch (the
  create revision of the controller key); the high watermark is the newest etcd revision this
  broker read. The voters are the live brokers (any of them can be elected controller).
- What this broker knows it says: its own log end (that revision) and when it last read etcd;
  the leader's log end is the high watermark. Another broker's progress is not known here:
  -1, as Kafka reports an unknown voter's.
- One node, without a cluster: it alone, leader at epoch 0, high watermark 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import ClusterApis
from tmqgate.broker.network.listeners import parse_listeners
from tmqgate.protocol import clock
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.describe_quorum import (
        DescribeQuorumRequest,
        DescribeQuorumResponse,
        DescribeQuorumResponsePartitionData,
        DescribeQuorumResponseReplicaState,
        DescribeQuorumResponseTopicData,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(ClusterApis)

METADATA_TOPIC = "__cluster_metadata"
_NO_DIRECTORY = ZERO_UUID  # Kafka's ReplicaKey.NO_DIRECTORY_ID


@api(ApiKey.DESCRIBE_QUORUM, 0, 2)
async def describe_quorum(ctx: ClusterApis, req: Request) -> DescribeQuorumResponse:
    auth = ctx.authorizer
    if auth is not None and not auth.allows_cluster(Operation.DESCRIBE):
        return {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": None, "topics": [],
                "nodes": []}
    now = clock.now_ms()
    m = ctx.membership
    me = ctx.node.node_id
    leader, epoch, hw, read_ms = m.view.controller_id, max(m.view.controller_epoch, 0), m.revision, m.read_ms
    brokers = ctx.brokers()

    def state(node: int) -> DescribeQuorumResponseReplicaState:
        if node == leader:  # Kafka: the leader's last fetch -1, its caught-up time now
            return {"replica_id": node, "replica_directory_id": _NO_DIRECTORY, "log_end_offset": hw,
                    "last_fetch_timestamp": -1, "last_caught_up_timestamp": now}
        if node == me:
            return {"replica_id": node, "replica_directory_id": _NO_DIRECTORY, "log_end_offset": hw,
                    "last_fetch_timestamp": read_ms, "last_caught_up_timestamp": read_ms}
        return {"replica_id": node, "replica_directory_id": _NO_DIRECTORY, "log_end_offset": -1,
                "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}

    topics: list[DescribeQuorumResponseTopicData] = []
    for t in cast("DescribeQuorumRequest", req.body)["topics"]:
        parts: list[DescribeQuorumResponsePartitionData] = []
        for p in t["partitions"]:
            entry: DescribeQuorumResponsePartitionData = {"partition_index": p["partition_index"], "error_code": 0,
                                                          "error_message": None,
                                     "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                                     "current_voters": [], "observers": []}
            if t["topic_name"] != METADATA_TOPIC or p["partition_index"] != 0:
                entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                entry.update({"leader_id": leader, "leader_epoch": epoch, "high_watermark": hw,
                              "current_voters": [state(n) for n, _, _ in brokers]})
            parts.append(entry)
        topics.append({"topic_name": t["topic_name"], "partitions": parts})
    listener = parse_listeners(ctx.config)[0].name  # the one brokers register and advertise first
    return {"error_code": 0, "error_message": None, "topics": topics,
            "nodes": [{"node_id": n, "listeners": [{"name": listener, "host": h, "port": p}]} for n, h, p in brokers]}
