"""InitProducerId and the transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions — answered by the transaction coordinator
(coordinator/transactions.py through broker/runtime/txn_coordinator.py) with KafkaApis' checks.

Transaction version 1: the client adds partitions with AddPartitionsToTxn v0-3; v4-5 are the
brokers' batched form (CLUSTER_ACTION, with ``verify_only``), served for the tools.
Transaction version 2 (KIP-890 part 2; chosen by clients from the finalized
``transaction.version`` feature ApiVersions gives): Produce v12+ and TxnOffsetCommit v5+ add
their partition / group implicitly, and EndTxn v5 bumps the epoch at every commit and abort,
answering the new producer id and epoch — as Kafka, by the request version. PRODUCER_FENCED
becomes INVALID_PRODUCER_EPOCH for the request versions before it existed (KIP-588), as
KafkaApis does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.handlers.context import TxnApis
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
    from tmqgate.protocol.bodies.add_partitions_to_txn import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnRequestTransaction,
        AddPartitionsToTxnResponse,
        AddPartitionsToTxnResponsePartitionResult,
        AddPartitionsToTxnResponseResult,
        AddPartitionsToTxnResponseTopicResult,
    )
    from tmqgate.protocol.bodies.describe_transactions import (
        DescribeTransactionsRequest,
        DescribeTransactionsResponse,
        DescribeTransactionsResponseTransactionState,
    )
    from tmqgate.protocol.bodies.end_txn import EndTxnRequest, EndTxnResponse
    from tmqgate.protocol.bodies.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
    from tmqgate.protocol.bodies.list_transactions import ListTransactionsRequest, ListTransactionsResponse
    from tmqgate.protocol.messages import Request

api = apis_with(TxnApis)



def _fenced_as(code: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED for requests that know it; INVALID_PRODUCER_EPOCH before."""
    if code is ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


@api(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: TxnApis, req: Request) -> InitProducerIdResponse:
    """A transactional id's producer id and next epoch from the coordinator; without one, a new
    producer id with epoch 0 — also for an idempotent producer that gives its id and epoch:
    Kafka's TransactionCoordinator.handleInitProducerId "blindly" hands out a new id then
    (idempotent clients bump their epoch locally, KIP-360)."""
    body = cast("InitProducerIdRequest", req.body)
    txn = body.get("transactional_id")
    auth = ctx.authorizer
    if auth is not None:
        if txn is not None:
            auth.require(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn)
        elif not (auth.allows_cluster(Operation.IDEMPOTENT_WRITE)
                  or auth.allows_by_type(Operation.WRITE, ResourceType.TOPIC)):
            # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
            # some topic, else CLUSTER_AUTHORIZATION_FAILED.
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    producer_id = body.get("producer_id", -1)
    epoch = body.get("producer_epoch", -1)
    if (producer_id == -1) != (epoch == -1):
        raise KafkaError(ErrorCode.INVALID_REQUEST)
    coordinator = ctx.coordinator
    if txn is None:
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": coordinator.machine.new_producer_id(),
                "producer_epoch": 0}
    if ctx.elsewhere(txn):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR), "producer_id": -1,
                "producer_epoch": -1}
    expected = (producer_id, epoch) if producer_id != -1 else None
    result = coordinator.machine.init_producer_id(coordinator.now(), txn, body["transaction_timeout_ms"], expected)
    coordinator.retry_soon()
    error = await ctx.replicated(txn) if result.error is ErrorCode.NONE else None
    if error is not None:
        return {"throttle_time_ms": 0, "error_code": int(error), "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": int(_fenced_as(result.error, req.api_version, 4)),
            "producer_id": result.producer_id, "producer_epoch": result.producer_epoch}


def _partition_results(errors: dict[tuple[str, int], ErrorCode]) -> list[AddPartitionsToTxnResponseTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnResponsePartitionResult]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": int(code)})
    return [{"name": t, "results_by_partition": parts} for t, parts in by_topic.items()]


