"""The API table: which Kafka APIs and versions we serve, and their handlers.

A handler is `async def handler(ctx, request) -> dict | None`; it returns the response body
(None when no response is owed, as for Produce with acks=0), typed as its API's `TypedDict` of
`tmqgate.protocol.bodies` (a plain dict at run time, which the server may complete and encodes). The advertised version
range is the handler's declared range, clipped to what the message schemas define.

Handlers never see the `Broker`. `ctx` is the small frozen context of the handler's family,
one of the dataclasses in `broker/handlers/context.py` (`DataPlane`, `AdminApis`,
`ClusterApis`, `GroupApis`), holding just the collaborators that family uses. A handler
module names its family once, and every handler it registers takes that context:

    api = apis_with(DataPlane)

    @api(ApiKey.FETCH, 4, 18)
    async def fetch(ctx: DataPlane, req: Request) -> FetchResponse: ...

The server (the composition root) builds one instance of each context at start, binds each
entry's handler to the instance of its `context` type (`bind`), and dispatches a request to
the bound handler: `await handlers[api_key](request)` — an answer, or a `Deferred` one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from tmqgate.broker.errors import KafkaError
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.schemas import SCHEMAS

if TYPE_CHECKING:
    from tmqgate.protocol.messages import Request



class Deferred:
    """A handler's answer still to come: a Produce with acks=all waiting for its in-sync
    replicas. The connection goes on reading and serving the requests after it meanwhile (up to
    ``MAX_DEFERRED``) and writes every answer in the order of the requests, as the Kafka
    protocol wants; a client that pipelines its requests (``max.in.flight``) then has several
    acknowledged by one round of the followers' fetches rather than one per round."""

    __slots__ = ("answer",)

    def __init__(self, answer: Coroutine[Any, Any, Mapping[str, Any] | None]) -> None:
        self.answer = cast("Coroutine[Any, Any, dict[str, Any] | None]", answer)  # a TypedDict: a dict


#: answers a connection may owe at once (librdkafka's and the Java client's max.in.flight is 5)
MAX_DEFERRED = 5

Response = Awaitable[Mapping[str, Any] | None | Deferred]  # a body of tmqgate.protocol.bodies
Handler = Callable[[Any, "Request"], Response]  # (the family's context, request)
#: the server's view: an answer is the plain dict it completes (throttle_time_ms) and encodes
BoundHandler = Callable[["Request"], Awaitable[dict[str, Any] | None | Deferred]]


class ApiKey(IntEnum):
    """The Kafka API keys this broker implements (numbers from the Kafka protocol)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    WRITE_TXN_MARKERS = 27
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TOPIC_PARTITIONS = 75
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True)
class ApiEntry:
    key: int
    min_version: int
    max_version: int
    handler: Handler
    context: type  # the context class the handler takes (broker/handlers/context.py)
    advertised_min: int  # what ApiVersions says; below min_version the request is still refused


API_TABLE: dict[int, ApiEntry] = {}


def apis_with(context: type) -> Callable[..., Callable[[Handler], Handler]]:
    """The `api` decorator of a handler module whose handlers take a `context` instance."""

    def api(key: ApiKey, min_version: int, max_version: int,
            advertise_from: int | None = None) -> Callable[[Handler], Handler]:
        """Register a handler for `key` serving [min_version, max_version] within the schema's range.

        `advertise_from` lowers the minimum ApiVersions reports without serving those versions:
        Kafka 4 does this for Produce v0-v2 (KAFKA-18659), because librdkafka's feature detection
        looks for them."""

        def register(handler: Handler) -> Handler:
            schema = SCHEMAS[int(key)]
            lo = max(min_version, schema.min_version)
            hi = min(max_version, schema.max_version)
            advertised = lo if advertise_from is None else min(advertise_from, lo)
            API_TABLE[int(key)] = ApiEntry(int(key), lo, hi, handler, context, advertised)
            return handler

        return register

    return api


T = TypeVar("T")


class ClusterSync(Protocol):
    """What `bind` asks of the cluster around a request (the membership's)."""

    async def catch_up(self) -> None: ...

    def mark(self) -> tuple[int, ...]: ...

    async def settle(self, mark: tuple[int, ...]) -> bool: ...


def bind(table: Mapping[int, ApiEntry], contexts: Mapping[type, Any],
         sync: ClusterSync | None = None) -> dict[int, BoundHandler]:
    """Each API's handler with its context instance bound: `handlers[key](request)`. With
    ``sync`` (the membership), every API but Produce and Fetch first catches up with the
    cluster, so the workers of one machine answer each request with what another has just
    made, and is answered once the cluster has what it changed (an ACL, a config, a user),
    REQUEST_TIMED_OUT when the cluster did not take it in time — as Kafka answers once the
    metadata record is committed. The hot paths are left out: their partitions' leaders learn
    of them as they are placed."""
    bound = {key: cast(BoundHandler, partial(entry.handler, contexts[entry.context])) for key, entry in table.items()}
    if sync is None:
        return bound
    return {key: handler if key in (ApiKey.PRODUCE, ApiKey.FETCH) else _synced(sync, handler)
            for key, handler in bound.items()}


async def run_synced(sync: ClusterSync, call: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
    """``call()`` once caught up with the cluster: its result, and whether the cluster took
    what it changed in time (the Kafka APIs and the HTTP front answer a timeout each their way)."""
    await sync.catch_up()
    mark = sync.mark()
    answer = await call()
    return answer, await sync.settle(mark)


def _synced(sync: ClusterSync, handler: BoundHandler) -> BoundHandler:
    async def synced(request: Any) -> Any:
        answer, settled = await run_synced(sync, lambda: handler(request))
        if not settled:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the change is not in the cluster's metadata yet; "
                             "it is kept and retried")
        return answer

    return cast(BoundHandler, synced)


#: Features this broker supports (name -> (min, max) level), as ApiVersions lists them.
SUPPORTED_FEATURES = {"transaction.version": (0, 2), "share.version": (0, 1)}


def api_versions_body(table: Mapping[int, ApiEntry], error: ErrorCode = ErrorCode.NONE,
                      finalized: Mapping[str, int] | None = None, version: int = 0) -> dict[str, Any]:
    """The ApiVersions response body: every served API's advertised range; from v3 the
    supported features (v3 omits those with min level 0, as Kafka) and the ``finalized``
    levels (name -> level; a feature at level 0 is not listed, as Kafka's KRaft metadata)."""
    body: dict[str, Any] = {
        "error_code": int(error),
        "api_keys": [
            {"api_key": e.key, "min_version": e.advertised_min, "max_version": e.max_version}
            for e in sorted(table.values(), key=lambda e: e.key)
        ],
        "throttle_time_ms": 0,
    }
    if finalized is not None and version >= 3:
        body["supported_features"] = [{"name": n, "min_version": lo, "max_version": hi}
                                      for n, (lo, hi) in SUPPORTED_FEATURES.items() if version >= 4 or lo > 0]
        body["finalized_features_epoch"] = 0
        body["finalized_features"] = [{"name": n, "max_version_level": lvl, "min_version_level": lvl}
                                      for n, lvl in finalized.items() if lvl > 0]
    return body
