"""The transaction coordinator over the raw protocol: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions answer
as Apache Kafka's coordinator does (transaction version 1 request versions, so both brokers
follow the same rules whatever transaction.version the reference cluster finalized).

No data is produced here: the markers and the offsets of a transaction are the data plane's
and the group coordinator's (compat tests of those run with real transactional clients)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from .brokers import BrokerProcess
from .conftest import Broker
from .group_helpers import create_topic
from .helpers import unique_topic, wait_until
from .raw import RawConn, RoutedConn

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TXNS, LIST_TXNS = 65, 66
INIT_V, ADD_V, OFFSETS_V, END_V = 4, 3, 3, 3  # all below the transaction-version-2 ones

NONE, UNKNOWN_TOPIC, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 3, 47, 48
INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS = 49, 50, 51
OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED, TRANSACTIONAL_ID_NOT_FOUND, TRANSACTION_ABORTABLE = 55, 90, 105, 120
# Kafka's coordinator answers these while __transaction_state is created or loaded, and
# CONCURRENT_TRANSACTIONS while a transaction's markers are being written: clients retry.
RETRIABLE = {14, 15, 16, CONCURRENT_TRANSACTIONS}


def _retry(call: Callable[[], dict[str, Any]], code: Callable[[dict[str, Any]], int],
           timeout: float = 60.0) -> dict[str, Any]:
    return wait_until(call, timeout, 0.2, "an answer that is not retriable", ok=lambda b: code(b) not in RETRIABLE)


def _coordinator_ready(c: RoutedConn, tid: str) -> None:
    body = _retry(lambda: c.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]}),
                  lambda b: b["coordinators"][0]["error_code"])
    assert body["coordinators"][0]["error_code"] == NONE, body


def _init(c: RoutedConn, tid: str, timeout_ms: int = 60_000, retry: bool = True,
          version: int = INIT_V) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        return c.request(INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout_ms": timeout_ms,
                                                      "producer_id": -1, "producer_epoch": -1})
    return _retry(call, lambda b: b["error_code"]) if retry else call()


def _add(c: RoutedConn, tid: str, pid: int, epoch: int, parts: dict[str, list[int]],
         version: int = ADD_V) -> dict[tuple[str, int], int]:
    body = _retry(lambda: c.request(ADD_PARTITIONS, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]}),
        lambda b: max(p["partition_error_code"] for t in b["results_by_topic_v3_and_below"]
                      for p in t["results_by_partition"]))
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in body["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def _end(c: RoutedConn, tid: str, pid: int, epoch: int, commit: bool, retry: bool = True,
         version: int = END_V) -> int:
    def call() -> dict[str, Any]:
        return c.request(END_TXN, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                            "committed": commit})
    body = _retry(call, lambda b: b["error_code"]) if retry else call()
    return int(body["error_code"])


def _describe(c: RoutedConn, tid: str) -> dict[str, Any]:
    [state] = c.request(DESCRIBE_TXNS, 0, {"transactional_ids": [tid]})["transaction_states"]
    return state


def _describe_until(c: RoutedConn, tid: str, state: str, timeout: float = 60.0) -> dict[str, Any]:
    """The markers are written after EndTxn is answered: wait for the state it leads to."""
    return wait_until(lambda: _describe(c, tid), timeout, 0.2, f"{tid} in {state}",
                      ok=lambda got: got["transaction_state"] == state)


def _list_transactions(broker: Broker, version: int, **filters: Any) -> dict[str, Any]:
    """ListTransactions as Kafka's admin client sends it: to every broker, the answers merged
    (each lists the transactions it coordinates)."""
    body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1, **filters}
    answers = []
    for address in broker.nodes or (broker.bootstrap,):
        with RawConn(address) as c:
            answers.append(c.request(LIST_TXNS, version, body))
    return {**answers[0], "error_code": max(a["error_code"] for a in answers),
            "transaction_states": [s for a in answers for s in a["transaction_states"]]}


@pytest.fixture(scope="module")
def topic(broker: Broker) -> str:
    name = unique_topic("txn-coord")
    create_topic(broker.bootstrap, name, 2)
    return name


def test_second_init_bumps_the_epoch_and_fences_the_first(broker: Broker, topic: str) -> None:
    tid = unique_topic("tid-fence")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        first = _init(c, tid)
        assert first["error_code"] == NONE, first
        assert first["producer_epoch"] == 0
        second = _init(c, tid)
        assert second["error_code"] == NONE, second
        assert (second["producer_id"], second["producer_epoch"]) == (first["producer_id"], 1)
        pid = first["producer_id"]
        # the first instance is a zombie now
        assert _add(c, tid, pid, 0, {topic: [0]}) == {(topic, 0): PRODUCER_FENCED}
        assert _add(c, tid, pid, 0, {topic: [0]}, version=1) == {(topic, 0): INVALID_PRODUCER_EPOCH}
        assert _end(c, tid, pid, 0, commit=True) == PRODUCER_FENCED
        assert _end(c, tid, pid, 0, commit=True, version=1) == INVALID_PRODUCER_EPOCH
        # the second one works
        assert _add(c, tid, pid, 1, {topic: [0]}) == {(topic, 0): NONE}
        # a third instance while the second's transaction is open: the coordinator aborts it
        # (fencing epoch 2) and answers CONCURRENT_TRANSACTIONS; the retry gets epoch 3
        third = _init(c, tid, retry=False)
        assert third["error_code"] == CONCURRENT_TRANSACTIONS, third
        again = _init(c, tid)
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (NONE, pid, 3)
        assert _describe(c, tid)["transaction_state"] == "Empty"
        assert _add(c, tid, pid, 1, {topic: [1]}) == {(topic, 1): PRODUCER_FENCED}


def test_commit_and_abort(broker: Broker, topic: str) -> None:
    tid = unique_topic("tid-commit")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid, timeout_ms=45_000)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        before = _describe(c, tid)
        assert (before["error_code"], before["transaction_state"], before["topics"]) == (NONE, "Empty", [])
        assert _add(c, tid, pid, epoch, {topic: [0, 1]}) == {(topic, 0): NONE, (topic, 1): NONE}
        # an unknown topic fails the request: nothing else is added
        missing = unique_topic("no-such")
        assert _add(c, tid, pid, epoch, {topic: [1], missing: [0]}) == {
            (topic, 1): OPERATION_NOT_ATTEMPTED, (missing, 0): UNKNOWN_TOPIC}
        ongoing = _describe(c, tid)
        assert ongoing["error_code"] == NONE
        assert ongoing["transaction_state"] == "Ongoing"
        assert (ongoing["producer_id"], ongoing["producer_epoch"]) == (pid, epoch)
        assert ongoing["transaction_timeout_ms"] == 45_000
        assert abs(ongoing["transaction_start_time_ms"] - time.time() * 1000) < 120_000
        assert [(t["topic"], sorted(t["partitions"])) for t in ongoing["topics"]] == [(topic, [0, 1])]

        assert _end(c, tid, pid, epoch, commit=True) == NONE
        done = _describe_until(c, tid, "CompleteCommit")
        assert (done["transaction_state"], done["topics"]) == ("CompleteCommit", [])
        assert _end(c, tid, pid, epoch, commit=True) == NONE  # a retried commit
        assert _end(c, tid, pid, epoch, commit=False) == INVALID_TXN_STATE

        assert _add(c, tid, pid, epoch, {topic: [1]}) == {(topic, 1): NONE}
        assert _end(c, tid, pid, epoch, commit=False) == NONE
        assert _describe_until(c, tid, "CompleteAbort")["transaction_state"] == "CompleteAbort"
        assert _end(c, tid, pid, epoch, commit=True) == INVALID_TXN_STATE


def test_add_offsets_to_txn(broker: Broker, topic: str) -> None:
    tid = unique_topic("tid-offsets")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]

        def add(e: int, version: int = OFFSETS_V) -> int:
            body = _retry(lambda: c.request(ADD_OFFSETS, version, {
                "transactional_id": tid, "producer_id": pid, "producer_epoch": e, "group_id": "txn-group"}),
                lambda b: b["error_code"])
            return int(body["error_code"])

        assert add(epoch) == NONE
        assert _describe(c, tid)["transaction_state"] == "Ongoing"
        assert add(epoch + 5) == PRODUCER_FENCED
        assert add(epoch + 5, version=1) == INVALID_PRODUCER_EPOCH
        assert _end(c, tid, pid, epoch, commit=True) == NONE
        assert _describe_until(c, tid, "CompleteCommit")["transaction_state"] == "CompleteCommit"


def test_end_txn_without_a_transaction(broker: Broker) -> None:
    tid = unique_topic("tid-empty")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert _end(c, tid, pid, epoch, commit=True) == INVALID_TXN_STATE
        assert _end(c, tid, pid, epoch, commit=False) == INVALID_TXN_STATE
        assert _end(c, tid, pid + 1, epoch, commit=True) == INVALID_PRODUCER_ID_MAPPING
        assert _end(c, unique_topic("tid-unknown"), pid, epoch, commit=True) == INVALID_PRODUCER_ID_MAPPING


def test_transaction_timeout_over_the_maximum(broker: Broker) -> None:
    """transaction.max.timeout.ms is 900000 on both brokers (Kafka's default)."""
    tid = unique_topic("tid-timeout")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        assert _init(c, tid, timeout_ms=900_001)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert _init(c, tid, timeout_ms=0)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert _describe(c, tid)["error_code"] == TRANSACTIONAL_ID_NOT_FOUND
        assert _init(c, tid, timeout_ms=900_000)["error_code"] == NONE


def test_describe_and_list_transactions(broker: Broker, topic: str) -> None:
    busy, idle = unique_topic("tid-list-busy"), unique_topic("tid-list-idle")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, busy)
        _coordinator_ready(c, idle)
        b = _init(c, busy)
        i = _init(c, idle)
        assert _add(c, busy, b["producer_id"], b["producer_epoch"], {topic: [1]}) == {(topic, 1): NONE}
        unknown = _describe(c, unique_topic("tid-nobody"))
        assert unknown["error_code"] == TRANSACTIONAL_ID_NOT_FOUND

        def listed(version: int = 1, **filters: Any) -> dict[str, Any]:
            return _list_transactions(broker, version, **filters)

        everything = listed()
        assert everything["error_code"] == NONE
        found = {s["transactional_id"]: (s["producer_id"], s["transaction_state"])
                 for s in everything["transaction_states"]}
        assert found[busy] == (b["producer_id"], "Ongoing")
        assert found[idle] == (i["producer_id"], "Empty")
        ongoing = listed(state_filters=["Ongoing", "NoSuchState"])
        assert ongoing["unknown_state_filters"] == ["NoSuchState"]
        names = {s["transactional_id"] for s in ongoing["transaction_states"]}
        assert busy in names and idle not in names
        by_pid = listed(producer_id_filters=[i["producer_id"]])
        assert [s["transactional_id"] for s in by_pid["transaction_states"]] == [idle]
        # duration filter (v1): only transactions running longer than it
        long_running = listed(duration_filter=3_600_000)
        assert busy not in {s["transactional_id"] for s in long_running["transaction_states"]}
        assert _end(c, busy, b["producer_id"], b["producer_epoch"], commit=False) == NONE


