"""Produce: validate each partition's record batch and append it to the vnode's WAL as bytes.

The batch is validated as Kafka's LogValidator does (CRC, then every record parsed, the
payload decompressed with its size bounded by the broker's max_decompressed_batch_bytes; the
topic's max.message.bytes bounds the batch as sent, compressed, as Kafka's does) but stored as
received: the stored copy differs only in its base offset (outside the CRC).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, Deferred, apis_with
from tmqgate.broker.configs.topic_configs import is_compacted
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.handlers.context import DataPlane
from tmqgate.broker.handlers.leader_hints import point_to_leaders
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.tdengine import IngestError, ingest
from tmqgate.broker.topics import TMQ, TSDB
from tmqgate.protocol import clock
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.compression import CorruptRecord
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import (
    MAGIC,
    BatchHeader,
    iter_batches,
    verify_crc,
    with_log_append_time,
)
from tmqgate.protocol.validate import DecompressedTooLarge, InvalidRecords, Validated, validate_records
from tmqgate.storage import StorageIOError
from tmqgate.storage.producers import ProducerAppend, check_sequence

if TYPE_CHECKING:
    from tmqgate.broker.runtime.replicas import Replicas
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.produce import (
        ProduceRequest,
        ProduceResponse,
        ProduceResponsePartitionProduceResponse,
        ProduceResponseTopicProduceResponse,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(DataPlane)


class ProduceError(KafkaError):
    """A partition's batch Kafka refuses; ``record_errors`` are the response's (KIP-467):
    (index of the record in the batch, message)."""

    def __init__(self, code: ErrorCode, message: str | None = None,
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        super().__init__(code, message)
        self.record_errors = list(record_errors)


@api(ApiKey.PRODUCE, 3, 13, advertise_from=0)
async def produce(ctx: DataPlane, req: Request) -> ProduceResponse | Deferred | None:
    body = cast("ProduceRequest", req.body)
    acks = body["acks"]
    by_id = req.api_version >= 13
    auth = ctx.authorizer
    if _has_transactional_records(body):
        # Kafka: transactional records need a transactional id (with or without an authorizer)
        # and WRITE on it, else the whole request is refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
        txn = body["transactional_id"]
        if txn is None or (auth is not None and not auth.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, txn)):
            raise KafkaError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    responses: list[ProduceResponseTopicProduceResponse] = []
    # acks=all waits: (entry, topic, partition, end)
    replicated: list[tuple[ProduceResponsePartitionProduceResponse, Topic, int, int]] = []
    # (topic, entry) of each partition answered an error
    refused: list[tuple[Topic | None, ProduceResponsePartitionProduceResponse]] = []
    replication = ctx.replication
    for topic_data in body["topic_data"]:
        topic = (ctx.topics.by_id(topic_data["topic_id"]) if by_id
                 else ctx.topics.get(topic_data["name"]))
        # WRITE on the topic (checked before its existence, as Kafka: an unknown topic one may
        # not write to is TOPIC_AUTHORIZATION_FAILED; an unknown id stays UNKNOWN_TOPIC_ID).
        denied = auth is not None and not (by_id and topic is None) and not auth.allows(
            Operation.WRITE, ResourceType.TOPIC, topic.name if by_id and topic is not None else topic_data["name"])
        partitions: list[ProduceResponsePartitionProduceResponse] = []
        for pdata in topic_data["partition_data"]:
            index = pdata["index"]
            entry: ProduceResponsePartitionProduceResponse = {
                "index": index, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
                "record_errors": [], "error_message": None}
            if (error := _refused(ctx, acks, denied, topic, index, by_id)) is not None:
                entry["error_code"] = error
            else:
                assert topic is not None
                state = replication.led_state(topic, index)
                try:
                    if state is not None and replication.cut_off():
                        raise ProduceError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "This broker lost the cluster's etcd; "
                                           f"another may lead {topic.name}-{index}")
                    if state is not None and acks == -1 and replication.not_enough_replicas(topic, index):
                        raise ProduceError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                           f"The size of the current ISR {sorted(state.isr)} is insufficient to "
                                           f"satisfy the min.isr requirement of {topic.config('min.insync.replicas')} "
                                           f"for partition {topic.name}-{index}")
                    await ctx.txn_cluster.verify_batch(body.get("transactional_id"), topic, index, pdata["records"],
                                                       req.api_version >= 12)
                    entry["base_offset"], entry["log_append_time_ms"], entry["log_start_offset"] = (
                        append_records(ctx, topic, index, pdata["records"], body.get("transactional_id"),
                                       add_partition=req.api_version >= 12,
                                       leader_epoch=None if state is None else state.epoch))
                    assert pdata["records"] is not None  # append_records refuses a partition without a batch
                    entry["error_code"] = 0
                    if state is not None:
                        replication.appended(topic, index)
                        if acks == -1:  # answered once the in-sync replicas have it (a database's
                            # rows and the meta of the child tables they made: to its log end)
                            end = (ctx.store.next_version(topic.db, index) if topic.kind == TSDB
                                   else entry["base_offset"] + _offset_span(pdata["records"]))
                            replicated.append((entry, topic, index, end))
                    if ctx.metrics is not None:
                        ctx.metrics.produced(topic.name, len(pdata["records"]), _record_count(pdata["records"]))
                except ProduceError as exc:
                    entry["error_code"] = exc.code
                    entry["error_message"] = exc.message
                    entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                              for i, m in exc.record_errors]
                except StorageIOError as exc:  # a full disk: nothing written (storage.space)
                    entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                    entry["error_message"] = str(exc)
            entry["error_code"] = int(entry["error_code"])
            if entry["error_code"]:
                _count_refusal(ctx, req, topic_data.get("name") or (topic.name if topic else "?"), entry)
                refused.append((topic, entry))
            partitions.append(entry)
        responses.append({"name": topic_data.get("name", ""), "topic_id": topic_data.get("topic_id", ZERO_UUID),
                          "partition_responses": partitions})
    version = req.api_version

    def answer() -> ProduceResponse:
        out: ProduceResponse = {"responses": responses, "throttle_time_ms": 0}
        if version >= 10 and refused:
            out["node_endpoints"] = point_to_leaders(ctx, refused, "index")
        return out

    if replicated:  # acks=all: answered when the ISR has it, the
        timeout = max(0, body["timeout_ms"]) / 1000  # connection serving its next requests meanwhile

        async def settled(waits: list[tuple[ProduceResponsePartitionProduceResponse, Topic, int, int]],
                          replication: Replicas) -> ProduceResponse:
            done = await asyncio.gather(*(replication.wait_replicated(topic, index, end, timeout)
                                          for _, topic, index, end in waits))
            for (entry, _, _, _), ok in zip(waits, done, strict=True):
                if not ok:  # Kafka's DelayedProduce at its timeout
                    entry.update({"error_code": int(ErrorCode.REQUEST_TIMED_OUT), "base_offset": -1})
            return answer()

        return Deferred(settled(replicated, replication))
    return None if acks == 0 else answer()


def _offset_span(records: bytes) -> int:
    """The offsets a v2 batch takes: its last offset delta (bytes 23..27) + 1."""
    return int.from_bytes(records[23:27], "big", signed=True) + 1


def _record_count(records: bytes) -> int:
    """The record count of a v2 batch (its last 4 header bytes, 57..61), already validated."""
    return int.from_bytes(records[57:61], "big", signed=True)


def _refused(ctx: DataPlane, acks: int, denied: bool, topic: Topic | None, index: int,
             by_id: bool) -> ErrorCode | None:
    """Why a partition is answered before its batch is looked at, in Kafka's order: acks, WRITE
    on the topic, then the topic or partition unknown; None: go on."""
    if acks not in (0, 1, -1):
        return ErrorCode.INVALID_REQUIRED_ACKS
    if denied:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ctx.topics.partition_error(topic, index, by_id)


def _count_refusal(ctx: DataPlane, req: Request, topic: str, entry: ProduceResponsePartitionProduceResponse) -> None:
    """A partition answered an error: counted in the metrics, logged (rate-limited) with its reason."""
    if ctx.metrics is not None:
        ctx.metrics.error(ApiKey.PRODUCE, entry["error_code"])
    if ctx.limited_log is not None:
        _log_rejected(ctx, req, topic, entry["index"], entry)


def _log_rejected(ctx: DataPlane, req: Request, topic: str, index: int,
                  entry: ProduceResponsePartitionProduceResponse) -> None:
    """One INFO line per refused batch (rate-limited: a misbehaving producer cannot flood the log)."""
    assert ctx.limited_log is not None
    client = current_client.get(None)
    reason = entry["error_message"] or (entry["record_errors"][0]["batch_index_error_message"]
                                        if entry["record_errors"] else None)
    ctx.limited_log.log(logging.INFO, "rejected-batch", "rejected a batch for %s-%d from client id %r (%s, %s): "
                        "%s%s", topic, index, req.client_id, client.principal if client else "?",
                        client.host if client else "?", ErrorCode(entry["error_code"]).name,
                        f": {reason}" if reason else "")


def _has_transactional_records(body: ProduceRequest) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: a batch with the transactional bit
    (attributes bit 4; the attributes' low byte is byte 22 of a v2 batch)."""
    for topic_data in body["topic_data"]:
        for pdata in topic_data["partition_data"]:
            records = pdata["records"]
            if records is not None and len(records) > 22 and records[22] & 0x10:
                return True
    return False


