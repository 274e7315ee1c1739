"""The API table: which Kafka APIs and versions we serve, and their handlers.

A handler is `async def handler(broker, request) -> dict | None`; it returns the response
body (None when no response is owed, as for Produce with acks=0). The advertised version
range is the handler's declared range, clipped to what the message schemas define.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from tmqgate.protocol.schemas import SCHEMAS

if TYPE_CHECKING:
    from tmqgate.broker.server import Broker
    from tmqgate.protocol.messages import Request

Handler = Callable[["Broker", "Request"], Awaitable[dict[str, Any] | None]]


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
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TOPIC_PARTITIONS = 75
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


@dataclass(frozen=True)
class ApiEntry:
    key: int
    min_version: int
    max_version: int
    handler: Handler
    advertised_min: int  # what ApiVersions says; below min_version the request is still refused


API_TABLE: dict[int, ApiEntry] = {}


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
        API_TABLE[int(key)] = ApiEntry(int(key), lo, hi, handler, advertised)
        return handler

    return register


def load_handlers() -> dict[int, ApiEntry]:
    """Import every handler module so its @api registrations run; return the table."""
    from tmqgate.broker import handlers  # noqa: F401  (import registers)

    return API_TABLE
