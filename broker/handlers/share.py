"""Share groups' APIs (KIP-932; issue 30, step 2): ShareGroupHeartbeat and ShareGroupDescribe at
the group's coordinator, ShareFetch and ShareAcknowledge at the partitions' leader.

ShareFetch reads before it acquires, as Kafka's share-partition does: each partition of the
member's share session is read from its first record that may be handed out (the oldest
available one in flight, else the first never handed out) within the request's byte budget,
and only offsets inside what was read are acquired, so every acquired offset goes out with
its record batch (a client acknowledges as GAP an acquired offset it got no record for, which
would archive a record it never saw). Batches are sent as stored; the client delivers the
records of the acquired ranges only. With nothing acquired anywhere, the fetch waits for data
(the append's wake-up, as Fetch) until max_wait_ms.

ACLs, as Kafka checks them: READ on the group (GROUP_AUTHORIZATION_FAILED for the whole
request), READ on each topic fetched or acknowledged (TOPIC_AUTHORIZATION_FAILED for its
partitions), DESCRIBE on each subscribed topic for ShareGroupHeartbeat, DESCRIBE on the group
for ShareGroupDescribe.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import ShareApis
from tmqgate.broker.identity.client import current_client
from tmqgate.broker.runtime.shares import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from tmqgate.coordinator.share_group import reset_duration_ms
from tmqgate.coordinator.share_partition import DONE, AckType, RecordState, SharePartition
from tmqgate.protocol import clock
from tmqgate.protocol.bodies import ZERO_UUID
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.records import parse_header, scan_records
from tmqgate.storage.share_state import Stored

if TYPE_CHECKING:
    from tmqgate.broker.runtime.shares import StorePersister
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.alter_share_group_offsets import (
        AlterShareGroupOffsetsRequest,
        AlterShareGroupOffsetsResponse,
    )
    from tmqgate.protocol.bodies.delete_share_group_offsets import (
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsResponse,
    )
    from tmqgate.protocol.bodies.describe_share_group_offsets import (
        DescribeShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsResponse,
    )
    from tmqgate.protocol.bodies.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse
    from tmqgate.protocol.bodies.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
    from tmqgate.protocol.bodies.share_fetch import ShareFetchRequest, ShareFetchResponse
    from tmqgate.protocol.bodies.share_group_describe import (
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
    )
    from tmqgate.protocol.bodies.share_group_heartbeat import (
        ShareGroupHeartbeatRequest,
        ShareGroupHeartbeatResponse,
        ShareGroupHeartbeatResponseAssignment,
    )
    from tmqgate.protocol.bodies.write_share_group_state import (
        WriteShareGroupStateRequest,
        WriteShareGroupStateResponse,
    )
    from tmqgate.protocol.messages import Request


api = apis_with(ShareApis)

MAX_RECORDS = 500  # a ShareFetch v0 has none (the client's share.max.poll.records default)
UNKNOWN_OPERATIONS = -2147483648


# -- the coordinator's APIs ------------------------------------------------------------------

@api(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def share_group_heartbeat(ctx: ShareApis, req: Request) -> ShareGroupHeartbeatResponse:
    body = cast("ShareGroupHeartbeatRequest", req.body)
    group_id, member_id, epoch = body["group_id"], body["member_id"], body["member_epoch"]

    def refused(code: ErrorCode, message: str | None = None) -> ShareGroupHeartbeatResponse:
        return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message, "member_id": None,
                "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}

    if ctx.group_denied(Operation.READ, group_id):
        return refused(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    subscribed = body.get("subscribed_topic_names")
    if subscribed and ctx.topics_denied(Operation.DESCRIBE, set(subscribed)):
        return refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if not group_id:
        return refused(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not ctx.coordinator.machine.owns(group_id):
        return refused(ErrorCode.NOT_COORDINATOR)
    if group_id in ctx.coordinator.machine.groups:
        return refused(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
    group = ctx.shares.group(group_id, create=epoch == 0 and bool(member_id) and bool(subscribed))
    if group is None and epoch == 0:  # the group is made by a valid first heartbeat only
        return refused(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request."
                       if member_id else None)
    if group is None:  # not known here (a member of a group this broker never had): join again
        return refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of share group {group_id}.")
    wanted = {t for m in group.members.values() for t in m.subscribed} | set(subscribed or ())
    partitions = {name: topic.partitions for name in wanted if (topic := ctx.topics.get(name)) is not None}
    client = current_client.get(None)
    answer = group.heartbeat(member_id, epoch, subscribed, partitions, rack=body.get("rack_id"),
                             client_id=req.client_id or "", client_host=f"/{client.host}" if client else "")
    if epoch == -1 and answer.error is ErrorCode.NONE:
        ctx.shares.member_gone(group_id, member_id)
    if answer.error is not ErrorCode.NONE:
        return {**refused(answer.error, answer.message), "member_id": answer.member_id}
    assignment: ShareGroupHeartbeatResponseAssignment | None = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": topic.topic_id, "partitions": sorted(ps)}
            for name, ps in sorted(answer.assignment.items()) if (topic := ctx.topics.get(name)) is not None]}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": answer.member_id,
            "member_epoch": answer.epoch, "heartbeat_interval_ms": answer.heartbeat_interval_ms,
            "assignment": assignment}


@api(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx: ShareApis, req: Request) -> ShareGroupDescribeResponse:
    body = cast("ShareGroupDescribeRequest", req.body)
    out: list[Any] = []
    for group_id in body.get("group_ids") or []:
        base: dict[str, Any] = {"group_id": group_id, "error_message": None, "group_state": "", "group_epoch": 0,
                "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": UNKNOWN_OPERATIONS}
        if ctx.group_denied(Operation.DESCRIBE, group_id):
            out.append({**base, "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)})
            continue
        if not ctx.coordinator.machine.owns(group_id):
            out.append({**base, "error_code": int(ErrorCode.NOT_COORDINATOR)})
            continue
        group = ctx.shares.group(group_id, create=False)
        if group is None:
            other = group_id in ctx.coordinator.machine.groups
            out.append({**base, "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "group_state": "Dead",
                        "error_message": f"Group {group_id} is not a share group." if other
                        else f"Group {group_id} not found."})
            continue
        out.append({**base, "error_code": 0, "group_state": group.state.value, "group_epoch": group.epoch,
                    "assignment_epoch": group.assignment_epoch, "assignor_name": "simple",
                    "members": [{"member_id": m.member_id, "rack_id": m.rack, "member_epoch": m.epoch,
                                 "client_id": m.client_id, "client_host": m.client_host,
                                 "subscribed_topic_names": list(m.subscribed),
                                 "assignment": {"topic_partitions": [
                                     {"topic_id": topic.topic_id, "topic_name": name, "partitions": sorted(ps)}
                                     for name, ps in sorted(m.assignment.items())
                                     if (topic := ctx.topics.get(name)) is not None]}}
                                for m in group.members.values()]})
    return {"throttle_time_ms": 0, "groups": out}


# -- the partition leader's APIs ---------------------------------------------------------------

def _acknowledge(ctx: ShareApis, sp: SharePartition, member: str, batches: list[Any]) -> ErrorCode:
    """Apply a partition's AcknowledgementBatches: one type for the whole range, or one per
    offset; the first error met is the answer (the batches before it stay applied, as Kafka's)."""
    for batch in batches:
        first, last, types = batch["first_offset"], batch["last_offset"], batch["acknowledge_types"]
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.INVALID_REQUEST
        if any(t not in AckType._value2member_map_ for t in types):
            return ErrorCode.INVALID_REQUEST
        runs: list[tuple[int, int, int]] = []
        if len(types) == 1:
            runs.append((first, last, types[0]))
        else:
            for offset, kind in zip(range(first, last + 1), types, strict=True):
                if runs and runs[-1][2] == kind and runs[-1][1] == offset - 1:
                    runs[-1] = (runs[-1][0], offset, kind)
                else:
                    runs.append((offset, offset, kind))
        for lo, hi, kind in runs:
            code = sp.acknowledge(member, lo, hi, AckType(kind))
            if code is not ErrorCode.NONE:
                return code
            ctx.shares.counted(AckType(kind).name.title(), hi - lo + 1)
    return ErrorCode.NONE


def _leader(ctx: ShareApis, topic: Topic | None, index: int) -> dict[str, int]:
    state = ctx.topics.partition_state(topic, index) if topic is not None else None
    if state is None:
        return {"leader_id": ctx.node.node_id if topic is not None else -1, "leader_epoch": 0 if topic else -1}
    return {"leader_id": state.leader, "leader_epoch": state.epoch}


class _Partitions:
    """One request's partitions: the topic each id names, and whether the client may READ it."""

    def __init__(self, ctx: ShareApis, topic_ids: set[bytes]) -> None:
        self.ctx = ctx
        self.topics = {tid: ctx.topics.by_id(tid) for tid in topic_ids}
        named = {t.name for t in self.topics.values() if t is not None}
        self.denied = ctx.topics_denied(Operation.READ, named)

    def error(self, topic_id: bytes, index: int) -> ErrorCode | None:
        topic = self.topics.get(topic_id)
        if topic is not None and topic.name in self.denied:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return self.ctx.topics.partition_error(topic, index, by_id=True)


async def _share_partition(ctx: ShareApis, group_id: str, topic: Topic, index: int,
                           recheck: bool = False) -> tuple[SharePartition | None, ErrorCode]:
    """The share-partition, its state read first where it is not live here at the partition's
    current leader epoch (`recheck`: a session takes it in; ShareRuntime.prepare); or why it
    cannot be had (its coordinator's error)."""
    store = ctx.store
    code = await ctx.shares.prepare((group_id, topic.topic_id, index), _leader(ctx, topic, index)["leader_epoch"],
                                    recheck)
    if code is not ErrorCode.NONE:
        return None, code

    def start(reset: str) -> int:
        """share.auto.offset.reset: the log's start, the first batch holding records written
        in the look-back (by_duration; none: the end), else the end."""
        if reset.lower() == "earliest":
            return topic.log_start(store, index)
        back = reset_duration_ms(reset)
        if back is not None and topic.log is None:
            found = store.offset_for_timestamp(topic.db, index, clock.now_ms() - back)
            if found is not None:
                return max(found[0], topic.log_start(store, index))
        return topic.high_watermark(store, index)

    sp = ctx.shares.share_partition(group_id, topic.topic_id, index, start)
    log_start = topic.log_start(store, index)
    if sp.end < log_start:  # what it had not handed out yet was deleted (retention): start at the log
        sp.reset(log_start)
    code = await ctx.shares.initialized((group_id, topic.topic_id, index))
    return (sp, code) if code is ErrorCode.NONE else (None, code)


def _acks_in(body: Any) -> dict[tuple[bytes, int], list[Any]]:
    return {(t["topic_id"], p["partition_index"]): p["acknowledgement_batches"]
            for t in body["topics"] for p in t["partitions"] if p["acknowledgement_batches"]}


async def _apply_acks(ctx: ShareApis, parts: _Partitions, group_id: str, member: str,
                      acks: dict[tuple[bytes, int], list[Any]]) -> dict[tuple[bytes, int], ErrorCode]:
    """Each partition's acknowledgements applied and written (before the answer)."""
    out = {}
    if acks:
        ctx.shares.acknowledgements += 1
    for (tid, index), batches in acks.items():
        error = parts.error(tid, index)
        topic = parts.topics.get(tid)
        if error is None and topic is not None:
            sp, error = await _share_partition(ctx, group_id, topic, index)
            if sp is not None:
                error = _acknowledge(ctx, sp, member, batches)
                saved = await ctx.shares.save((group_id, tid, index))
                error = error if saved is ErrorCode.NONE else saved
        out[(tid, index)] = error or ErrorCode.NONE
    return out


def _span(batch: bytes) -> tuple[int, int, bool]:
    """(base offset, last offset, whether a share consumer gets nothing from it: a transaction
    marker, or no records — a query topic's rows its filter dropped)."""
    h = parse_header(batch)
    return h.base_offset, h.base_offset + h.last_offset_delta, h.is_control or h.record_count == 0


def _holes(batch: bytes) -> list[tuple[int, int]]:
    """The offset runs inside a query topic's batch that hold no record (the rows its filter
    dropped between the ones it kept)."""
    h = parse_header(batch)
    out: list[tuple[int, int]] = []
    expected = h.base_offset
    for ref in scan_records(batch)[1]:
        if ref.offset > expected:
            out.append((expected, ref.offset - 1))
        expected = ref.offset + 1
    if expected <= h.base_offset + h.last_offset_delta:
        out.append((expected, h.base_offset + h.last_offset_delta))
    return out


def _aborted(batches: list[bytes], aborted: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The offset runs of `batches` (in order) that aborted transactions wrote —
    (producer id, first offset) each, as Fetch lists them for read_committed — found as a
    read_committed client finds them: a producer's transactional batches from its first offset
    on, until its abort marker."""
    pending = sorted((first, pid) for pid, first in aborted)
    active: set[int] = set()
    out = []
    for batch in batches:
        h = parse_header(batch)
        while pending and pending[0][0] <= h.base_offset:
            active.add(pending.pop(0)[1])
        if h.producer_id in active and (h.is_control or h.is_transactional):
            out.append((h.base_offset, h.base_offset + h.last_offset_delta))
            if h.is_control:
                active.discard(h.producer_id)
    return out


async def _acquire(ctx: ShareApis, sp: SharePartition, topic: Topic, index: int, member: str, budget: int,
                   max_records: int, committed: bool) -> tuple[list[bytes], list[dict[str, int]], bool]:
    """Read from the first offset `sp` may hand out, then acquire within what was read: the
    batches holding the acquired offsets, the acquired runs, and whether the share-partition
    moved on (records acquired, or only offsets with nothing to deliver passed)."""
    store = ctx.store
    upper = topic.last_stable_offset(store, index) if committed else topic.high_watermark(store, index)
    first = sp.first_available()
    if first >= upper or max_records <= 0:
        return [], [], False
    batches = await topic.read_async(store, index, first, max(budget, 1), upper, committed, None)
    spans = [(b, *_span(b)) for b in batches]
    spans = [s for s in spans if s[1] < upper]
    if not spans:
        return [], [], False
    end_before = sp.end
    read_end = min(upper, spans[-1][2] + 1)
    gaps = [(first, last) for _, first, last, empty in spans if empty]
    if topic.view is not None:  # and the rows a query topic's filter dropped inside its batches
        gaps = sorted(gaps + [hole for b, _, _, empty in spans if not empty for hole in _holes(b)])
    if committed and topic.view is None and topic.log is None:  # share.isolation.level=read_committed
        gaps = sorted(gaps + _aborted([b for b, *_ in spans], store.aborted_transactions(
            topic.db, index, spans[0][1], read_end)))
    runs = sp.acquire(member, read_end, max_records, gaps)
    kept = [b for b, first, last, _ in spans if any(first <= r.last and last >= r.first for r in runs)]
    return kept, [{"first_offset": r.first, "last_offset": r.last, "delivery_count": r.delivery_count}
                  for r in runs], bool(runs) or sp.end > end_before


def _refusal(code: ErrorCode, lock_ms: int) -> dict[str, Any]:
    """ShareFetch's or ShareAcknowledge's answer refusing the whole request (the same fields)."""
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": None,
            "acquisition_lock_timeout_ms": lock_ms, "responses": [], "node_endpoints": []}


def _unusable(ctx: ShareApis, group_id: str, member: str) -> ErrorCode | None:
    """Why a ShareFetch or ShareAcknowledge is refused before its session is looked at: no READ
    on the group, or no group or member id."""
    if ctx.group_denied(Operation.READ, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return ErrorCode.INVALID_REQUEST if not group_id or not member else None


@api(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx: ShareApis, req: Request) -> ShareFetchResponse:
    body = cast("ShareFetchRequest", req.body)
    group_id, member = body["group_id"] or "", body["member_id"] or ""
    settings = ctx.shares.settings(group_id)

    def refused(code: ErrorCode) -> ShareFetchResponse:
        return cast("ShareFetchResponse", _refusal(code, settings.record_lock_duration_ms))

    cannot = _unusable(ctx, group_id, member)
    if cannot is not None:
        return refused(cannot)
    epoch = body["share_session_epoch"]
    acks = _acks_in(body)
    if epoch == INITIAL_EPOCH and acks:
        return refused(ErrorCode.INVALID_REQUEST)  # (Kafka: no message)
    session, code = ctx.shares.session(group_id, member, epoch)
    if session is None:
        return refused(code)
    if epoch == INITIAL_EPOCH:
        client = current_client.get(None)
        if client is not None:
            client.on_close.append(lambda: ctx.shares.connection_closed(session))
    parts = _Partitions(ctx, {t["topic_id"] for t in body["topics"]} | {tid for tid, _ in session.partitions}
                        | {t["topic_id"] for t in body.get("forgotten_topics_data") or []})
    answers: dict[tuple[bytes, int], dict[str, Any]] = {}
    for (tid, index), error in (await _apply_acks(ctx, parts, group_id, member, acks)).items():
        answers[(tid, index)] = {"acknowledge_error_code": int(error)}
    if epoch == FINAL_EPOCH:
        ctx.shares.close(session)
        return _fetch_answer(ctx, parts, answers, settings.record_lock_duration_ms)
    # Forgotten partitions leave the session only: what the member holds there stays its own
    # until acknowledged (a member told of a new assignment still acknowledges what it got),
    # its lock runs out, or its session ends — as Kafka's share session.
    for forgotten in body.get("forgotten_topics_data") or []:
        for index in forgotten["partitions"]:
            session.partitions.discard((forgotten["topic_id"], index))
    taken = {(t["topic_id"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]}
    fresh = taken - session.partitions  # the partitions this session takes in now
    session.partitions |= taken
    await _fetch_records(ctx, session, parts, answers, body, settings.isolation_level == "read_committed", fresh)
    return _fetch_answer(ctx, parts, answers, settings.record_lock_duration_ms)


#: A share-partition's state cannot be read or kept now (its coordinator is moving, or it was
#: fenced and is read again): ShareFetch leaves the partition out of this answer and tries it
#: again as it waits, as Kafka's leader does with a share-partition not initialised yet — the
#: Java client takes a partition error other than the leader's as fatal.
_STATE_UNAVAILABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.FENCED_STATE_EPOCH})


async def _fetch_records(ctx: ShareApis, session: ShareSession, parts: _Partitions,
                         answers: dict[tuple[bytes, int], dict[str, Any]], body: ShareFetchRequest,
                         committed: bool, fresh: set[tuple[bytes, int]]) -> None:
    """Acquire records in the session's partitions into `answers` (their batches and acquired
    runs, or their errors), waiting until some come, an error, or max_wait_ms."""
    group_id, member = session.group_id, session.member_id
    max_records = body.get("max_records") or MAX_RECORDS
    deadline = time.monotonic() + max(0, body["max_wait_ms"]) / 1000
    while True:
        budget = body["max_bytes"] if body["max_bytes"] > 0 else 0x7FFFFFFF
        records_left, errors, got, passed = max_records, False, False, False
        order = sorted(session.partitions)
        turn = session.epoch % len(order) if order else 0  # each request starts at another partition
        for tid, index in order[turn:] + order[:turn]:
            entry = answers.setdefault((tid, index), {})
            cannot = parts.error(tid, index)
            if cannot is not None:
                entry["error_code"] = int(cannot)
                errors = True
                continue
            topic = parts.topics[tid]
            assert topic is not None
            sp, cannot = await _share_partition(ctx, group_id, topic, index, (tid, index) in fresh)
            if sp is None:
                if cannot not in _STATE_UNAVAILABLE:
                    entry["error_code"] = int(cannot)
                    errors = True
                continue
            batches, acquired, moved = await _acquire(ctx, sp, topic, index, member, budget, records_left, committed)
            fresh.discard((tid, index))
            passed = passed or moved
            if moved:
                cannot = await ctx.shares.save((group_id, tid, index))
                if cannot is not ErrorCode.NONE:  # not kept: given back, none goes out (their count stays)
                    for run in acquired:
                        sp.acknowledge(member, run["first_offset"], run["last_offset"], AckType.RELEASE)
                    if cannot not in _STATE_UNAVAILABLE:
                        entry["error_code"] = int(cannot)
                        errors = True
                    continue
            if acquired:  # (saved above: the delivery counts, before they go out)
                entry["records"], entry["acquired_records"] = batches, acquired
                budget -= sum(map(len, batches))
                records_left -= sum(r["last_offset"] - r["first_offset"] + 1 for r in acquired)
                got = True
        remaining = deadline - time.monotonic()
        if got or errors or remaining <= 0 or not session.partitions:
            return
        if passed:  # only offsets with nothing to deliver went by: read on at once
            continue
        watched = [(topic.db, index) for tid, index in session.partitions if (topic := parts.topics.get(tid))]
        await ctx.notifier.wait(watched, min(remaining, 0.5))  # another member's release wakes nobody


def _fetch_answer(ctx: ShareApis, parts: _Partitions, answers: dict[tuple[bytes, int], dict[str, Any]],
                  lock_ms: int) -> ShareFetchResponse:
    by_topic: dict[bytes, list[Any]] = {}
    for (tid, index), entry in sorted(answers.items()):
        if not entry:  # nothing to say about it (an incremental session leaves it out)
            continue
        by_topic.setdefault(tid, []).append({
            "partition_index": index, "error_code": entry.get("error_code", 0), "error_message": None,
            "acknowledge_error_code": entry.get("acknowledge_error_code", 0), "acknowledge_error_message": None,
            "current_leader": _leader(ctx, parts.topics.get(tid), index), "records": entry.get("records", b""),
            "acquired_records": entry.get("acquired_records", [])})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "responses": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()], "node_endpoints": []}


@api(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx: ShareApis, req: Request) -> ShareAcknowledgeResponse:
    body = cast("ShareAcknowledgeRequest", req.body)
    group_id, member = body["group_id"] or "", body["member_id"] or ""
    settings = ctx.shares.settings(group_id)

    def refused(code: ErrorCode) -> ShareAcknowledgeResponse:
        return cast("ShareAcknowledgeResponse", _refusal(code, settings.record_lock_duration_ms))

    cannot = _unusable(ctx, group_id, member)
    if cannot is not None:
        return refused(cannot)
    epoch = body["share_session_epoch"]
    if epoch == INITIAL_EPOCH:  # acknowledging opens no session
        return refused(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
    session, code = ctx.shares.session(group_id, member, epoch)
    if session is None:
        return refused(code)
    acks = {(t["topic_id"], p["partition_index"]): p["acknowledgement_batches"]
            for t in body["topics"] for p in t["partitions"]}
    parts = _Partitions(ctx, {tid for tid, _ in acks})
    results = await _apply_acks(ctx, parts, group_id, member, acks)
    if epoch == FINAL_EPOCH:
        ctx.shares.close(session)
    by_topic: dict[bytes, list[Any]] = {}
    for (tid, index), error in sorted(results.items()):
        by_topic.setdefault(tid, []).append({"partition_index": index, "error_code": int(error),
                                             "error_message": None,
                                             "current_leader": _leader(ctx, parts.topics.get(tid), index)})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": settings.record_lock_duration_ms,
            "responses": [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()], "node_endpoints": []}



# -- the share-partitions' start offsets (kafka-share-groups --describe / --reset-offsets) ------

def _share_keys(ctx: ShareApis, group_id: str, topic: Topic) -> list[int]:
    """The partitions of `topic` the group has a share-partition state of (its coordinator
    keeps them all)."""
    return sorted({p for _, tid, p in ctx.shares.stored(group_id) if tid == topic.topic_id})


@api(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx: ShareApis, req: Request) -> DescribeShareGroupOffsetsResponse:
    body = cast("DescribeShareGroupOffsetsRequest", req.body)
    groups: list[Any] = []
    for g in body["groups"]:
        group_id = g["group_id"]
        code = (ErrorCode.GROUP_AUTHORIZATION_FAILED if ctx.group_denied(Operation.DESCRIBE, group_id)
                else None if ctx.coordinator.machine.owns(group_id) else ErrorCode.NOT_COORDINATOR)
        if code is not None:
            groups.append({"group_id": group_id, "topics": [], "error_code": int(code), "error_message": None})
            continue
        wanted = g.get("topics")
        if wanted is None:  # every topic the group has state of
            names = sorted({t.name for _, tid, _ in ctx.shares.stored(group_id)
                            for t in [ctx.topics.by_id(tid)] if t is not None})
            wanted = [{"topic_name": n, "partitions": _share_keys(ctx, group_id, topic)} for n in names
                      if (topic := ctx.topics.get(n)) is not None]
        denied = ctx.topics_denied(Operation.DESCRIBE, {t["topic_name"] for t in wanted})
        kept = ctx.shares.stored(group_id)
        topics = []
        for t in wanted:
            topic = ctx.topics.get(t["topic_name"])
            parts = []
            for index in t["partitions"]:
                entry = {"partition_index": index, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                         "error_code": 0, "error_message": None}
                if t["topic_name"] in denied:
                    entry["error_code"] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                elif topic is None or not 0 <= index < topic.partitions:
                    entry["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                elif (state := kept.get((group_id, topic.topic_id, index))) is not None:
                    hw = await ctx.ends.end(topic, index)
                    done = sum(last - first + 1 for first, last, st, _ in state.batches
                               if RecordState(st) in DONE)
                    entry.update(start_offset=state.start, leader_epoch=_leader(ctx, topic, index)["leader_epoch"],
                                 lag=-1 if hw is None else max(0, hw - state.start - done))
                parts.append(entry)
            topics.append({"topic_name": t["topic_name"], "topic_id": topic.topic_id if topic else ZERO_UUID,
                           "partitions": parts})
        groups.append({"group_id": group_id, "topics": topics, "error_code": 0, "error_message": None})
    return {"throttle_time_ms": 0, "groups": groups}


def _offsets_refusal(ctx: ShareApis, group_id: str, op: Operation) -> tuple[ErrorCode, str | None] | None:
    """Why the group's share offsets may not be changed now: not allowed, not coordinated
    here, not a share group, or members in it (Kafka: only an empty group's)."""
    if ctx.group_denied(op, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not ctx.coordinator.machine.owns(group_id):
        return ErrorCode.NOT_COORDINATOR, None
    if group_id in ctx.coordinator.machine.groups:
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    group = ctx.shares.group(group_id, create=False)
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
    return None


@api(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(ctx: ShareApis, req: Request) -> AlterShareGroupOffsetsResponse:
    body = cast("AlterShareGroupOffsetsRequest", req.body)
    group_id = body["group_id"]
    refusal = _offsets_refusal(ctx, group_id, Operation.READ)
    if refusal is not None:
        return {"throttle_time_ms": 0, "error_code": int(refusal[0]), "error_message": refusal[1], "responses": []}
    denied = ctx.topics_denied(Operation.READ, {t["topic_name"] for t in body["topics"]})
    responses: list[Any] = []
    for t in body["topics"]:
        topic = ctx.topics.get(t["topic_name"])
        parts = []
        for p in t["partitions"]:
            index, offset = p["partition_index"], p["start_offset"]
            code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if t["topic_name"] in denied
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None or not 0 <= index < topic.partitions
                    else None)
            if code is None:  # (the partition's leader starts at its log's start if this is before it)
                assert topic is not None
                code = await ctx.shares.set_start((group_id, topic.topic_id, index), max(offset, 0))
            parts.append({"partition_index": index, "error_code": int(code or 0), "error_message": None})
        responses.append({"topic_name": t["topic_name"], "topic_id": topic.topic_id if topic else ZERO_UUID,
                          "partitions": parts})
    ctx.shares.group(group_id, create=True)  # as Kafka: setting a group's offsets makes the group
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


@api(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(ctx: ShareApis, req: Request) -> DeleteShareGroupOffsetsResponse:
    body = cast("DeleteShareGroupOffsetsRequest", req.body)
    group_id = body["group_id"]
    refusal = _offsets_refusal(ctx, group_id, Operation.DELETE)
    if refusal is not None:
        return {"throttle_time_ms": 0, "error_code": int(refusal[0]), "error_message": refusal[1], "responses": []}
    denied = ctx.topics_denied(Operation.READ, {t["topic_name"] for t in body["topics"]})
    responses: list[Any] = []
    for t in body["topics"]:
        topic = ctx.topics.get(t["topic_name"])
        code = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if t["topic_name"] in denied
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic is None else ErrorCode.NONE)
        if topic is not None and code is ErrorCode.NONE:
            for p in _share_keys(ctx, group_id, topic):  # started again at share.auto.offset.reset
                code = await ctx.shares.set_start((group_id, topic.topic_id, p), -1)
                if code is not ErrorCode.NONE:
                    break
        responses.append({"topic_name": t["topic_name"], "topic_id": topic.topic_id if topic else ZERO_UUID,
                          "error_code": int(code), "error_message": None})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": responses}


# -- the share-partitions' states, kept by the group's coordinator (broker/cluster/share_state.py) --

def _state_here(ctx: ShareApis, group_id: str) -> tuple[StorePersister | None, ErrorCode]:
    """The store's persister for a partition leader's ReadShareGroupState /
    WriteShareGroupState, or why it is refused: not a broker (Kafka: CLUSTER_ACTION), or the
    group not coordinated here."""
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.CLUSTER_ACTION):
        return None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    persister = ctx.shares.persister
    if persister is None or not ctx.coordinator.machine.owns(group_id):
        return None, ErrorCode.NOT_COORDINATOR
    return persister.here, ErrorCode.NONE


@api(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(ctx: ShareApis, req: Request) -> ReadShareGroupStateResponse:
    body = cast("ReadShareGroupStateRequest", req.body)
    here, refusal = _state_here(ctx, body["group_id"])
    results: list[Any] = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            entry: dict[str, Any] = {"partition": p["partition"], "error_code": int(refusal), "error_message": None,
                                     "state_epoch": -1, "start_offset": -1, "state_batches": []}
            if here is not None:
                code, state = await here.read((body["group_id"], t["topic_id"], p["partition"]))
                entry["error_code"] = int(code)
                if state is not None:
                    entry.update(state_epoch=state.epoch, start_offset=state.start, state_batches=[
                        {"first_offset": f, "last_offset": last, "delivery_state": st, "delivery_count": n}
                        for f, last, st, n in state.batches])
            parts.append(entry)
        results.append({"topic_id": t["topic_id"], "partitions": parts})
    return {"results": results}


@api(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(ctx: ShareApis, req: Request) -> WriteShareGroupStateResponse:
    body = cast("WriteShareGroupStateRequest", req.body)
    here, refusal = _state_here(ctx, body["group_id"])
    results: list[Any] = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            code = refusal
            batches = [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                       for b in p["state_batches"]]
            if any(last < first or RecordState._value2member_map_.get(st) is None or n < 0
                   for first, last, st, n in batches):
                code = ErrorCode.INVALID_REQUEST
            elif here is not None:
                code = await here.write(
                    (body["group_id"], t["topic_id"], p["partition"]),
                    Stored(p["start_offset"], batches, max(0, p["state_epoch"])))
            parts.append({"partition": p["partition"], "error_code": int(code), "error_message": None})
        results.append({"topic_id": t["topic_id"], "partitions": parts})
    return {"results": results}
