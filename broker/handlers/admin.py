"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords.
(InitProducerId is broker/handlers/transactions.py's.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.configs.topic_configs import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    TOPIC_CONFIGS,
    cleanup_policies,
)
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.ops.quotas.rates import MutationQuota
from tmqgate.broker.topics import KAFKA, TMQ_AS, TSDB, TopicError
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import StorageIOError

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.create_partitions import (
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreatePartitionsResponseTopicResult,
    )
    from tmqgate.protocol.bodies.create_topics import (
        CreateTopicsRequest,
        CreateTopicsRequestCreatableTopic,
        CreateTopicsResponse,
        CreateTopicsResponseCreatableTopicResult,
    )
    from tmqgate.protocol.bodies.delete_records import (
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteRecordsResponsePartitionResult,
        DeleteRecordsResponseTopicResult,
    )
    from tmqgate.protocol.bodies.delete_topics import (
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        DeleteTopicsResponseDeletableTopicResult,
    )
    from tmqgate.protocol.messages import Request

    #: an entry of CreateTopics', DeleteTopics' or CreatePartitions' answer (each has an error)
    _Result = (CreateTopicsResponseCreatableTopicResult | DeleteTopicsResponseDeletableTopicResult
               | CreatePartitionsResponseTopicResult)

api = apis_with(AdminApis)

INT16_MAX = 2**15 - 1
# Kafka's controller takes at most 10,000 partitions in one request (max_partitions_per_request
# here). CreateTopics over it: POLICY_VIOLATION with this message, for every topic. Kafka 4.3 has
# no clean refusal for CreatePartitions (adding 10,001 took a minute, answered
# UNKNOWN_SERVER_ERROR and left the partitions created); we refuse it as CreateTopics.
TOO_LARGE = "Excessively large number of partitions per request."


def _fail(entry: _Result, code: ErrorCode, message: str | None = None) -> None:
    """Answer a result entry with `code` and `message`."""
    entry["error_code"] = int(code)
    entry["error_message"] = message


def _mutation_quota(ctx: AdminApis, req: Request, strict_since: int) -> MutationQuota | None:
    """controller_mutation_rate (KIP-599) for this request: strict (topics over it refused with
    THROTTLING_QUOTA_EXCEEDED) from `strict_since`, permissive (throttled only) before; None
    when no such quota applies to the client."""
    return None if ctx.quotas is None else ctx.quotas.mutation_quota(req.client_id, req.api_version, strict_since)


def _take(mutation: MutationQuota | None, partitions: int) -> None:
    """Record a topic's partition mutations, after its other checks (Kafka's controller)."""
    if mutation is not None and not mutation.record(partitions):
        raise TopicError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)  # no message: Kafka's is the code's own


def _throttle(mutation: MutationQuota | None) -> int:
    return 0 if mutation is None else mutation.throttle_time_ms()


def _denied_topics(ctx: AdminApis, op: Operation, names: list[str]) -> set[str]:
    """The names the client may not `op` (empty with no authorizer)."""
    auth = ctx.authorizer
    if auth is None:
        return set()
    return set(names) - auth.allowed(op, ResourceType.TOPIC, set(names))


