"""An idempotent producer whose connection is held up, and whose messages then time out.

librdkafka (confluent-kafka) with ``enable.idempotence=true`` keeps producing while the proxy
between it and the broker forwards nothing for a while (the TCP connections stay open:
a stalled path), in every other run only the broker's answers are held. Messages older than ``message.timeout.ms`` fail
locally with _MSG_TIMED_OUT; librdkafka then drains its in-flight requests and bumps the producer's epoch itself
(KIP-360; its debug=eos log: "All partitions drained, bumped epoch to PID{...}") before sending anything
else, restarting each partition's sequence at 0. When the path comes back the broker answers the held requests and the
new ones; the producer must go on and ``flush()`` must return with every record answered.

The broker's answers that librdkafka's recovery depends on are Kafka's (raw tests below):
an InitProducerId without a transactional id always hands out a new producer id with epoch
0, even when the producer gives its id and epoch (TransactionCoordinator.handleInitProducerId);
a batch whose sequence is older than the five remembered batches is OUT_OF_ORDER_SEQUENCE_NUMBER
(ProducerAppendInfo.checkSequence) — never DUPLICATE_SEQUENCE_NUMBER, which librdkafka takes as
"written before" and reports delivered without an offset.

What a user checks: flush returns 0 (no record left without a delivery report), and every
record reported delivered is in the topic at the offset its report gave — and no record twice
within one producer epoch, the broker's part of idempotence. A second copy from an earlier
epoch is the client's: after its epoch bump librdkafka sends again, with sequences restarted
at 0, messages whose first attempt it never heard back about; no broker can tell those apart
(Kafka's ProducerStateManager accepts a new epoch at sequence 0). The CI saw it once, on
tmqgate, in a run with only the answers held (delivered at 683, first written at 681). The
scenario is repeated, since what the stall hits (which requests are in flight, which
sequences timed out) varies from run to run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from .group_helpers import create_topic, unique_name
from .helpers import unique_topic, wait_until
from .proxy import RecordingProxy
from .raw import RoutedConn

# Runs of the held-connection scenario: the issue saw the stall in 2 of 6 runs; ~25 runs here
# never reproduced it (before or after the fixes), so CI keeps 4 (both hold modes twice).
RUNS = 4
PARTITIONS = 2
HOLD_S = 10.0
MESSAGE_TIMEOUT_MS = 4000


def _read_all(bootstrap: str, topic: str) -> dict[int, list[tuple[int, bytes, tuple[int, int]]]]:
    """Every record of the topic, per partition: (offset, value, (producer id, epoch) of its
    batch), read with raw Fetches to the high watermark."""
    from tmqgate.protocol.records import decode_records, iter_batches

    out: dict[int, list[tuple[int, bytes, tuple[int, int]]]] = {p: [] for p in range(PARTITIONS)}
    with RoutedConn(bootstrap) as conn:
        for p in range(PARTITIONS):
            offset, end = 0, conn.list_offsets(topic, p, -1)["offset"]
            deadline = time.monotonic() + 60
            while offset < end:
                assert time.monotonic() < deadline, (p, offset, end)
                data = conn.fetch(topic, p, offset).get("records") or b""
                for h in iter_batches(data):
                    for r in decode_records(data[h.offset:h.offset + h.size]):
                        if r.offset >= offset and r.value is not None:
                            out[p].append((r.offset, r.value, (h.producer_id, h.producer_epoch)))
                    offset = max(offset, h.base_offset + h.last_offset_delta + 1)
    return out


def _one_run(broker_bootstrap: str, run: int, responses_only: bool) -> None:
    from confluent_kafka import Producer

    topic = unique_name(f"stall{run}")
    create_topic(broker_bootstrap, topic, PARTITIONS)
    delivered: dict[bytes, tuple[int, int]] = {}
    failed: dict[bytes, str] = {}
    lock = threading.Lock()

    def report(err: Any, msg: Any) -> None:
        with lock:
            if err is None:
                delivered[msg.value()] = (msg.partition(), msg.offset())
            else:
                failed[msg.value()] = err.name()

    with RecordingProxy(broker_bootstrap) as proxy:
        p = Producer({"bootstrap.servers": proxy.bootstrap, "client.id": "compat-stall", "enable.idempotence": True,
                      "acks": "all", "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                      "request.timeout.ms": 3000, "retry.backoff.ms": 100})
        i = 0

        def produce_for(seconds: float) -> None:
            nonlocal i
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                p.produce(topic, value=f"r{run}-{i:07d}".encode(), partition=i % PARTITIONS, on_delivery=report)
                i += 1
                p.poll(0.005)

        produce_for(1.5)
        proxy.hold(responses_only=responses_only)
        try:
            produce_for(HOLD_S)
        finally:
            proxy.release()
        produce_for(1.5)
        left = p.flush(60)
        assert left == 0, f"run {run}: flush left {left} of {i} records without a delivery report (stalled)"
        produced = i

    with lock:
        assert len(delivered) + len(failed) == produced
        assert set(failed.values()) <= {"_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE"}, set(failed.values())
        assert delivered, f"run {run}: nothing delivered"
    got = _read_all(broker_bootstrap, topic)
    seen: dict[bytes, list[tuple[int, int, tuple[int, int]]]] = {}
    for part, records in got.items():
        for offset, value, producer in records:
            seen.setdefault(value, []).append((part, offset, producer))
    for value, where in delivered.items():
        assert where in [(part, offset) for part, offset, _ in seen.get(value, [])], \
            (run, value, where, seen.get(value))
    # A timed-out record may or may not have been written (it may have reached the broker
    # before the hold); no record twice within one producer epoch (see the module docstring).
    twice = {v: w for v, w in seen.items() if len({producer for _, _, producer in w}) < len(w)}
    assert not twice, list(twice.items())[:3]


@pytest.mark.parametrize("run", range(RUNS))
def test_idempotent_producer_survives_a_held_connection(broker: Any, run: int) -> None:
    # Odd runs hold only the broker's answers: the batches are written, the producer hears
    # nothing, times its messages out and bumps its epoch while the broker has them.
    _one_run(broker.bootstrap, run, responses_only=run % 2 == 1)


PRODUCE, INIT_PRODUCER_ID = 0, 22
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _init_producer_id(conn: RoutedConn, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    # a freshly started Kafka answers COORDINATOR_LOAD_IN_PROGRESS for a moment
    body = wait_until(lambda: conn.request(INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": producer_id,
        "producer_epoch": epoch}), 60, 0.2, "the coordinator loaded", ok=lambda b: b["error_code"] not in (14, 15))
    assert body["error_code"] == 0, body
    return body["producer_id"], body["producer_epoch"]


def _batch(value: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    from tmqgate.protocol.records import build_batch

    return build_batch([(None, value, [], int(time.time() * 1000))], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence)


def test_init_producer_id_without_transactional_id_gives_a_new_producer_id(broker: Any) -> None:
    with RoutedConn(broker.bootstrap) as conn:
        pid, epoch = _init_producer_id(conn)
        assert epoch == 0
        again, again_epoch = _init_producer_id(conn, pid, epoch)
        assert again != pid and again_epoch == 0
        bumped, bumped_epoch = _init_producer_id(conn, again, 5)
        assert bumped not in (pid, again) and bumped_epoch == 0


def test_a_sequence_older_than_the_window_is_out_of_order(broker: Any) -> None:
    topic = unique_topic("idem-window")
    create_topic(broker.bootstrap, topic, 1)
    with RoutedConn(broker.bootstrap) as conn:
        pid, epoch = _init_producer_id(conn)
        bases = []
        for seq in range(6):  # one more than the five batches a broker remembers
            answer = conn.produce(topic, 0, _batch(b"v%d" % seq, pid, epoch, seq))
            assert answer["error_code"] == 0, answer
            bases.append(answer["base_offset"])
        assert bases == list(range(6))
        # a retry of a remembered batch: its first answer, nothing written
        retried = conn.produce(topic, 0, _batch(b"v1", pid, epoch, 1))
        assert (retried["error_code"], retried["base_offset"]) == (0, 1)
        # the first batch, no longer remembered: out of order (not DUPLICATE_SEQUENCE_NUMBER)
        evicted = conn.produce(topic, 0, _batch(b"v0", pid, epoch, 0))
        assert evicted["error_code"] == OUT_OF_ORDER_SEQUENCE_NUMBER, evicted
        after = conn.produce(topic, 0, _batch(b"v6", pid, epoch, 6))
        assert (after["error_code"], after["base_offset"]) == (0, 6)
