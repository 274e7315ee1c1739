"""The broker's transaction coordinator: ``coordinator.transactions``' machine over this broker's
store, fed the wall clock by a timer task, with the transaction.* settings.

The machine knows nothing of asyncio or the broker. This module builds it (``txn_coordinator``)
from the BrokerConfig and the store, gives it the collaborators the server hands over (the
``MarkerWriter`` of the data plane, the group coordinator's ``complete_transaction``), calls
``tick`` at the machine's next deadline (at the latest every
``transaction_abort_timed_out_transaction_cleanup_interval_ms``), and is the ``TxnGate``
Produce asks before appending a transactional batch (``check_produce``).

Times are wall-clock ms: a transaction's start time is what DescribeTransactions reports, and
deadlines must hold across a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tmqgate.broker.metadata.view import state_partitioner
from tmqgate.coordinator.runtime import MachineTimer
from tmqgate.coordinator.transactions import MarkerWriter, TransactionCoordinator, TxnConfig, TxnGroups
from tmqgate.protocol import clock
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.storage import Store


class TxnCoordinatorRuntime(MachineTimer[TransactionCoordinator]):
    """Owns a TransactionCoordinator and its timer; handlers call ``machine`` with ``now()``.

    The timer wakes at the machine's next deadline as computed when it went to sleep, and at
    least every ``interval_ms``: a transaction begun meanwhile is checked within that interval,
    as Kafka checks for timed-out transactions every
    transaction.abort.timed.out.transaction.cleanup.interval.ms. Events do not wake it (its
    tick scans every transactional id); only markers left to retry do (``retry_soon``)."""

    def __init__(self, machine: TransactionCoordinator, interval_ms: int,
                 clock: Callable[[], int] = clock.now_ms) -> None:
        super().__init__(machine, clock, interval_ms, "transaction coordinator")

    def markers_answered(self) -> None:
        """Another broker answered markers sent to it (a cluster): retry what is unfinished now."""
        self.machine.retry_now()
        self.kick()

    def retry_soon(self) -> None:
        """After an event that may have left markers unwritten: let the timer plan their retry."""
        if self.machine.has_unfinished():
            self.kick()

    # TxnGate (broker/handlers/context.py): Produce's question for a transactional batch.
    # ``add`` (Produce v12+, transaction version 2): the partition is added implicitly, Kafka's
    # ADD_PARTITION verification; the coordinator's answers become Produce's as Kafka's
    # AddPartitionsToTxnManager and ReplicaManager turn them (PRODUCER_FENCED ->
    # INVALID_PRODUCER_EPOCH; CONCURRENT_TRANSACTIONS, NOT_COORDINATOR -> NOT_ENOUGH_REPLICAS, a
    # retriable error that does not refresh metadata).
    def check_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                      topic: str, partition: int, add: bool = False) -> ErrorCode:
        if not add:
            return self.machine.check_produce(transactional_id, producer_id, producer_epoch, topic, partition)
        code = self.machine.add_implicitly(self.now(), transactional_id, producer_id, producer_epoch,
                                           partitions=[(topic, partition)])
        return _PRODUCE_ADD_ERRORS.get(code, code)

    # TxnOffsetsGate (coordinator/offsets.py): the group coordinator's question for a
    # TxnOffsetCommit; ``add`` (v5+, transaction version 2): the group is added implicitly.
    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, add: bool = False) -> ErrorCode:
        if not add:
            return self.machine.check_txn_offset_commit(transactional_id, producer_id, producer_epoch, group_id)
        code = self.machine.add_implicitly(self.now(), transactional_id, producer_id, producer_epoch,
                                           groups=[group_id])
        return ErrorCode.INVALID_PRODUCER_EPOCH if code is ErrorCode.PRODUCER_FENCED else code


_PRODUCE_ADD_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                       ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS}


def txn_config(cfg: BrokerConfig) -> TxnConfig:
    return TxnConfig(max_timeout_ms=cfg.transaction_max_timeout_ms,
                     id_expiration_ms=cfg.transactional_id_expiration_ms)


def txn_coordinator(store: Store, cfg: BrokerConfig, markers: MarkerWriter | None = None,
                    groups: TxnGroups | None = None) -> TxnCoordinatorRuntime:
    """The broker's transaction coordinator over its store (state loaded and prepared
    transactions completed here, before the broker serves)."""
    # On a cluster it coordinates no id until it leads a transaction-state partition
    # (broker/cluster/coordinator_state.py loads them).
    machine = TransactionCoordinator(store.txn_states, store, txn_config(cfg), clock.now_ms(),
                                     markers=markers, groups=groups,
                                     owned=None if cfg.cluster is None else set(),
                                     partition_of=state_partitioner(cfg.cluster_state_partitions))
    return TxnCoordinatorRuntime(machine, cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms)