def append_records(ctx: DataPlane, topic: Topic, vnode: int, records: bytes | None,
                   transactional_id: str | None = None, add_partition: bool = False,
                   leader_epoch: int | None = None) -> tuple[int, int, int]:
    """Validate one partition's batch as Kafka does and append it.

    A transactional batch needs the transaction coordinator's word (``ctx.transactions``,
    when there is one) before it is appended; its append opens the producer's transaction on
    the vnode (``storage.wal_txns``). A producer with an open
    transaction on the vnode may not send it non-transactional batches (Kafka's
    ProducerAppendInfo: INVALID_TXN_STATE).

    Returns (base offset, log append time, log start offset): the time is -1 unless the topic
    stamps batches with LogAppendTime, as in Kafka's produce response. At most two store
    calls: the producer's window (idempotent producers only), then the append — or the log
    start, for a retried batch or a tsdb ingest. ``leader_epoch``: a replicated partition's
    leader stamps its epoch in the stored batch."""
    if topic.is_internal:  # Kafka's ReplicaManager: no message in the answer
        raise ProduceError(ErrorCode.INVALID_TOPIC_EXCEPTION)
    if topic.kind == TMQ:
        raise ProduceError(ErrorCode.INVALID_REQUEST,
                           f"'{topic.name}' is a TDengine topic (a view); write to database '{topic.db}'")
    batch, header, valid = _validated_batch(topic, records, ctx.max_decompressed_batch_bytes)
    if header.is_transactional and header.producer_id >= 0:
        # (A transactional batch without a producer id is plain data to Kafka: appended,
        # opening no transaction; so it is here.)
        if ctx.transactions is not None:
            # v12+ (transaction version 2, KIP-890): the partition joins the transaction here.
            gate = ctx.transactions.check_produce(transactional_id, header.producer_id, header.producer_epoch,
                                                  topic.name, vnode, add=add_partition)
            if gate != ErrorCode.NONE:
                raise ProduceError(gate)
    elif header.producer_id >= 0 and header.producer_id in ctx.store.open_transactions(topic.db, vnode):
        raise ProduceError(ErrorCode.INVALID_TXN_STATE,
                           f"Expected transactional write from producer {header.producer_id}")
    if topic.kind == TSDB:
        _check_keys(topic, vnode, valid)
        # An idempotent producer's batch is checked as on a plain topic before it becomes
        # rows; its window is stored with the rows (one WriteBatch), so a retry writes nothing.
        # A transactional producer's rows join its transaction on the vnode (read_committed
        # views drop them if it aborts).
        producer, base = _producer_append(ctx, topic, vnode, header)  # base: a retry's first answer
        if base is None:
            txn = ((header.producer_id, header.producer_epoch)
                   if header.is_transactional and header.producer_id >= 0 else None)
            try:
                base = ingest(ctx.executor, topic.db, vnode, batch, valid.records, producer, txn)  # decompressed once
            except IngestError as exc:
                raise ProduceError(ErrorCode.INVALID_RECORD, str(exc)) from None
        return base, -1, ctx.store.log_start(topic.db, vnode)
    now_ms = clock.now_ms()
    log_append_time = topic.config("message.timestamp.type") == "LogAppendTime"
    if not log_append_time:
        _check_timestamps(topic, valid, now_ms)
    _check_keys(topic, vnode, valid)
    store = ctx.store
    producer, duplicate_of = _producer_append(ctx, topic, vnode, header)
    if duplicate_of is not None:
        return duplicate_of, -1, store.log_start(topic.db, vnode)
    max_timestamp = header.max_timestamp
    if log_append_time:
        batch, max_timestamp = with_log_append_time(batch, now_ms), now_ms
    appended = store.append(topic.db, vnode, batch, header.record_count, max_timestamp, producer=producer,
                            leader_epoch=leader_epoch)
    ctx.notifier.notify(topic.db, vnode)
    return appended.base, now_ms if log_append_time else -1, appended.log_start


