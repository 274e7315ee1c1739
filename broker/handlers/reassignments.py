"""AlterPartitionReassignments and ListPartitionReassignments (``kafka-reassign-partitions``):
moving a partition's replicas to other brokers, as Kafka's controller does it.

On a cluster a shared topic's partition is reassigned through etcd (``broker.cluster.topics``,
the rules in ``metadata.view``): the target replicas are added and fetch from the
leader, and once all are in sync the controller drops the others (and moves the leadership
if the leader was one of them). A topic of one broker alone (and every topic without a
cluster) lives on this broker only: its one replica can only be "moved" to itself; any other
target names a broker that is not registered (INVALID_REPLICA_ASSIGNMENT, Kafka's message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.alter_partition_reassignments import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
    )
    from tmqgate.protocol.bodies.list_partition_reassignments import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def alter_partition_reassignments(ctx: AdminApis, req: Request) -> AlterPartitionReassignmentsResponse:
    body = cast("AlterPartitionReassignmentsRequest", req.body)
    allow = body.get("allow_replication_factor_change", True) if req.api_version >= 1 else True
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.ALTER):
        return {"throttle_time_ms": 0, "allow_replication_factor_change": allow,
                "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": None, "responses": []}
    wanted: dict[str, dict[int, tuple[int, ...] | None]] = {}
    for t in body["topics"]:
        for asked in t["partitions"]:
            replicas = asked.get("replicas")
            wanted.setdefault(t["name"], {})[asked["partition_index"]] = None if replicas is None else tuple(replicas)
    results = await ctx.topics.cluster.reassign(wanted, allow)  # through etcd for the topics a cluster shares
    return {"throttle_time_ms": 0, "allow_replication_factor_change": allow, "error_code": 0, "error_message": None,
            "responses": [{"name": name, "partitions": [
                {"partition_index": p, "error_code": int(code), "error_message": message} for p, code, message in rows]}
                for name, rows in results.items()]}


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: AdminApis, req: Request) -> ListPartitionReassignmentsResponse:
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": None, "topics": []}
    asked = cast("ListPartitionReassignmentsRequest", req.body).get("topics")
    wanted = None if asked is None else {t["name"]: list(t["partition_indexes"]) for t in asked}
    running = await ctx.topics.cluster.reassignments(wanted)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": [
        {"name": name, "partitions": [
            {"partition_index": p, "replicas": list(s.replicas), "adding_replicas": list(s.adding),
             "removing_replicas": list(s.removing)} for p, s in parts]}
        for name, parts in running.items()]}
