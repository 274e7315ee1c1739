"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics, groups (broker.dynamic_configs.group_configs),
broker loggers (broker.dynamic_configs.logger_configs) and a read-only broker view."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.configs.topic_configs import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    TOPIC_CONFIGS,
)
from tmqgate.broker.dynamic_configs import logger_configs
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.broker.topics import TopicError, validate_configs
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.alter_configs import (
        AlterConfigsRequest,
        AlterConfigsRequestResource,
        AlterConfigsResponse,
        AlterConfigsResponseResourceResponse,
    )
    from tmqgate.protocol.bodies.describe_configs import (
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        DescribeConfigsResponseResourceResult,
        DescribeConfigsResponseResult,
        DescribeConfigsResponseSynonym,
    )
    from tmqgate.protocol.bodies.incremental_alter_configs import (
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsRequestAlterableConfig,
        IncrementalAlterConfigsRequestAlterConfigsResource,
        IncrementalAlterConfigsResponse,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

#: an alteration: a resource's current dynamic configs -> its new ones (None: back to the default)
Compute = Callable[[dict[str, str]], dict[str, str | None]]


def _refused(ctx: AdminApis, op: Operation, rtype: int, name: str) -> ErrorCode | None:
    """Kafka's configs check: `op` (DESCRIBE_CONFIGS / ALTER_CONFIGS) on the topic
    (TOPIC_AUTHORIZATION_FAILED) or, for a broker or its loggers, on the cluster
    (CLUSTER_AUTHORIZATION_FAILED); None when allowed or with no authorizer."""
    auth = ctx.authorizer
    if auth is None:
        return None
    if rtype == TOPIC:
        return None if auth.allows(op, ResourceType.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if rtype in (BROKER, BROKER_LOGGER):
        return None if auth.allows_cluster(op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if rtype == GROUP:
        return None if auth.allows(op, ResourceType.GROUP, name) else ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


@api(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: AdminApis, req: Request) -> DescribeConfigsResponse:
    body = cast("DescribeConfigsRequest", req.body)
    synonyms = body.get("include_synonyms", False)
    docs = body.get("include_documentation", False)
    results: list[DescribeConfigsResponseResult] = []
    for r in body["resources"]:
        rtype, name, keys = r["resource_type"], r["resource_name"], r.get("configuration_keys")
        result: DescribeConfigsResponseResult = {"error_code": 0, "error_message": None, "resource_type": rtype,
                                                 "resource_name": name, "configs": []}
        if (refused := _refused(ctx, Operation.DESCRIBE_CONFIGS, rtype, name)) is not None:
            result["error_code"] = int(refused)
        elif rtype == TOPIC:
            topic = ctx.topics.get(name)
            if topic is None:
                result.update({"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                               "error_message": f"Topic '{name}' does not exist."})
            else:
                for key in TOPIC_CONFIGS.values():
                    if keys is not None and key.name not in keys:
                        continue
                    own = key.name in topic.configs
                    broker = topic.broker_defaults.get(key.name)  # log.* from the file or dynamic
                    value = topic.config(key.name)
                    source = SOURCE_DYNAMIC_TOPIC if own else broker.source if broker else SOURCE_DEFAULT
                    entry: DescribeConfigsResponseResourceResult = {
                        "name": key.name, "value": value, "read_only": False, "config_source": source,
                        "is_sensitive": False, "config_type": key.type, "documentation": key.doc if docs else None,
                        "synonyms": []}
                    if synonyms and broker is None:
                        entry["synonyms"] = [{"name": key.name, "value": value, "source": source}]
                    elif synonyms and broker is not None:  # as Kafka: the topic's, the broker's, the default
                        topic_own: list[DescribeConfigsResponseSynonym] = (
                            [{"name": key.name, "value": value, "source": source}] if own else [])
                        entry["synonyms"] = topic_own + [
                            {"name": broker.broker_name, "value": broker.value, "source": broker.source},
                            {"name": broker.broker_name, "value": key.default, "source": SOURCE_DEFAULT}]
                    result["configs"].append(entry)
                # A TDengine topic's definition (tmq.as) shows as a read-only dynamic config.
                for name, value in topic.configs.items():
                    if name not in TOPIC_CONFIGS and (keys is None or name in keys):
                        result["configs"].append({
                            "name": name, "value": value, "read_only": True,
                            "config_source": SOURCE_DYNAMIC_TOPIC, "is_sensitive": False, "config_type": 2,
                            "documentation": None,
                            "synonyms": [{"name": name, "value": value, "source": SOURCE_DYNAMIC_TOPIC}]
                            if synonyms else []})
        elif rtype == BROKER and ctx.broker_configs is not None:
            try:  # (the config sources build their entries as plain dicts)
                result["configs"] = cast("list[DescribeConfigsResponseResourceResult]",
                                         ctx.broker_configs.describe(name, keys, synonyms, docs))
            except TopicError as exc:
                result.update({"error_code": int(exc.code), "error_message": exc.message})
        elif rtype == BROKER_LOGGER:
            try:
                result["configs"] = cast("list[DescribeConfigsResponseResourceResult]",
                                         logger_configs.describe(name, ctx.config.node_id, keys))
            except TopicError as exc:
                result.update({"error_code": int(exc.code), "error_message": exc.message})
        elif rtype == GROUP and ctx.group_configs is not None:
            try:
                result["configs"] = cast("list[DescribeConfigsResponseResourceResult]",
                                         ctx.group_configs.describe(name, keys, synonyms, docs))
            except TopicError as exc:
                result.update({"error_code": int(exc.code), "error_message": exc.message})
        else:
            result.update({"error_code": int(ErrorCode.INVALID_REQUEST),
                           "error_message": f"Unsupported resource type {rtype}"})
        results.append(result)
    return {"throttle_time_ms": 0, "results": results}


def _alter(ctx: AdminApis, rtype: int, name: str, compute: Compute,
           validate_only: bool) -> AlterConfigsResponseResourceResponse:
    """Apply `compute(current configs) -> new configs` to a topic resource; report as Kafka does.
    (IncrementalAlterConfigs' resource response has the same fields as AlterConfigs'.)"""
    out: AlterConfigsResponseResourceResponse = {"error_code": 0, "error_message": None, "resource_type": rtype,
                                                 "resource_name": name}
    if (refused := _refused(ctx, Operation.ALTER_CONFIGS, rtype, name)) is not None:
        out["error_code"] = int(refused)
        return out
    if rtype == BROKER and ctx.broker_configs is not None:
        try:
            ctx.broker_configs.alter(name, compute, validate_only)
        except TopicError as exc:
            out.update({"error_code": int(exc.code), "error_message": exc.message})
        return out
    if rtype == GROUP and ctx.group_configs is not None:
        try:
            ctx.group_configs.alter(name, compute, validate_only)
        except TopicError as exc:
            out.update({"error_code": int(exc.code), "error_message": exc.message})
        return out
    if rtype != TOPIC:
        # Kafka's answer to a type the API does not know (legacy AlterConfigs and BROKER_LOGGER).
        out.update({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": f"Unknown resource type {rtype}"})
        return out
    topic: Topic | None = ctx.topics.get(name)
    if topic is None:
        # As Kafka's controller: the configs are validated before the topic is looked up, so
        # `kafka-configs --alter --add-config tmq.as=…` on a new name says the name is unknown.
        try:
            validate_configs(compute({}))
        except TopicError as exc:
            out.update({"error_code": int(exc.code), "error_message": exc.message})
            return out
        out.update({"error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    "error_message": f"Topic '{name}' does not exist."})
        return out
    try:
        new = validate_configs(compute(dict(topic.configs)))
        if not validate_only:
            ctx.topics.set_configs(topic, new)
    except TopicError as exc:
        out.update({"error_code": int(exc.code), "error_message": exc.message})
    return out


@api(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: AdminApis, req: Request) -> AlterConfigsResponse:
    """AlterConfigs replaces the resource's whole set of dynamic configs."""
    body = cast("AlterConfigsRequest", req.body)

    def replace(r: AlterConfigsRequestResource) -> Compute:  # (mypy cannot type a lambda's r=r)
        return lambda _old: {c["name"]: c["value"] for c in r["configs"]}

    responses = [
        _alter(ctx, r["resource_type"], r["resource_name"], replace(r), body.get("validate_only", False))
        for r in body["resources"]
    ]
    return {"throttle_time_ms": 0, "responses": responses}


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: AdminApis, req: Request) -> IncrementalAlterConfigsResponse:
    body = cast("IncrementalAlterConfigsRequest", req.body)

    def apply(changes: list[IncrementalAlterConfigsRequestAlterableConfig]) -> Compute:
        def compute(old: dict[str, str]) -> dict[str, str | None]:
            new: dict[str, str | None] = dict(old)
            for c in changes:
                name, op, value = c["name"], c["config_operation"], c["value"]
                key = TOPIC_CONFIGS.get(name)
                if op == SET:
                    new[name] = value
                elif op == DELETE:
                    new.pop(name, None)
                elif op in (APPEND, SUBTRACT):
                    if key is None or key.type != 7:
                        raise TopicError(ErrorCode.INVALID_CONFIG,
                                         f"Config value append/subtract is not allowed for config key {name}")
                    items = [v for v in (new.get(name) or key.default).split(",") if v]
                    for v in (value or "").split(","):
                        if op == APPEND and v not in items:
                            items.append(v)
                        elif op == SUBTRACT and v in items:
                            items.remove(v)
                    new[name] = ",".join(items)
                else:
                    raise TopicError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
            return new
        return compute

    responses = [
        _alter_loggers(ctx, r, body.get("validate_only", False)) if r["resource_type"] == BROKER_LOGGER
        else _alter(ctx, r["resource_type"], r["resource_name"], apply(r["configs"]), body.get("validate_only", False))
        for r in body["resources"]
    ]
    return {"throttle_time_ms": 0, "responses": responses}


def _alter_loggers(ctx: AdminApis, r: IncrementalAlterConfigsRequestAlterConfigsResource,
                   validate_only: bool) -> AlterConfigsResponseResourceResponse:
    """IncrementalAlterConfigs on BROKER_LOGGER: log levels changed at run time."""
    name = r["resource_name"]
    out: AlterConfigsResponseResourceResponse = {"error_code": 0, "error_message": None, "resource_type": BROKER_LOGGER,
                           "resource_name": name}
    if (refused := _refused(ctx, Operation.ALTER_CONFIGS, BROKER_LOGGER, name)) is not None:
        out["error_code"] = int(refused)
        return out
    try:
        logger_configs.alter(name, ctx.config.node_id, cast("list[dict[str, Any]]", r["configs"]), validate_only)
    except TopicError as exc:
        out.update({"error_code": int(exc.code), "error_message": exc.message})
    return out