def _producer_append(ctx: DataPlane, topic: Topic, vnode: int,
                     header: BatchHeader) -> tuple[ProducerAppend | None, int | None]:
    """An idempotent producer's batch judged against its window (``check_sequence``):
    (what the append stores with it, None) to write it — (None, None) for a batch of no
    idempotent producer —, (None, the original base offset) for a retried batch; a refused
    one raises its error."""
    if header.producer_id < 0 or header.base_sequence < 0:
        return None, None
    window = ctx.store.producer_window(topic.db, vnode, header.producer_id)
    verdict = check_sequence(window, header.producer_epoch, header.base_sequence, header.record_count)
    if verdict.duplicate_of is not None:
        return None, verdict.duplicate_of
    if verdict.error != ErrorCode.NONE:
        raise ProduceError(verdict.error)
    return ProducerAppend(header.producer_id, header.producer_epoch, header.base_sequence,
                          header.record_count, window), None


def _validated_batch(topic: Topic, records: bytes | None,
                     max_decompressed: int) -> tuple[bytes, BatchHeader, Validated]:
    """The partition's one record batch, checked as Kafka checks it before appending: the
    batch as a whole, then every record (protocol.validate). The topic's max.message.bytes
    bounds the batch as sent (after compression, as Kafka's does: producers size batches by
    their compressed estimate, so well-compressed records may inflate past it); the records,
    decompressed, may not pass ``max_decompressed`` (tmqgate's bound against decompression
    bombs; Kafka has none)."""
    if not records:
        raise ProduceError(ErrorCode.INVALID_RECORD, "Produce request has no record batch")
    try:
        batches = list(iter_batches(records))
    except CorruptRecord as exc:
        # A batch that cannot even be walked is an invalid record to Kafka; CRC failures below
        # are CORRUPT_MESSAGE.
        raise ProduceError(ErrorCode.INVALID_RECORD, str(exc)) from None
    if len(batches) != 1:
        raise ProduceError(ErrorCode.INVALID_RECORD,
                           "Produce requests with version 3 and above must contain exactly one record batch")
    header = batches[0]
    batch = records if header.size == len(records) else bytes(records[header.offset:header.offset + header.size])
    if header.magic != MAGIC:
        raise ProduceError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                           f"Record batch magic {header.magic} is not supported; only magic 2 is")
    if header.size > topic.max_message_bytes:
        raise ProduceError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"The record batch size {header.size} bytes exceeds max.message.bytes "
                           f"({topic.max_message_bytes})")
    if not verify_crc(batch):
        raise ProduceError(ErrorCode.CORRUPT_MESSAGE, "Record batch CRC mismatch")
    if header.is_control:
        raise ProduceError(ErrorCode.INVALID_RECORD, "Producers may not write control batches")
    try:
        valid = validate_records(batch, header.record_count, header.last_offset_delta, header.attributes,
                                 header.base_timestamp, header.size, max_decompressed)
    except DecompressedTooLarge:
        raise ProduceError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"The record batch decompresses to more than {max_decompressed} bytes "
                           f"(max_decompressed_batch_bytes {max_decompressed})") from None
    except InvalidRecords as exc:
        errors = [] if exc.index is None else [(exc.index, str(exc))]
        raise ProduceError(ErrorCode.INVALID_RECORD, str(exc), errors) from None
    return batch, header, valid


