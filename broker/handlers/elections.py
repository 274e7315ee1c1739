"""ElectLeaders (``kafka-leader-election``): preferred or unclean leader elections asked for by
an operator, answered per partition as Kafka's controller answers them.

On a cluster the shared topics are elected through etcd (``broker.cluster.topics``); a topic
of one broker alone (and every topic without a cluster) is led by its only replica, its
preferred leader, so it needs no election (ELECTION_NOT_NEEDED). When every partition is asked
for (topic_partitions null), the partitions that needed no election are left out of the
answer, as Kafka leaves them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.topics import Results
    from tmqgate.protocol.bodies.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)


@api(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: AdminApis, req: Request) -> ElectLeadersResponse:
    body = cast("ElectLeadersRequest", req.body)
    election_type = body.get("election_type", 0) if req.api_version >= 1 else 0
    asked = body.get("topic_partitions")
    wanted = None if asked is None else {t["topic"]: list(t["partitions"]) for t in asked}
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.ALTER):
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return _answer(denied, {name: [(p, denied, None) for p in parts] for name, parts in (wanted or {}).items()})
    if election_type not in (0, 1):
        return _answer(ErrorCode.INVALID_REQUEST, {})
    results = await ctx.topics.cluster.elect_leaders(election_type, wanted)  # through etcd for shared topics
    if wanted is None:
        results = {n: kept for n, rs in results.items()
                   if (kept := [r for r in rs if r[1] != ErrorCode.ELECTION_NOT_NEEDED])}
    return _answer(ErrorCode.NONE, results)


def _answer(error: ErrorCode, results: Results) -> ElectLeadersResponse:
    return {"throttle_time_ms": 0, "error_code": int(error), "replica_election_results": [
        {"topic": name, "partition_result": [
            {"partition_id": p, "error_code": int(code), "error_message": message} for p, code, message in rs]}
        for name, rs in results.items()]}
