"""What the data path asks of replication: `Replicas`, the role Produce, Fetch,
OffsetForLeaderEpoch and the leader hints (KIP-951) use, and `LocalReplication`, a broker in no
cluster — a cluster of one — so those handlers have one code path (issue 27). On a cluster
broker/cluster/replication.py implements it (leaders, followers, the ISR).

Rules of the cluster of one: no partition has a replicated state (`led_state` is None), so
Produce appends and answers at once and the epochs are the log's own; it is never cut off from
a cluster, never short of in-sync replicas, has nothing to advance when it appends, and an
acks=all write is replicated the moment it is written; no partition is led elsewhere, so no
answer names a leader (`leader_hint` None); and there are no followers: a Fetch that names a
`replica_id` is served as a consumer's (`serves_followers` False, as before there were clusters).

Each call is a method returning a constant: the data path costs what it did without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.metadata.view import PartitionState
    from tmqgate.broker.topics import Topic


class Replicas(Protocol):
    """What the data path's handlers ask of replication (see the module docstring)."""

    #: a Fetch with a replica_id is a follower's (else a consumer's, whatever it names)
    @property
    def serves_followers(self) -> bool: ...

    def led_state(self, topic: Topic, partition: int) -> PartitionState | None: ...

    def leader_hint(self, topic: Topic, partition: int) -> tuple[int, int, tuple[str, int] | None] | None: ...

    def follower_fetched(self, topic: Topic, partition: int, replica: int, offset: int,
                         current_epoch: int) -> ErrorCode | None: ...

    def raw_batches(self, topic: Topic, partition: int, offset: int, max_bytes: int) -> list[bytes]: ...

    def appended(self, topic: Topic, partition: int) -> None: ...

    def cut_off(self) -> bool: ...

    def not_enough_replicas(self, topic: Topic, partition: int) -> bool: ...

    async def wait_replicated(self, topic: Topic, partition: int, end: int, timeout_s: float) -> bool: ...

    def stop(self) -> None: ...  # at the broker's shutdown


class LocalReplication:
    """See the module docstring."""

    serves_followers = False

    def led_state(self, topic: Topic, partition: int) -> PartitionState | None:
        return None

    def leader_hint(self, topic: Topic, partition: int) -> tuple[int, int, tuple[str, int] | None] | None:
        return None

    def follower_fetched(self, topic: Topic, partition: int, replica: int, offset: int,
                         current_epoch: int) -> ErrorCode | None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER  # never asked: no Fetch is a follower's here

    def raw_batches(self, topic: Topic, partition: int, offset: int, max_bytes: int) -> list[bytes]:
        return []  # never asked, as follower_fetched

    def appended(self, topic: Topic, partition: int) -> None:
        return None

    def cut_off(self) -> bool:
        return False

    def not_enough_replicas(self, topic: Topic, partition: int) -> bool:
        return False

    async def wait_replicated(self, topic: Topic, partition: int, end: int, timeout_s: float) -> bool:
        return True

    def stop(self) -> None:
        return None
