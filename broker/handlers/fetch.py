"""Fetch with long-poll: read stored batches as bytes from each vnode's WAL from the
requested version; when there is less than min_bytes, wait for data to land (woken at once
by the append, TDengine's push) or for max_wait to pass.

Isolation (KIP-98): read_committed (isolation_level 1) returns only batches below the last
stable offset (the first offset of the oldest open transaction) with the aborted transactions
overlapping what it returns, for the client to drop; read_uncommitted reads to the high
watermark and gets null. A read_committed Fetch waiting at the LSO is woken by the marker
that moves it (broker/runtime/txn_markers.py notifies as an append does).

Size limits follow KIP-74: partition_max_bytes per partition and max_bytes per response, except
that the first batch of the first partition with data is always returned whole, so a batch
bigger than the limits never stalls a consumer.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation, ResourceType
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import DataPlane
from tmqgate.broker.handlers.leader_hints import point_to_leaders
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.ops.quotas.client_quotas import parked
from tmqgate.broker.topics import TMQ, TSDB
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.acl.authorizer import Authorizer
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.fetch import (
        FetchRequest,
        FetchRequestTopic,
        FetchResponse,
        FetchResponseFetchableTopicResponse,
        FetchResponsePartitionData,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(DataPlane)

READ_COMMITTED = 1  # isolation_level


@api(ApiKey.FETCH, 4, 18)
async def fetch(ctx: DataPlane, req: Request) -> FetchResponse:
    body = cast("FetchRequest", req.body)
    by_id = req.api_version >= 13
    deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000
    min_bytes = body["min_bytes"]
    max_bytes = body.get("max_bytes", 0x7FFFFFFF)
    # Under a consumer_byte_rate quota a Fetch asks for no more than the quota allows in a
    # window (Kafka's getMaxValueInQuotaWindow), so one answer is never throttled for sure.
    cap = ctx.quotas.fetch_max_bytes(req.client_id) if ctx.quotas is not None else None
    if cap is not None:
        max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, cap)
        min_bytes = min(min_bytes, max_bytes)
    known: list[bool] | None = None
    denied: list[bool] | None = None
    # A follower's Fetch (replica_id >= 0) on a cluster: read to the log end, not the high
    # watermark, and tell the leader where the follower is (broker/cluster/replication.py).
    replica = body.get("replica_id", -1) if ctx.replication.serves_followers else -1
    first_marks: list[int] | None = None  # a follower's high watermarks when it came
    while True:
        # Looked up on every pass: a topic deleted while the Fetch waited (its deletion wakes
        # the wait) is answered at once with UNKNOWN_TOPIC_OR_PARTITION — by id too, as Kafka
        # does for an id it knew when the Fetch came (an id never known is UNKNOWN_TOPIC_ID).
        wanted: list[tuple[FetchRequestTopic, Topic | None]] = [
            (t, ctx.topics.by_id(t["topic_id"]) if by_id else ctx.topics.get(t["topic"]))
            for t in body["topics"]]
        if known is None:
            known = [topic is not None for _, topic in wanted]
            denied = _denied(ctx, wanted, by_id)
            if replica >= 0 and ctx.authorizer is not None and not ctx.authorizer.allows_cluster(
                    Operation.CLUSTER_ACTION):  # Kafka: replica fetches need CLUSTER_ACTION
                denied = [True] * len(wanted)
        responses, size, errors = await _read_all(ctx, wanted, max_bytes,
                                                  [by_id and not k for k in known], denied,
                                                  body.get("isolation_level", 0) == READ_COMMITTED, replica)
        remaining = deadline - time.monotonic()
        if size >= min_bytes or errors or remaining <= 0:
            break
        if replica >= 0:  # a follower learns a new high watermark at once (it leads with it next)
            marks = [p["high_watermark"] for t in responses for p in t["partitions"]]
            if first_marks is None:
                first_marks = marks
            elif marks != first_marks:
                break
        watched = [(topic.db, p["partition"]) for t, topic in wanted if topic is not None
                   for p in t["partitions"]]
        with parked():  # waiting for data is not handler time (request_percentage)
            if not watched:
                await asyncio.sleep(remaining)
                continue
            await ctx.notifier.wait(watched, remaining)
    # session_id 0: we keep no fetch sessions (KIP-227), so clients send full fetches.
    answer: FetchResponse = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    if errors and req.api_version >= 12:  # only an error names a leader
        endpoints = point_to_leaders(ctx, [(topic, e) for (_, topic), r in zip(wanted, responses, strict=True)
                                           for e in r["partitions"]], "partition_index")
        if req.api_version >= 16:
            answer["node_endpoints"] = endpoints
    return answer


def _denied(ctx: DataPlane, wanted: list[tuple[FetchRequestTopic, Topic | None]], by_id: bool) -> list[bool] | None:
    """Which requested topics the client may not READ (Kafka: TOPIC_AUTHORIZATION_FAILED for
    their partitions; an unknown topic id stays UNKNOWN_TOPIC_ID); None: no authorizer.
    A TDengine topic (a view) is refused the same way when its owner may no longer READ the
    database it reads (broker/sql/access.py): a view never serves what its maker lost. Both
    are cached decisions, taken once per Fetch, not per row or per pass."""
    auth = ctx.authorizer
    if auth is None:
        return None
    names = [topic.name if topic is not None else None if by_id else t["topic"] for t, topic in wanted]
    allowed = auth.allowed(Operation.READ, ResourceType.TOPIC, {n for n in names if n is not None})
    return [n is not None and (n not in allowed or (topic is not None and not _owner_reads(auth, topic)))
            for n, (_, topic) in zip(names, wanted, strict=True)]


def _owner_reads(auth: Authorizer, topic: Topic) -> bool:
    """Whether a view's owner may still READ its database (True for any other topic, and for a
    view made before owners were recorded)."""
    definition = topic.view.topic if topic.kind == TMQ and topic.view is not None else None
    if definition is None or definition.owner is None:
        return True
    return bool(auth.authorize(definition.owner, definition.owner_host, Operation.READ, ResourceType.TOPIC,
                               (definition.db,)))


async def _read_all(ctx: DataPlane, wanted: list[tuple[FetchRequestTopic, Topic | None]], max_bytes: int,
                    by_id: list[bool], denied: list[bool] | None = None,
                    committed: bool = False, replica: int = -1,
                    ) -> tuple[list[FetchResponseFetchableTopicResponse], int, bool]:
    """One pass over the requested partitions: (topic responses, bytes of records, any error);
    `by_id[i]`: a missing topic i is UNKNOWN_TOPIC_ID (else UNKNOWN_TOPIC_OR_PARTITION);
    `denied[i]`: topic i may not be read (TOPIC_AUTHORIZATION_FAILED); `committed`: read_committed;
    `replica`: a follower's node id (it reads to the log end), -1 for a consumer.
    A view's evaluation runs in steps with the event loop free between them (Topic.read_async),
    never past the high watermark this answer gives (the last stable offset for read_committed)."""
    store = ctx.store
    partition_error = ctx.topics.partition_error
    client = current_client.get(None)
    gone = client.gone if client is not None else None  # a view stops evaluating once it is
    budget = max_bytes if max_bytes > 0 else 0x7FFFFFFF
    total = 0
    errors = False
    responses: list[FetchResponseFetchableTopicResponse] = []
    for i, ((t, topic), missing_by_id) in enumerate(zip(wanted, by_id, strict=True)):
        parts: list[FetchResponsePartitionData] = []
        refused = denied is not None and denied[i]
        for p in t["partitions"]:
            index = p["partition"]
            entry: FetchResponsePartitionData = {"partition_index": index, "high_watermark": -1,
                                     "last_stable_offset": -1, "log_start_offset": -1,
                                     "aborted_transactions": None, "preferred_read_replica": -1,
                                     "records": b""}
            error = ErrorCode.TOPIC_AUTHORIZATION_FAILED if refused else partition_error(
                topic, index, missing_by_id, p.get("current_leader_epoch", -1) if replica < 0 else -1)
            if error is None and replica >= 0:
                assert topic is not None
                error = ctx.replication.follower_fetched(topic, index, replica, p["fetch_offset"],
                                                         p.get("current_leader_epoch", -1))
            if error is not None:
                entry["error_code"] = int(error)
                errors = True
            else:
                assert topic is not None
                hw = topic.high_watermark(store, index)
                end = topic.log_end(store, index)  # above hw on a replicated partition
                start = topic.log_start(store, index)
                lso = topic.last_stable_offset(store, index)
                upper = end if replica >= 0 else lso if committed else hw
                entry.update({"high_watermark": hw, "last_stable_offset": lso, "log_start_offset": start})
                if committed:
                    entry["aborted_transactions"] = []
                offset = p["fetch_offset"]
                if offset < start or offset > end:
                    entry["error_code"] = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                    errors = True
                else:
                    entry["error_code"] = 0
                    limit = min(p["partition_max_bytes"], budget)
                    if offset < upper and (limit > 0 or total == 0):
                        if replica >= 0 and topic.kind == TSDB:  # a SQL database's entries as stored
                            batches = ctx.replication.raw_batches(topic, index, offset, max(limit, 1))
                        else:
                            batches = await topic.read_async(store, index, offset, max(limit, 1), upper, committed,
                                                             gone)
                        if upper < end:  # stored batches are read to the log end
                            batches = _below(batches, upper)
                        if total > 0:
                            batches = _within(batches, limit)
                        # (a view dropped them itself)
                        if committed and batches and topic.view is None and topic.log is None:
                            end = _next_offset(batches[-1])
                            entry["aborted_transactions"] = [
                                {"producer_id": pid, "first_offset": first}
                                for pid, first in store.aborted_transactions(topic.db, index, offset, end)]
                        if batches:
                            # The stored batches as they are: the codec writes the list as one
                            # records field and the server sends the parts without joining them.
                            size = sum(map(len, batches))
                            entry["records"] = batches
                            total += size
                            budget -= size
                            if ctx.metrics is not None:
                                ctx.metrics.fetched(topic.name, size)
            parts.append(entry)
        responses.append({"topic": t.get("topic", ""), "topic_id": t.get("topic_id", ZERO_UUID), "partitions": parts})
    return responses, total, errors


def _within(batches: list[bytes], limit: int) -> list[bytes]:
    """Keep the leading batches that fit in `limit` bytes (only the response's first batch may exceed)."""
    kept, size = [], 0
    for b in batches:
        if size + len(b) > limit:
            break
        kept.append(b)
        size += len(b)
    return kept


def _below(batches: list[bytes], upper: int) -> list[bytes]:
    """The leading batches whose base offset (bytes 0..8) is below `upper` (an open
    transaction's first offset is a batch's base, so the LSO falls between batches)."""
    kept = []
    for b in batches:
        if int.from_bytes(b[:8], "big", signed=True) >= upper:
            break
        kept.append(b)
    return kept


def _next_offset(batch: bytes) -> int:
    """The offset after a v2 batch: base offset + last offset delta (bytes 23..27) + 1."""
    return int.from_bytes(batch[:8], "big", signed=True) + int.from_bytes(batch[23:27], "big", signed=True) + 1
