"""The transaction coordinator's runtime (broker/runtime/txn_coordinator.py): its timer aborts a
timed-out transaction and retries markers on a fake clock; the Broker wires it as the data
plane's TxnGate and the transaction APIs' coordinator."""

from __future__ import annotations

import asyncio

from tests.test_txn_coordinator import P0, T0, TID, Markers
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.handlers.context import DataPlane, TxnApis
from tmqgate.broker.runtime.txn_coordinator import TxnCoordinatorRuntime
from tmqgate.broker.server import Broker
from tmqgate.coordinator.transactions import TransactionCoordinator, TxnConfig, TxnState
from tmqgate.protocol.errors import ErrorCode as E
from tmqgate.storage import Store


async def _until(pred, steps: int = 2000) -> bool:
    for _ in range(steps):
        if pred():
            return True
        await asyncio.sleep(0.005)
    return False


def test_timer_aborts_timed_out_transactions_and_retries_markers(tmp_path) -> None:
    async def scenario() -> None:
        clock = [T0]
        with Store(tmp_path / "data") as store:
            markers = Markers()
            machine = TransactionCoordinator(store.txn_states, store, TxnConfig(), T0, markers=markers)
            rt = TxnCoordinatorRuntime(machine, interval_ms=10, clock=lambda: clock[0])
            await rt.start()
            try:
                r = machine.init_producer_id(rt.now(), TID, 1000)
                assert machine.add_partitions(rt.now(), TID, r.producer_id, r.producer_epoch, [P0]) is E.NONE
                assert rt.check_produce(TID, r.producer_id, r.producer_epoch, *P0) is E.NONE
                clock[0] = T0 + 1001
                assert await _until(lambda: machine.get(TID).state is TxnState.COMPLETE_ABORT)
                assert markers.calls == [(r.producer_id, r.producer_epoch + 1, False, [P0])]
                assert rt.check_produce(TID, r.producer_id, r.producer_epoch, *P0) is E.INVALID_PRODUCER_EPOCH

                epoch = r.producer_epoch + 1
                machine.add_partitions(rt.now(), TID, r.producer_id, epoch, [P0])
                markers.fail.add(P0)
                assert machine.end_txn(rt.now(), TID, r.producer_id, epoch, commit=True).error is E.NONE
                rt.retry_soon()
                markers.fail.clear()
                clock[0] += 1000
                assert await _until(lambda: machine.get(TID).state is TxnState.COMPLETE_COMMIT)
                assert markers.calls[-1] == (r.producer_id, epoch, True, [P0])
            finally:
                await rt.stop()

    asyncio.run(scenario())


def test_broker_wires_the_coordinator(tmp_path) -> None:
    async def scenario() -> None:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data"),
                                     transaction_max_timeout_ms=5000))
        await broker.start()
        try:
            contexts = broker._contexts()
            assert contexts[DataPlane].transactions is broker.transactions
            assert contexts[TxnApis].coordinator is broker.transactions
            machine = broker.transactions.machine
            assert machine.init_producer_id(broker.transactions.now(), "x", 5001).error is E.INVALID_TRANSACTION_TIMEOUT
        finally:
            await broker.stop()

    asyncio.run(scenario())


def test_tv2_gates_add_implicitly_with_kafkas_produce_errors(tmp_path) -> None:
    """Produce v12+ / TxnOffsetCommit v5+ (transaction version 2): the gates add the partition
    or group, and answer the coordinator's errors as Kafka's broker does to those requests."""
    with Store(tmp_path / "data") as store:
        markers = Markers()
        machine = TransactionCoordinator(store.txn_states, store, TxnConfig(), T0, markers=markers)
        rt = TxnCoordinatorRuntime(machine, interval_ms=10, clock=lambda: T0)
        r = machine.init_producer_id(T0, TID, 60_000)
        pid, epoch = r.producer_id, r.producer_epoch
        # TV1's check refuses a partition never added; TV2's Produce adds it
        assert rt.check_produce(TID, pid, epoch, *P0) is E.INVALID_TXN_STATE
        assert rt.check_produce(TID, pid, epoch, *P0, add=True) is E.NONE
        assert rt.check_txn_offset_commit(TID, pid, epoch, "g") is E.INVALID_TXN_STATE
        assert rt.check_txn_offset_commit(TID, pid, epoch, "g", add=True) is E.NONE
        assert (machine.get(TID).partitions, machine.get(TID).groups) == ({P0}, {"g"})
        assert rt.check_produce(TID, pid, epoch - 1, *P0, add=True) is E.INVALID_PRODUCER_EPOCH
        assert rt.check_produce(TID, pid + 7, epoch, *P0, add=True) is E.INVALID_PRODUCER_ID_MAPPING
        markers.fail.add(P0)
        assert machine.end_txn(T0, TID, pid, epoch, commit=True, transaction_version=2).producer_epoch == epoch + 1
        # markers pending: CONCURRENT_TRANSACTIONS, which Produce answers NOT_ENOUGH_REPLICAS
        assert rt.check_produce(TID, pid, epoch + 1, *P0, add=True) is E.NOT_ENOUGH_REPLICAS
        assert rt.check_txn_offset_commit(TID, pid, epoch + 1, "g", add=True) is E.CONCURRENT_TRANSACTIONS
