"""SASL and SCRAM credential APIs: SaslHandshake and SaslAuthenticate where no authentication
is going on, DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

On a SASL listener the connection's session (broker/auth/session.py) answers SaslHandshake and
SaslAuthenticate itself while it authenticates; what reaches these handlers is what KafkaApis
sees: a PLAINTEXT/SSL connection, or one already authenticated. Kafka answers both with
ILLEGAL_SASL_STATE there.

The credential APIs act on storage.users as Kafka's controller (ScramControlManager) and its
metadata image (ScramImage.describe) do: same validation, codes and messages. Under an
authorizer Alter needs ALTER on the cluster and Describe DESCRIBE on it (KIP-554; before
issue 25 neither was checked, and any client could replace the super user's credential).
Refused, every user named gets CLUSTER_AUTHORIZATION_FAILED and nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.auth import scram
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.alter_user_scram_credentials import (
        AlterUserScramCredentialsRequest,
        AlterUserScramCredentialsRequestScramCredentialDeletion,
        AlterUserScramCredentialsRequestScramCredentialUpsertion,
        AlterUserScramCredentialsResponse,
        AlterUserScramCredentialsResponseResult,
    )
    from tmqgate.protocol.bodies.describe_user_scram_credentials import (
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        DescribeUserScramCredentialsResponseResult,
    )
    from tmqgate.protocol.bodies.sasl_authenticate import SaslAuthenticateResponse
    from tmqgate.protocol.bodies.sasl_handshake import SaslHandshakeResponse
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)


@api(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: AdminApis, req: Request) -> SaslHandshakeResponse:
    return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}


@api(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: AdminApis, req: Request) -> SaslAuthenticateResponse:
    return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE),
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}


@api(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: AdminApis, req: Request) -> DescribeUserScramCredentialsResponse:
    requested = [u["name"] for u in cast("DescribeUserScramCredentialsRequest", req.body).get("users") or []]
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.DESCRIBE):
        # Kafka's error answer: a result per user asked for, with an empty name
        denied = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        return {"throttle_time_ms": 0, "error_code": denied, "error_message": None, "results": [
            {"user": "", "error_code": denied, "error_message": None, "credential_infos": []} for _ in requested]}
    stored = ctx.store.users.scram_users()
    names = requested or list(stored)
    results: list[DescribeUserScramCredentialsResponseResult] = []
    for name in dict.fromkeys(names):  # each user once, in the request's order
        result: DescribeUserScramCredentialsResponseResult = {"user": name, "error_code": 0, "error_message": None,
                                                              "credential_infos": []}
        if requested.count(name) > 1:
            result.update({"error_code": int(ErrorCode.DUPLICATE_RESOURCE), "error_message": (
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}")})
        elif name not in stored:
            result.update({"error_code": int(ErrorCode.RESOURCE_NOT_FOUND),
                           "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
        else:
            result["credential_infos"] = [
                {"mechanism": scram.MECHANISM_CODES[m], "iterations": c.iterations}
                for m, c in sorted(stored[name].items(), key=lambda mc: scram.MECHANISM_CODES.get(mc[0], 99))
                if m in scram.MECHANISM_CODES]
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in scram.MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


@api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: AdminApis, req: Request) -> AlterUserScramCredentialsResponse:
    """All valid changes of the request are applied, each user's alone failing (Kafka applies
    them atomically from the controller; a user named twice fails DUPLICATE_RESOURCE)."""
    body = cast("AlterUserScramCredentialsRequest", req.body)
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.ALTER):
        message = "Request needs ALTER permission."  # Kafka's controller puts the request's toString in it
        return {"throttle_time_ms": 0, "results": [
            {"user": change["name"], "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
             "error_message": message}
            for change in [*(body.get("deletions") or []), *(body.get("upsertions") or [])]]}
    users = ctx.store.users
    deletions: dict[str, AlterUserScramCredentialsRequestScramCredentialDeletion] = {}
    upsertions: dict[str, AlterUserScramCredentialsRequestScramCredentialUpsertion] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    twice = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    for d in body.get("deletions") or []:
        name = d["name"]
        if name in errors:
            continue
        if deletions.pop(name, None) is not None:
            errors[name] = twice
            continue
        problem = _check_name_and_mechanism(name, d["mechanism"])
        if problem is None and users.scram(name, scram.MECHANISM_NAMES[d["mechanism"]]) is None:
            problem = ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if problem is not None:
            errors[name] = problem
        else:
            deletions[name] = d
    for u in body.get("upsertions") or []:
        name = u["name"]
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = twice
            continue
        problem = _check_name_and_mechanism(name, u["mechanism"])
        if problem is None and u["iterations"] < scram.MIN_ITERATIONS:
            problem = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        elif problem is None and u["iterations"] > scram.MAX_ITERATIONS:
            problem = ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if problem is not None:
            errors[name] = problem
        else:
            upsertions[name] = u
    results: list[AlterUserScramCredentialsResponseResult] = []
    for name, d in deletions.items():
        users.delete_scram(name, scram.MECHANISM_NAMES[d["mechanism"]])
        results.append({"user": name, "error_code": 0, "error_message": None})
    for name, u in upsertions.items():
        mechanism = scram.MECHANISM_NAMES[u["mechanism"]]
        credential = scram.credential_from_salted(mechanism, bytes(u["salted_password"]), bytes(u["salt"]),
                                                  u["iterations"])
        users.put_scram(name, mechanism, credential)
        results.append({"user": name, "error_code": 0, "error_message": None})
    for name, (code, message) in errors.items():
        results.append({"user": name, "error_code": int(code), "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