@api(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: AdminApis, req: Request) -> CreateTopicsResponse:
    body = cast("CreateTopicsRequest", req.body)
    validate_only = body.get("validate_only", False)
    names = [t["name"] for t in body["topics"]]
    # CREATE on the cluster, else on each topic (Kafka's ControllerApis): "Authorization failed."
    auth = ctx.authorizer
    denied = (set() if auth is None or auth.allows_cluster(Operation.CREATE)
              else _denied_topics(ctx, Operation.CREATE, names))
    results: list[CreateTopicsResponseCreatableTopicResult] = []
    if _requested_partitions(ctx, body["topics"]) > ctx.config.max_partitions_per_request:
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "topic_id": ZERO_UUID, "num_partitions": -1, "replication_factor": -1,
             "configs": None, "error_code": int(ErrorCode.POLICY_VIOLATION), "error_message": TOO_LARGE}
            for t in body["topics"]]}
    mutation = _mutation_quota(ctx, req, 6)
    for t in body["topics"]:
        name = t["name"]
        result: CreateTopicsResponseCreatableTopicResult = {
            "name": name, "topic_id": ZERO_UUID, "num_partitions": -1, "replication_factor": -1, "configs": None,
            "error_code": 0, "error_message": None}
        if names.count(name) > 1:
            _fail(result, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            results.append(result)
            continue
        if name in denied:
            _fail(result, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            results.append(result)
            continue
        try:
            partitions, replication, replicas = _layout(ctx, t)
            configs = {c["name"]: c["value"] for c in t.get("configs") or []}
            if configs.get(TMQ_AS) is not None and t["num_partitions"] == -1:
                partitions = -1  # a TDengine topic's default: its database's vnodes, not num_partitions
            if auth is not None and configs.get(TMQ_AS) is not None:
                # A TDengine topic (a view) shows its database's data: making one needs READ
                # on the database's topic, so nobody reads through a view what they may not read.
                source = ctx.topics.create(name, partitions, configs, validate_only=True).db
                if not auth.allows(Operation.READ, ResourceType.TOPIC, source):
                    raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                     f"Authorization failed: a topic over '{source}' needs READ on it.")
            if mutation is not None:
                _take(mutation, ctx.topics.create(name, partitions, configs, validate_only=True).partitions)
            client = current_client.get()  # a TDengine topic's owner (broker/sql/access.py)
            owner = (client.principal, client.host)
            if not validate_only:  # through etcd on a cluster
                topic = await ctx.topics.cluster.create(name, partitions, configs, replicas, replication, owner=owner)
            else:
                topic = ctx.topics.create(name, partitions, configs, validate_only=True, owner=owner)
        except TopicError as exc:
            _fail(result, exc.code, exc.message)
            results.append(result)
            continue
        except StorageIOError as exc:  # Errors.forException(KafkaStorageException), as Kafka
            _fail(result, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
            results.append(result)
            continue
        result.update({"topic_id": topic.topic_id if not validate_only else ZERO_UUID,
                       "num_partitions": topic.partitions, "replication_factor": replication,
                       "configs": [
                           {"name": key.name, "value": topic.configs.get(key.name, key.default),
                            "read_only": False, "is_sensitive": False,
                            "config_source": SOURCE_DYNAMIC_TOPIC if key.name in topic.configs else SOURCE_DEFAULT}
                           for key in TOPIC_CONFIGS.values()]})
        if auth is not None and not auth.allows(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name):
            # Kafka's controller: created, but its configs (and layout) are not shown to a
            # client that may not DESCRIBE_CONFIGS it.
            result.update({"num_partitions": -1, "replication_factor": -1, "configs": [],
                           "topic_config_error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})
        results.append(result)
    return {"throttle_time_ms": _throttle(mutation), "topics": results}


def _requested_partitions(ctx: AdminApis, topics: list[CreateTopicsRequestCreatableTopic]) -> int:
    """The partitions a CreateTopics request asks for, over all its topics (as Kafka's
    controller counts the records of one operation), before anything is allocated."""
    total = 0
    for t in topics:
        if t.get("assignments"):
            total += len(t["assignments"])
        elif t["num_partitions"] == -1:
            total += ctx.config.num_partitions
        elif t["num_partitions"] > 0:
            total += t["num_partitions"]
    return total


def _layout(ctx: AdminApis, t: CreateTopicsRequestCreatableTopic) -> tuple[int, int, list[list[int]] | None]:
    """Partition count, replication factor and the replicas asked for (None: the broker
    places them) of a CreateTopics entry, checked as Kafka does."""
    node = ctx.config.node_id
    cluster = not ctx.topics.cluster.alone  # then any registered broker may hold a replica
    assignments = t.get("assignments") or []
    if assignments:
        if t["num_partitions"] != -1 or t["replication_factor"] != -1:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             "Both numPartitions or replicationFactor and replicasAssignments were set. "
                             "Both cannot be used at the same time.")
        indexes = sorted(a["partition_index"] for a in assignments)
        if indexes != list(range(len(indexes))):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Partitions should be a consecutive 0-based integer sequence")
        for a in assignments:
            ids = a["broker_ids"]
            if not cluster and ids != [node]:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Replica assignment {ids} names brokers other than {node}")
            if not ids or len(set(ids)) != len(ids):
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers or no broker in the replica assignment {ids}")
        ordered = sorted(assignments, key=lambda a: a["partition_index"])
        return len(indexes), len(ordered[0]["broker_ids"]), [list(a["broker_ids"]) for a in ordered]
    partitions = t["num_partitions"]
    if partitions == -1:
        partitions = ctx.config.num_partitions
    if partitions < 1:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    replication = t["replication_factor"]
    if replication == -1:
        replication = ctx.config.default_replication_factor
    if replication < 1:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         "Replication factor must be larger than 0, or -1 to use the default value.")
    if replication > 1 and not cluster:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {replication} time(s): The target replication "
                         f"factor of {replication} cannot be reached because only 1 broker(s) are registered.")
    return partitions, replication, None


@api(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: AdminApis, req: Request) -> DeleteTopicsResponse:
    body = cast("DeleteTopicsRequest", req.body)
    if req.api_version >= 6:
        wanted = [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in body["topics"]]
    else:
        wanted = [(name, ZERO_UUID) for name in body["topic_names"]]
    responses: list[DeleteTopicsResponseDeletableTopicResult] = []
    auth = ctx.authorizer
    if auth is not None and auth.allows_cluster(Operation.DELETE):
        auth = None  # Kafka's controller: DELETE on the cluster deletes any topic
    mutation = _mutation_quota(ctx, req, 5)
    for name, topic_id in wanted:
        topic = ctx.topics.get(name) if name is not None else ctx.topics.by_id(topic_id)
        entry: DeleteTopicsResponseDeletableTopicResult = {"name": name, "topic_id": topic_id, "error_code": 0,
                                                             "error_message": None}
        target = name if name is not None else topic.name if topic is not None else None
        if auth is not None and target is not None and not auth.allows(Operation.DELETE, ResourceType.TOPIC, target):
            _fail(entry, ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # else DELETE on the topic
        elif topic is None:
            _fail(entry, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID,
                  "This server does not host this topic-partition.")
        else:
            entry.update({"name": topic.name, "topic_id": topic.topic_id})
            try:
                if topic.kind != TSDB:  # (a database topic is refused below, taking nothing)
                    _take(mutation, topic.partitions)
                if topic.kind == KAFKA:
                    await ctx.topics.cluster.delete(topic)  # through etcd on a cluster
                else:
                    ctx.topics.delete(topic)
            except StorageIOError as exc:
                _fail(entry, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
            except TopicError as exc:  # a database topic: DROP DATABASE deletes it
                _fail(entry, exc.code, exc.message)
        responses.append(entry)
    return {"throttle_time_ms": _throttle(mutation), "responses": responses}


@api(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: AdminApis, req: Request) -> CreatePartitionsResponse:
    body = cast("CreatePartitionsRequest", req.body)
    results: list[CreatePartitionsResponseTopicResult] = []
    added = 0
    for t in body["topics"]:
        topic = ctx.topics.get(t["name"])
        if topic is not None and t["count"] > topic.partitions:
            added += t["count"] - topic.partitions
    if added > ctx.config.max_partitions_per_request:
        return {"throttle_time_ms": 0, "results": [
            {"name": t["name"], "error_code": int(ErrorCode.POLICY_VIOLATION), "error_message": TOO_LARGE}
            for t in body["topics"]]}
    denied = _denied_topics(ctx, Operation.ALTER, [t["name"] for t in body["topics"]])
    mutation = _mutation_quota(ctx, req, 3)
    for t in body["topics"]:
        entry: CreatePartitionsResponseTopicResult = {"name": t["name"], "error_code": 0, "error_message": None}
        topic = ctx.topics.get(t["name"])
        try:
            if t["name"] in denied:  # ALTER on the topic
                raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if topic is None:
                raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t['name']}' does not exist.")
            assignments = [list(a["broker_ids"]) for a in t["assignments"]] if t["assignments"] else None
            if mutation is not None:  # checked in full first: a refused change takes no quota
                await ctx.topics.cluster.add_partitions(topic, t["count"], assignments, validate_only=True)
                _take(mutation, t["count"] - topic.partitions)
            # through etcd for a topic a cluster shares
            await ctx.topics.cluster.add_partitions(topic, t["count"], assignments, body.get("validate_only", False))
        except TopicError as exc:
            _fail(entry, exc.code, exc.message)
        except StorageIOError as exc:
            _fail(entry, ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
        results.append(entry)
    return {"throttle_time_ms": _throttle(mutation), "results": results}


@api(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: AdminApis, req: Request) -> DeleteRecordsResponse:
    body = cast("DeleteRecordsRequest", req.body)
    store = ctx.store
    topics: list[DeleteRecordsResponseTopicResult] = []
    denied = _denied_topics(ctx, Operation.DELETE, [t["name"] for t in body["topics"]])
    for t in body["topics"]:
        topic = ctx.topics.get(t["name"])
        parts: list[DeleteRecordsResponsePartitionResult] = []
        for p in t["partitions"]:
            index = p["partition_index"]
            entry: DeleteRecordsResponsePartitionResult = {"partition_index": index, "low_watermark": -1,
                                                           "error_code": 0}
            error = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if t["name"] in denied  # DELETE on the topic
                     else ctx.topics.partition_error(topic, index))
            if error is None and topic is not None and topic.is_internal:
                error = ErrorCode.INVALID_TOPIC_EXCEPTION  # Kafka's ReplicaManager refuses internal topics
            if error is not None:
                entry["error_code"] = int(error)
            elif topic is not None and "delete" not in cleanup_policies(topic.configs):
                # Kafka's Partition.deleteRecordsOnLeader: a topic whose cleanup.policy lacks
                # delete (compact only, or empty) refuses DeleteRecords.
                entry["error_code"] = int(ErrorCode.POLICY_VIOLATION)
            else:
                assert topic is not None
                hw = store.next_version(topic.db, index)
                offset = hw if p["offset"] == -1 else p["offset"]
                if not 0 <= offset <= hw:
                    entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                else:
                    try:
                        if offset > store.log_start(topic.db, index):
                            store.delete_before(topic.db, index, offset)
                        entry["low_watermark"] = store.log_start(topic.db, index)
                    except StorageIOError:  # as Kafka's offline log dir
                        entry["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}