def test_transactional_id_pattern(broker: Broker) -> None:
    """ListTransactions v2 (KIP-1152): a regular expression over the transactional ids."""
    prefix = unique_topic("tid-pattern")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, prefix + "-a")
        for suffix in ("-a", "-b"):
            assert _init(c, prefix + suffix)["error_code"] == NONE
        body = _list_transactions(broker, 2, transactional_id_pattern=prefix + "-[a]")
        assert body["error_code"] == NONE
        assert [s["transactional_id"] for s in body["transaction_states"]] == [prefix + "-a"]


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(broker: Broker, topic: str) -> None:
    """The coordinator aborts a transaction past transaction.timeout.ms (Kafka checks every
    transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s) with a bumped epoch."""
    tid = unique_topic("tid-expire")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid, timeout_ms=1000)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert _add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): NONE}
        aborted = _describe_until(c, tid, "CompleteAbort", timeout=90)
        assert aborted["transaction_state"] == "CompleteAbort", aborted
        assert aborted["producer_id"] == pid and aborted["producer_epoch"] > epoch
        assert _end(c, tid, pid, epoch, commit=True) == PRODUCER_FENCED
        assert _add(c, tid, pid, epoch, {topic: [0]}) == {(topic, 0): PRODUCER_FENCED}


