"""Where groups and transactions are coordinated, as the handlers ask it: `CoordinatorPlacement`
(which broker coordinates a group or a transactional id, and whether its last change is safe)
and `TxnRouting` (a transaction whose coordinator, partitions and groups may be on other
brokers), each with its cluster of one — `LocalCoordinatorPlacement`, `LocalTxnRouting` — so
GroupApis, TxnApis, TxnDataApis and DataPlane have one code path (issue 27). On a cluster
broker/cluster/coordinator_state.py and broker/cluster/transactions.py implement them.

Rules of the cluster of one: this node coordinates every group and transactional id, and a
change is final once the coordinator has it (one replica: nothing to wait for); it leads every
partition, so a transactional batch needs no coordinator elsewhere to verify it, a group needs
no AddOffsetsToTxn elsewhere, and WriteTxnMarkers writes every partition it names here (the
group offsets' markers too), each refused as the marker writer refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tmqgate.broker.topics import Topic
    from tmqgate.protocol.errors import ErrorCode


class CoordinatorPlacement(Protocol):
    """Which broker coordinates a key (a group id or a transactional id), as FindCoordinator
    and the coordinators' answers ask it."""

    def coordinator_of(self, key: str) -> int: ...  # its node id (-1: none now)

    def ensure(self) -> None: ...  # the state topic made, when there is none yet

    async def replicated(self, key: str) -> ErrorCode | None: ...  # the key's last change safe, or the error


class LocalCoordinatorPlacement:
    """See the module docstring."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    def coordinator_of(self, key: str) -> int:
        return self.node_id

    def ensure(self) -> None:
        return None

    async def replicated(self, key: str) -> ErrorCode | None:
        return None


class TxnRouting(Protocol):
    """A transaction over the brokers, as Produce, TxnOffsetCommit and WriteTxnMarkers ask it."""

    #: the partitions' leaders and the groups' coordinators may be other brokers: WriteTxnMarkers
    #: answers a partition not led here with its error and ends group offsets through the role
    over_brokers: bool

    async def verify_batch(self, transactional_id: str | None, topic: Topic, partition: int,
                           records: bytes | None, add: bool) -> None: ...

    async def add_group(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None: ...

    async def end_group_offsets(self, producer_id: int, producer_epoch: int, commit: bool,
                                partition: int) -> ErrorCode: ...

    def stop(self) -> None: ...


class LocalTxnRouting:
    """See the module docstring."""

    over_brokers = False

    async def verify_batch(self, transactional_id: str | None, topic: Topic, partition: int,
                           records: bytes | None, add: bool) -> None:
        return None

    async def add_group(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        return None

    async def end_group_offsets(self, producer_id: int, producer_epoch: int, commit: bool,
                                partition: int) -> ErrorCode:
        raise AssertionError("never asked: over_brokers is False")

    def stop(self) -> None:
        return None
