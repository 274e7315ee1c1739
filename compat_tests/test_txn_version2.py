"""Transaction version 2 (KIP-890 part 2) over the wire, on `txn_broker_tv2` (both brokers at
transaction.version=2): a transactional Produce v12 adds its partition to the transaction
without AddPartitionsToTxn, TxnOffsetCommit v5 adds its group without AddOffsetsToTxn, and
EndTxn v5 bumps the producer epoch at every commit and abort and answers the new one; a retry
of the EndTxn (the epoch before the bump) gets the same answer; the old epoch's Produce is
refused. read_committed sees exactly the committed record.
"""

from __future__ import annotations

import time
from typing import Any

from .conftest import Broker
from .helpers import unique_topic, wait_until
from .raw import RoutedConn
from .txn_helpers import create_topic, read_partition, txn_id

INIT_PRODUCER_ID, END_TXN, TXN_OFFSET_COMMIT, DESCRIBE_TRANSACTIONS = 22, 26, 28, 65
# retriable answers: the coordinator loading or not yet known, a just-created partition not
# yet led, markers of the previous transaction being written, offsets not yet stable
RETRIABLE = {14, 15, 16, 3, 6, 19, 51, 88}
FIND_COORDINATOR = 10


def _find_coordinator(c: RoutedConn, key_type: int, key: str) -> None:
    """FindCoordinator first, as clients do (Kafka creates __transaction_state or
    __consumer_offsets on the first lookup)."""
    body = _retry(lambda: c.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]}),
                  lambda b: b["coordinators"][0]["error_code"])
    assert body["coordinators"][0]["error_code"] == 0, body


INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 47, 48


def _retry(call: Any, code: Any) -> dict[str, Any]:
    """A request retried while the answer is retriable (the coordinator loading, markers of the
    previous transaction still being written)."""
    return wait_until(call, 30, 0.1, "an answer that is not retriable", ok=lambda body: code(body) not in RETRIABLE)