def test_open_transaction_survives_sigkill(restartable_broker: BrokerProcess) -> None:
    """The coordinator's state is written before it answers: after kill -9 the open
    transaction is still there with its producer id, epoch and partitions."""
    b = restartable_broker
    name = unique_topic("txn-kill")
    create_topic(b.bootstrap, name, 1)
    tid = unique_topic("tid-kill")
    with RoutedConn(b.bootstrap) as c:
        _coordinator_ready(c, tid)
        init = _init(c, tid, timeout_ms=600_000)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        assert _add(c, tid, pid, epoch, {name: [0]}) == {(name, 0): NONE}
    b.kill()
    b.restart()
    with RoutedConn(b.bootstrap) as c:
        _coordinator_ready(c, tid)
        state = _retry(lambda: _describe(c, tid), lambda s: s["error_code"])
        assert (state["transaction_state"], state["producer_id"], state["producer_epoch"]) == ("Ongoing", pid, epoch)
        assert [(t["topic"], t["partitions"]) for t in state["topics"]] == [(name, [0])]
        assert _end(c, tid, pid, epoch, commit=False) == NONE
        assert _describe_until(c, tid, "CompleteAbort")["transaction_state"] == "CompleteAbort"


def test_batched_add_partitions_and_verify_only(broker: Broker, topic: str) -> None:
    """AddPartitionsToTxn v4+ (KIP-890, what brokers send): several transactions in one request,
    and verify_only, which adds nothing and answers, per partition, whether it is in the
    transaction (TRANSACTION_ABORTABLE when not)."""
    first = unique_topic("tid-batch-1")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, first)
        # one request goes to one coordinator: the second id is one that broker coordinates too
        second = next(tid for tid in (unique_topic("tid-batch-2") for _ in range(100))
                      if c.coordinator(tid, 1) == c.coordinator(first, 1))
        a, b = _init(c, first), _init(c, second)

        def batch(verify: bool, *txns: tuple[str, dict[str, Any], list[int]]) -> dict[str, dict[tuple[str, int], int]]:
            body = c.request(ADD_PARTITIONS, 4, {"transactions": [
                {"transactional_id": tid, "producer_id": ids["producer_id"], "producer_epoch": ids["producer_epoch"],
                 "verify_only": verify, "topics": [{"name": topic, "partitions": parts}]}
                for tid, ids, parts in txns]})
            assert body["error_code"] == NONE, body
            return {r["transactional_id"]: {(t["name"], p["partition_index"]): p["partition_error_code"]
                                            for t in r["topic_results"] for p in t["results_by_partition"]}
                    for r in body["results_by_transaction"]}

        assert batch(False, (first, a, [0]), (second, b, [0, 1])) == {
            first: {(topic, 0): NONE}, second: {(topic, 0): NONE, (topic, 1): NONE}}
        assert [t["partitions"] for t in _describe(c, first)["topics"]] == [[0]]
        assert batch(True, (first, a, [0, 1])) == {first: {(topic, 0): NONE, (topic, 1): TRANSACTION_ABORTABLE}}
        assert [t["partitions"] for t in _describe(c, first)["topics"]] == [[0]]  # verify added nothing
        stale = {"producer_id": a["producer_id"], "producer_epoch": a["producer_epoch"] + 1}
        assert batch(True, (first, stale, [0])) == {first: {(topic, 0): PRODUCER_FENCED}}
        for tid, ids in ((first, a), (second, b)):
            assert _end(c, tid, ids["producer_id"], ids["producer_epoch"], commit=False) == NONE


