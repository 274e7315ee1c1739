"""CreateAcls, DescribeAcls and DeleteAcls (Kafka's AclApis): DESCRIBE on the cluster to list,
ALTER on the cluster to change (else CLUSTER_AUTHORIZATION_FAILED for the whole request); with
no authorizer (`authorizer = "none"`) each answers SECURITY_DISABLED as Kafka does."""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.handlers.context import AclApis
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.create_acls import CreateAclsRequest, CreateAclsResponse
    from tmqgate.protocol.bodies.delete_acls import (
        DeleteAclsRequest,
        DeleteAclsRequestFilter,
        DeleteAclsResponse,
        DeleteAclsResponseFilterResult,
    )
    from tmqgate.protocol.bodies.describe_acls import (
        DescribeAclsRequest,
        DescribeAclsResponse,
        DescribeAclsResponseResource,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(AclApis)

NO_AUTHORIZER = "No Authorizer is configured."


def _filter(f: DescribeAclsRequest | DeleteAclsRequestFilter) -> AclFilter:
    return AclFilter(f["resource_type_filter"], f["resource_name_filter"], f["pattern_type_filter"],
                     f["principal_filter"], f["host_filter"], f["operation"], f["permission_type"])


@api(ApiKey.DESCRIBE_ACLS, 1, 3)
async def describe_acls(ctx: AclApis, req: Request) -> DescribeAclsResponse:
    auth = ctx.authorizer
    if auth is None:
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.SECURITY_DISABLED),
                "error_message": "No Authorizer is configured on the broker", "resources": []}
    auth.require_cluster(Operation.DESCRIBE)
    acls = auth.describe(_filter(cast("DescribeAclsRequest", req.body)))
    resources: list[DescribeAclsResponseResource] = []
    for (rt, name, pt), group in groupby(acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type)):
        resources.append({"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": [
            {"principal": a.principal, "host": a.host, "operation": a.operation,
             "permission_type": a.permission} for a in group]})
    # Kafka leaves the message at its generated default, "" (the CreateAcls results too).
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": "", "resources": resources}


@api(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(ctx: AclApis, req: Request) -> CreateAclsResponse:
    creations = cast("CreateAclsRequest", req.body)["creations"]
    auth = ctx.authorizer
    if auth is None:
        return {"throttle_time_ms": 0, "results": [
            {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": NO_AUTHORIZER}
            for _ in creations]}
    auth.require_cluster(Operation.ALTER)
    if any(c["resource_type"] == ResourceType.ANY or c["resource_pattern_type"] in (PatternType.ANY, PatternType.MATCH)
           or c["operation"] == Operation.ANY or c["permission_type"] == Permission.ANY for c in creations):
        # Kafka builds an AclBinding of each creation first, and ANY in one fails the whole
        # request (IllegalArgumentException): UNKNOWN_SERVER_ERROR for every creation.
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)
    errors = auth.create([AclBinding(c["resource_type"], c["resource_name"], c["resource_pattern_type"],
                                     c["principal"], c["host"], c["operation"], c["permission_type"])
                          for c in creations])
    return {"throttle_time_ms": 0, "results": [
        {"error_code": int(ErrorCode.INVALID_REQUEST if err else ErrorCode.NONE), "error_message": err or ""}
        for err in errors]}


@api(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(ctx: AclApis, req: Request) -> DeleteAclsResponse:
    filters = cast("DeleteAclsRequest", req.body)["filters"]
    auth = ctx.authorizer
    if auth is None:
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": int(ErrorCode.SECURITY_DISABLED), "error_message": NO_AUTHORIZER,
             "matching_acls": []} for _ in filters]}
    auth.require_cluster(Operation.ALTER)
    results: list[DeleteAclsResponseFilterResult] = []
    for outcome in auth.delete([_filter(f) for f in filters]):
        if isinstance(outcome, str):
            results.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": outcome,
                            "matching_acls": []})
            continue
        results.append({"error_code": 0, "error_message": None, "matching_acls": [
            {"error_code": 0, "error_message": None, "resource_type": a.resource_type,
             "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
             "host": a.host, "operation": a.operation, "permission_type": a.permission}
            for a in outcome]})
    return {"throttle_time_ms": 0, "filter_results": results}
