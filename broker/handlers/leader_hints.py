"""Where a partition went (Kafka's KIP-951): a Produce or Fetch answered NOT_LEADER_OR_FOLLOWER
or FENCED_LEADER_EPOCH for a partition of a cluster names the partition's current leader and
epoch, and the answer lists that leader's endpoint, so the client sends there at once instead
of refreshing its metadata first (Produce v10+, Fetch v12+ for the leader, v16+ for the
endpoints)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.handlers.context import DataPlane
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.bodies.fetch import FetchResponseNodeEndpoint, FetchResponsePartitionData
    from tmqgate.protocol.bodies.produce import ProduceResponsePartitionProduceResponse

#: the errors whose answer names the partition's current leader (Kafka's KIP-951)
_MOVED = {int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)}


def point_to_leaders(ctx: DataPlane, entries: Sequence[tuple[Topic | None, ProduceResponsePartitionProduceResponse
                                                                | FetchResponsePartitionData]],
                     index_key: str) -> list[FetchResponseNodeEndpoint]:
    """KIP-951: each partition entry answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
    gets ``current_leader`` (the leader and epoch this broker knows), and the answer lists the
    endpoints of those leaders, so the client sends there without a Metadata round first."""
    endpoints: dict[int, FetchResponseNodeEndpoint] = {}
    for topic, typed in entries:
        entry = cast("dict[str, Any]", typed)  # a Produce or a Fetch partition: its index is `index_key`
        if topic is None or entry.get("error_code") not in _MOVED:
            continue
        hint = ctx.replication.leader_hint(topic, entry[index_key])
        if hint is None or hint[0] < 0:
            continue
        leader, epoch, address = hint
        entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        if address is not None:
            endpoints[leader] = {"node_id": leader, "host": address[0], "port": address[1], "rack": None}
    return [endpoints[n] for n in sorted(endpoints)]
