"""DescribeClientQuotas and AlterClientQuotas (KIP-546), as Kafka 4.3 answers them; the rules
are in broker/ops/quotas/."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.broker.ops.quotas.configs import IP, QuotaError, valid_ip
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.alter_client_quotas import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
    )
    from tmqgate.protocol.bodies.describe_client_quotas import (
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
        DescribeClientQuotasResponseEntryData,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)

# Kafka's AlterClientQuotas error answer carries the code's message (Describe's none).
_CLUSTER_DENIED = "Cluster authorization failed."


def _cluster_denied(ctx: AdminApis, op: Operation) -> bool:
    """Kafka asks DESCRIBE_CONFIGS (describe) / ALTER_CONFIGS (alter) on the cluster."""
    return ctx.authorizer is not None and not ctx.authorizer.allows_cluster(op)


@api(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe_client_quotas(ctx: AdminApis, req: Request) -> DescribeClientQuotasResponse:
    assert ctx.quotas is not None
    body = cast("DescribeClientQuotasRequest", req.body)
    if _cluster_denied(ctx, Operation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                "error_message": None, "entries": None}
    try:
        # (broker/quotas takes the request's and builds the answer's entries as plain dicts)
        entries = cast("list[DescribeClientQuotasResponseEntryData]",
                       ctx.quotas.describe(req.body["components"], body["strict"]))
    except QuotaError as exc:  # Kafka's getErrorResponse: the code, the message, no entries
        return {"throttle_time_ms": 0, "error_code": int(exc.code), "error_message": exc.message,
                "entries": None}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


@api(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter_client_quotas(ctx: AdminApis, req: Request) -> AlterClientQuotasResponse:
    assert ctx.quotas is not None
    body = cast("AlterClientQuotasRequest", req.body)
    if _cluster_denied(ctx, Operation.ALTER_CONFIGS):  # every entry refused, nothing changed
        return {"throttle_time_ms": 0, "entries": [
            {"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "error_message": _CLUSTER_DENIED,
             "entity": [{"entity_type": e["entity_type"], "entity_name": e["entity_name"]} for e in entry["entity"]]}
            for entry in body["entries"]]}
    # An ip entity may name a host (Kafka: InetAddress.getByName); resolved off the event loop.
    hosts = {e["entity_name"] for entry in body["entries"] for e in entry["entity"]
             if e["entity_type"] == IP and not valid_ip(e["entity_name"])}
    resolvable = {h: await _resolves(h) for h in hosts if h}
    results = ctx.quotas.alter(req.body["entries"], body["validate_only"], resolvable)  # (plain dicts)
    return {"throttle_time_ms": 0, "entries": [
        {"error_code": int(r.code), "error_message": r.message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in r.entity]}
        for r in results]}


async def _resolves(host: str) -> bool:
    with contextlib.suppress(OSError, UnicodeError):
        async with asyncio.timeout(5):
            await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
            return True
    return False