def _check_keys(topic: Topic, vnode: int, valid: Validated) -> None:
    """A topic whose cleanup.policy includes compact refuses records without a key, every one
    named in record_errors, as Kafka's LogValidator does (INVALID_RECORD; its message lists
    the first three)."""
    if not valid.keyless or not is_compacted(topic.configs):
        return
    errors = [(i, f"Compacted topic cannot accept message without key in topic partition {topic.name}-{vnode}")
              for i in valid.keyless]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise ProduceError(ErrorCode.INVALID_RECORD,
                       f"One or more records have been rejected due to {len(errors)} record errors in total, "
                       f"and only showing the first three errors at most: [{shown}]", errors)


def _check_timestamps(topic: Topic, valid: Validated, now_ms: int) -> None:
    """message.timestamp.before/after.max.ms (KIP-937): CreateTime stamps too far from the
    broker's clock are refused with INVALID_TIMESTAMP, naming the record (the records'
    smallest and largest stamps, found by validation) in record_errors as Kafka does."""
    after_max = int(topic.config("message.timestamp.after.max.ms"))
    before_max = int(topic.config("message.timestamp.before.max.ms"))
    largest, first = valid.max_timestamp, valid.min_timestamp
    if largest > now_ms + after_max:
        message = (f"Timestamp {largest} of the record batch is more than "
                   f"message.timestamp.after.max.ms ({after_max}) ahead of the broker's time")
        raise ProduceError(ErrorCode.INVALID_TIMESTAMP, message, [(valid.max_index, message)])
    if 0 <= first < now_ms - before_max:
        message = (f"Timestamp {first} of the record batch is more than "
                   f"message.timestamp.before.max.ms ({before_max}) behind the broker's time")
        raise ProduceError(ErrorCode.INVALID_TIMESTAMP, message, [(valid.min_index, message)])