def _produce(c: RoutedConn, topic: str, tid: str, pid: int, epoch: int, seq: int, value: bytes) -> int:
    from tmqgate.protocol.records import build_batch

    batch = build_batch([(None, value, [], int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    body = _retry(lambda: c.request(0, 12, {
        "transactional_id": tid, "acks": -1, "timeout_ms": 10000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}),
        lambda b: b["responses"][0]["partition_responses"][0]["error_code"])
    return int(body["responses"][0]["partition_responses"][0]["error_code"])


def _init(c: RoutedConn, tid: str) -> tuple[int, int]:
    """InitProducerId v5 of a new transactional id: (producer id, epoch)."""
    init = _retry(lambda: c.request(INIT_PRODUCER_ID, 5, {
        "transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}),
        lambda b: b["error_code"])
    assert init["error_code"] == 0, init
    return init["producer_id"], init["producer_epoch"]


def _end(c: RoutedConn, tid: str, pid: int, epoch: int, commit: bool) -> dict[str, Any]:
    return _retry(lambda: c.request(END_TXN, 5, {"transactional_id": tid, "producer_id": pid,
                                                 "producer_epoch": epoch, "committed": commit}),
                  lambda b: b["error_code"])


def _describe(c: RoutedConn, tid: str) -> dict[str, Any]:
    [state] = c.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})["transaction_states"]
    return dict(state)


def test_produce_adds_the_partition_and_end_txn_bumps_the_epoch(txn_broker_tv2: Broker) -> None:
    bootstrap = txn_broker_tv2.bootstrap
    topic = unique_topic("tv2")
    create_topic(bootstrap, topic)
    tid = txn_id("tv2")
    with RoutedConn(bootstrap) as c:
        _find_coordinator(c, 1, tid)
        init = _retry(lambda: c.request(INIT_PRODUCER_ID, 5, {
            "transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}),
            lambda b: b["error_code"])
        assert init["error_code"] == 0, init
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # no AddPartitionsToTxn: Produce v12 adds partition 0
        assert _produce(c, topic, tid, pid, epoch, 0, b"aborted") == 0
        state = _describe(c, tid)
        assert (state["transaction_state"], state["producer_epoch"]) == ("Ongoing", epoch)
        assert [(t["topic"], t["partitions"]) for t in state["topics"]] == [(topic, [0])]
        ended = _end(c, tid, pid, epoch, commit=False)
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 1)
        # the retry of that EndTxn (its answer lost) is answered the same
        again = _end(c, tid, pid, epoch, commit=False)
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (0, pid, epoch + 1)
        # the old epoch may not write any more; the new one opens the next transaction
        assert _produce(c, topic, tid, pid, epoch, 1, b"zombie") == INVALID_PRODUCER_EPOCH
        assert _produce(c, topic, tid, pid, epoch + 1, 0, b"committed") == 0
        ended = _end(c, tid, pid, epoch + 1, commit=True)
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 2)
        # Kafka writes the markers after answering: wait for the state they lead to
        state = wait_until(lambda: _describe(c, tid), 30, 0.1, "the markers written",
                           ok=lambda s: s["transaction_state"] != "PrepareCommit")
        assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteCommit", epoch + 2)
    # aborted record 0, its marker 1, committed record 2, its marker 3
    assert read_partition(bootstrap, topic, "read_committed", 4) == [(2, None, b"committed")]


def test_abort_with_nothing_added_bumps_the_epoch(txn_broker_tv2: Broker) -> None:
    """Issue 26: franz-go ends a transaction whose records all failed before reaching the broker
    with EndTxn v5 abort and no partition added. Kafka takes it as an empty transaction: the
    epoch bumped, CompleteAbort, no marker; its retry gets the same answer; from CompleteCommit
    too. A commit with nothing added, and EndTxn v4 (transaction version 1) on a fresh id, are
    INVALID_TXN_STATE (tmqgate answered the v5 abort so, and PRODUCER_FENCED after a commit)."""
    bootstrap = txn_broker_tv2.bootstrap
    topic = unique_topic("tv2-empty")
    create_topic(bootstrap, topic)
    tid, tid_v4 = txn_id("tv2-empty"), txn_id("tv2-empty-v4")
    with RoutedConn(bootstrap) as c:
        _find_coordinator(c, 1, tid)
        pid, epoch = _init(c, tid)
        ended = _end(c, tid, pid, epoch, commit=False)
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 1)
        def after_abort() -> dict:  # Kafka completes it after answering: the state it leads to
            return wait_until(lambda: _describe(c, tid), 30, 0.1, "the abort completed",
                              ok=lambda s: s["transaction_state"] != "PrepareAbort")

        state = after_abort()
        assert (state["transaction_state"], state["producer_epoch"], state["topics"]) == (
            "CompleteAbort", epoch + 1, [])
        again = _end(c, tid, pid, epoch, commit=False)
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (0, pid, epoch + 1)
        assert _end(c, tid, pid, epoch + 1, commit=True)["error_code"] == INVALID_TXN_STATE
        # the bumped epoch writes and commits the next transaction; then an empty abort again
        assert _produce(c, topic, tid, pid, epoch + 1, 0, b"committed") == 0
        assert _end(c, tid, pid, epoch + 1, commit=True)["producer_epoch"] == epoch + 2
        wait_until(lambda: _describe(c, tid), 30, 0.1, "the markers written",
                   ok=lambda s: s["transaction_state"] == "CompleteCommit")
        ended = _end(c, tid, pid, epoch + 2, commit=False)
        assert (ended["error_code"], ended["producer_id"], ended["producer_epoch"]) == (0, pid, epoch + 3)
        state = after_abort()
        assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteAbort", epoch + 3)
        _find_coordinator(c, 1, tid_v4)
        pid_v4, epoch_v4 = _init(c, tid_v4)
        body = _retry(lambda: c.request(END_TXN, 4, {"transactional_id": tid_v4, "producer_id": pid_v4,
                                                     "producer_epoch": epoch_v4, "committed": False}),
                      lambda b: b["error_code"])
        assert body["error_code"] == INVALID_TXN_STATE
    # the committed record 0 and its marker 1; the empty transactions wrote nothing
    assert read_partition(bootstrap, topic, "read_committed", 2) == [(0, None, b"committed")]


def test_txn_offset_commit_adds_the_group(txn_broker_tv2: Broker) -> None:
    bootstrap = txn_broker_tv2.bootstrap
    topic = unique_topic("tv2-offsets")
    create_topic(bootstrap, topic)
    tid, group = txn_id("tv2-offsets"), unique_topic("tv2-group")
    with RoutedConn(bootstrap) as c:
        _find_coordinator(c, 1, tid)
        _find_coordinator(c, 0, group)
        init = _retry(lambda: c.request(INIT_PRODUCER_ID, 5, {
            "transactional_id": tid, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1}),
            lambda b: b["error_code"])
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # no AddOffsetsToTxn: TxnOffsetCommit v5 adds the group
        body = _retry(lambda: c.request(TXN_OFFSET_COMMIT, 5, {
            "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                       "committed_leader_epoch": -1,
                                                       "committed_metadata": ""}]}]}),
            lambda b: b["topics"][0]["partitions"][0]["error_code"])
        assert body["topics"][0]["partitions"][0]["error_code"] == 0, body
        ended = _end(c, tid, pid, epoch, commit=True)
        assert (ended["error_code"], ended["producer_epoch"]) == (0, epoch + 1)
        fetched = _retry(lambda: c.request(9, 8, {"groups": [{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": [0]}]}], "require_stable": True}),
            lambda b: b["groups"][0]["topics"][0]["partitions"][0]["error_code"])
    [p] = fetched["groups"][0]["topics"][0]["partitions"]
    assert (p["error_code"], p["committed_offset"]) == (0, 7)