def _add_partitions(ctx: TxnApis, version: int, txn: AddPartitionsToTxnRequestTransaction, check_topics: bool
                    ) -> dict[tuple[str, int], ErrorCode]:
    """One transaction of an AddPartitionsToTxn request: each partition's answer."""
    tid = txn["transactional_id"]
    wanted = [(t["name"], p) for t in txn["topics"] for p in t["partitions"]]
    auth = ctx.authorizer
    if check_topics and auth is not None and not auth.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    names = {t for t, _ in wanted}
    allowed = auth.allowed(Operation.WRITE, ResourceType.TOPIC, names) if check_topics and auth is not None else names
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic, partition in wanted:
        found = ctx.topics.get(topic)
        if topic not in allowed:
            refused[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif found is None or not 0 <= partition < found.partitions:
            refused[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:  # any failed partition fails the transaction's request; the others not attempted
        return {p: refused.get(p, ErrorCode.OPERATION_NOT_ATTEMPTED) for p in wanted}
    if ctx.elsewhere(tid):
        return dict.fromkeys(wanted, ErrorCode.NOT_COORDINATOR)
    coordinator = ctx.coordinator
    if txn.get("verify_only"):
        return coordinator.machine.verify_partitions(tid, txn["producer_id"], txn["producer_epoch"], wanted)
    code = coordinator.machine.add_partitions(coordinator.now(), tid, txn["producer_id"], txn["producer_epoch"],
                                              wanted)
    return dict.fromkeys(wanted, _fenced_as(code, version, 2))


async def _replicated(ctx: TxnApis, txn: AddPartitionsToTxnRequestTransaction, errors: dict[tuple[str, int], ErrorCode]
                      ) -> dict[tuple[str, int], ErrorCode]:
    """Partitions added (not only verified) are answered once the id's new state is on the
    in-sync replicas (a cluster); else the replication's error."""
    if txn.get("verify_only") or not any(code is ErrorCode.NONE for code in errors.values()):
        return errors
    error = await ctx.replicated(txn["transactional_id"])
    return errors if error is None else {p: error if c is ErrorCode.NONE else c for p, c in errors.items()}


@api(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: TxnApis, req: Request) -> AddPartitionsToTxnResponse:
    body = cast("AddPartitionsToTxnRequest", req.body)
    if req.api_version < 4:  # one transaction, from a client
        txn: AddPartitionsToTxnRequestTransaction = {"transactional_id": body["v3_and_below_transactional_id"],
               "producer_id": body["v3_and_below_producer_id"],
               "producer_epoch": body["v3_and_below_producer_epoch"],
               "topics": body["v3_and_below_topics"], "verify_only": False}
        errors = await _replicated(ctx, txn, _add_partitions(ctx, req.api_version, txn, check_topics=True))
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _partition_results(errors)}
    # v4+: batches of transactions, sent by brokers (KIP-890)
    if ctx.authorizer is not None:
        ctx.authorizer.require_cluster(Operation.CLUSTER_ACTION)
    results: list[AddPartitionsToTxnResponseResult] = []
    for txn in body["transactions"]:
        if txn["transactional_id"] is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Transactional ID can not be null in request.")
        errors = await _replicated(ctx, txn, _add_partitions(ctx, req.api_version, txn, check_topics=False))
        results.append({"transactional_id": txn["transactional_id"], "topic_results": _partition_results(errors)})
    return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": results}


@api(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: TxnApis, req: Request) -> AddOffsetsToTxnResponse:
    body = cast("AddOffsetsToTxnRequest", req.body)
    auth = ctx.authorizer
    if auth is not None:
        if not auth.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"]):
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}
        if not auth.allows(Operation.READ, ResourceType.GROUP, body["group_id"]):
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    if ctx.elsewhere(body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR)}
    coordinator = ctx.coordinator
    code = coordinator.machine.add_offsets(coordinator.now(), body["transactional_id"], body["producer_id"],
                                           body["producer_epoch"], body["group_id"])
    if code is ErrorCode.NONE:
        code = await ctx.replicated(body["transactional_id"]) or code
    return {"throttle_time_ms": 0, "error_code": int(_fenced_as(code, req.api_version, 2))}


@api(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: TxnApis, req: Request) -> EndTxnResponse:
    body = cast("EndTxnRequest", req.body)
    if ctx.authorizer is not None:
        ctx.authorizer.require(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"])
    if ctx.elsewhere(body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.NOT_COORDINATOR), "producer_id": -1,
                "producer_epoch": -1}
    coordinator = ctx.coordinator
    result = coordinator.machine.end_txn(coordinator.now(), body["transactional_id"], body["producer_id"],
                                         body["producer_epoch"], bool(body["committed"]),
                                         transaction_version=2 if req.api_version >= 5 else 1)
    coordinator.retry_soon()
    error = await ctx.replicated(body["transactional_id"]) if result.error is ErrorCode.NONE else None
    if error is not None:
        return {"throttle_time_ms": 0, "error_code": int(error), "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": int(_fenced_as(result.error, req.api_version, 2)),
            "producer_id": result.producer_id, "producer_epoch": result.producer_epoch}


@api(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: TxnApis, req: Request) -> DescribeTransactionsResponse:
    auth = ctx.authorizer
    states: list[DescribeTransactionsResponseTransactionState] = []
    for tid in cast("DescribeTransactionsRequest", req.body)["transactional_ids"]:
        entry: DescribeTransactionsResponseTransactionState = {"transactional_id": tid, "error_code": 0,
                                                               "transaction_state": "",
                                 "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                                 "producer_id": -1, "producer_epoch": -1, "topics": []}
        meta = ctx.coordinator.machine.get(tid) if tid else None
        if auth is not None and not auth.allows(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            entry["error_code"] = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        elif not tid:
            entry["error_code"] = int(ErrorCode.INVALID_REQUEST)
        elif ctx.elsewhere(tid):
            entry["error_code"] = int(ErrorCode.NOT_COORDINATOR)
        elif meta is None or meta.producer_epoch == -1:  # never initialised (or expired)
            entry["error_code"] = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(meta.partitions):
                by_topic.setdefault(topic, []).append(partition)
            visible = (auth.allowed(Operation.DESCRIBE, ResourceType.TOPIC, set(by_topic))
                       if auth is not None else set(by_topic))
            entry.update({"transaction_state": meta.state.value, "transaction_timeout_ms": meta.timeout_ms,
                          "transaction_start_time_ms": meta.start_ms, "producer_id": meta.producer_id,
                          "producer_epoch": meta.producer_epoch,
                          "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items() if t in visible]})
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


@api(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx: TxnApis, req: Request) -> ListTransactionsResponse:
    body = cast("ListTransactionsRequest", req.body)
    coordinator = ctx.coordinator
    code, unknown, found = coordinator.machine.list_transactions(
        coordinator.now(), body.get("state_filters") or [], body.get("producer_id_filters") or [],
        body.get("duration_filter", -1), body.get("transactional_id_pattern"))
    auth = ctx.authorizer
    ids = {m.transactional_id for m in found}
    visible = auth.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, ids) if auth is not None else ids
    return {"throttle_time_ms": 0, "error_code": int(code), "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                    "transaction_state": m.state.value}
                                   for m in sorted(found, key=lambda m: m.transactional_id)
                                   if m.transactional_id in visible]}