def test_kip360_init_with_producer_id_and_epoch(broker: Broker) -> None:
    """KIP-360: a producer that gives its producer id and epoch gets the next epoch; a retry of
    that call (the previous epoch) gets the same answer without a second bump; another
    producer id is fenced (INVALID_PRODUCER_EPOCH before InitProducerId v4)."""
    tid = unique_topic("tid-kip360")
    with RoutedConn(broker.bootstrap) as c:
        _coordinator_ready(c, tid)
        first = _init(c, tid)
        pid = first["producer_id"]

        def init(producer_id: int, epoch: int, version: int = INIT_V) -> tuple[int, int, int]:
            body = _retry(lambda: c.request(INIT_PRODUCER_ID, version, {
                "transactional_id": tid, "transaction_timeout_ms": 60_000, "producer_id": producer_id,
                "producer_epoch": epoch}), lambda b: b["error_code"])
            return body["error_code"], body["producer_id"], body["producer_epoch"]

        assert init(pid, 0) == (NONE, pid, 1)
        assert init(pid, 0) == (NONE, pid, 1)  # the retry
        assert init(pid, 1) == (NONE, pid, 2)
        assert init(pid + 1000, 2)[0] == PRODUCER_FENCED
        assert init(pid + 1000, 2, version=3)[0] == INVALID_PRODUCER_EPOCH
