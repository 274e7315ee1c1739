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
    from tmqgate.broker.cluster.topics import Results
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
    shared = ctx.topics.placements
    results: Results = {}
    if ctx.topics.cluster is not None:
        ask = None if wanted is None else {n: ps for n, ps in wanted.items() if n in shared}
        if ask is None or ask:
            results.update(await ctx.topics.cluster.elect_leaders(election_type, ask))
    local = ({t.name: list(range(t.partitions)) for t in ctx.topics.all() if t.name not in shared}
             if wanted is None else {n: ps for n, ps in wanted.items() if n not in results})
    for name, parts in local.items():
        topic = ctx.topics.get(name)
        if topic is None:
            results[name] = [(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}") for p in parts]
        else:
            results[name] = [(p, ErrorCode.ELECTION_NOT_NEEDED, None) if 0 <= p < topic.partitions
                             else (p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{p}")
                             for p in parts]
    if wanted is None:
        results = {n: kept for n, rs in results.items()
                   if (kept := [r for r in rs if r[1] != ErrorCode.ELECTION_NOT_NEEDED])}
    return _answer(ErrorCode.NONE, results)


def _answer(error: ErrorCode, results: Results) -> ElectLeadersResponse:
    return {"throttle_time_ms": 0, "error_code": int(error), "replica_election_results": [
        {"topic": name, "partition_result": [
            {"partition_id": p, "error_code": int(code), "error_message": message} for p, code, message in rs]}
        for name, rs in results.items()]}
