"""What the transaction coordinator costs (issue 14, points 1 and 2).

1. In process, over a real LevelDB store: one transaction's coordinator work (AddPartitionsToTxn
   of 3 partitions + EndTxn commit: three state writes — Ongoing, PrepareCommit,
   CompleteCommit — under the store's sync policy, wal_level 1 and 2; markers not written), and Produce's question
   ``check_produce`` (the hot path: asked for every transactional batch).
2. End to end over one raw connection: AddPartitionsToTxn + EndTxn round trips against
   `tmqgate serve` (and, with --kafka, against the reference Kafka broker), medians of rounds.

    PYTHONPATH=... python -m bench.txn_coordinator_bench [--txns 2000] [--rounds 3] [--kafka]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compat_tests.brokers import TmqgateProcess  # noqa: E402
from compat_tests.group_helpers import create_topic  # noqa: E402
from compat_tests.raw import RawConn  # noqa: E402
from compat_tests.test_txn_coordinator import _add, _coordinator_ready, _end, _init  # noqa: E402
from tmqgate.coordinator.transactions import TransactionCoordinator, TxnConfig  # noqa: E402
from tmqgate.storage import Store  # noqa: E402

PARTS = [("bench", 0), ("bench", 1), ("bench", 2)]


def in_process(n: int, wal_level: int = 1) -> tuple[float, float]:
    """(µs per transaction, µs per check_produce)."""
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "data", wal_level=wal_level,
                                                   fsync_period_ms=0 if wal_level == 2 else 3000) as store:
        now = int(time.time() * 1000)
        c = TransactionCoordinator(store.txn_states, store, TxnConfig(), now)
        r = c.init_producer_id(now, "bench-tid", 60_000)
        t0 = time.perf_counter()
        for i in range(n):
            c.add_partitions(now + i, "bench-tid", r.producer_id, r.producer_epoch, PARTS)
            c.end_txn(now + i, "bench-tid", r.producer_id, r.producer_epoch, commit=True)
        per_txn = (time.perf_counter() - t0) / n * 1e6
        c.add_partitions(now + n, "bench-tid", r.producer_id, r.producer_epoch, PARTS)
        m = n * 50
        t0 = time.perf_counter()
        for _ in range(m):
            c.check_produce("bench-tid", r.producer_id, r.producer_epoch, "bench", 1)
        per_check = (time.perf_counter() - t0) / m * 1e6
    return per_txn, per_check


def in_process_tv2(n: int) -> tuple[float, float]:
    """Transaction version 2 (wal_level 1): (µs per transaction — the implicit add of Produce's
    first batch to each of 3 partitions, then EndTxn bumping the epoch —, µs per later batch's
    add of a partition already in the transaction)."""
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "data", wal_level=1, fsync_period_ms=3000) as store:
        now = int(time.time() * 1000)
        c = TransactionCoordinator(store.txn_states, store, TxnConfig(), now)
        r = c.init_producer_id(now, "bench-tid", 60_000)
        pid, epoch = r.producer_id, r.producer_epoch
        t0 = time.perf_counter()
        for i in range(n):
            for p in PARTS:
                c.add_implicitly(now + i, "bench-tid", pid, epoch, partitions=[p])
            epoch = c.end_txn(now + i, "bench-tid", pid, epoch, commit=True, transaction_version=2).producer_epoch
            if epoch >= 32_000:  # stay clear of the exhaustion (a producer id rotation)
                epoch = c.init_producer_id(now + i, "bench-tid", 60_000, (pid, epoch)).producer_epoch
        per_txn = (time.perf_counter() - t0) / n * 1e6
        c.add_implicitly(now + n, "bench-tid", pid, epoch, partitions=PARTS)
        m = n * 50
        t0 = time.perf_counter()
        for _ in range(m):
            c.add_implicitly(now + n, "bench-tid", pid, epoch, partitions=[("bench", 1)])
        per_add = (time.perf_counter() - t0) / m * 1e6
    return per_txn, per_add


def round_trips(bootstrap: str, n: int) -> float:
    """µs per AddPartitionsToTxn + EndTxn over one connection."""
    topic = f"bench-txn-{time.time_ns()}"
    create_topic(bootstrap, topic, 3)
    with RawConn(bootstrap) as c:
        tid = topic + "-tid"
        _coordinator_ready(c, tid)
        r = _init(c, tid)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        t0 = time.perf_counter()
        for _ in range(n):
            _add(c, tid, pid, epoch, {topic: [0, 1, 2]})
            assert _end(c, tid, pid, epoch, commit=True) == 0
        return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--txns", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kafka", action="store_true", help="also against the reference Kafka broker")
    args = ap.parse_args()
    for level in (1, 2):
        runs = [in_process(args.txns if level == 1 else args.txns // 10, level) for _ in range(args.rounds)]
        print(f"in process, wal_level {level}: {statistics.median(r[0] for r in runs):.0f} µs per transaction "
              f"(3 state writes), check_produce {statistics.median(r[1] for r in runs):.2f} µs")
    runs = [in_process_tv2(args.txns) for _ in range(args.rounds)]
    print(f"in process, transaction version 2, wal_level 1: {statistics.median(r[0] for r in runs):.0f} µs per "
          f"transaction (5 state writes), implicit add of a known partition "
          f"{statistics.median(r[1] for r in runs):.2f} µs")
    with tempfile.TemporaryDirectory() as d:
        proc = TmqgateProcess(Path(d))
        proc.start()
        try:
            tm = [round_trips(proc.bootstrap, args.txns // 4) for _ in range(args.rounds)]
        finally:
            proc.stop()
    print(f"tmqgate: {statistics.median(tm):.0f} µs per AddPartitionsToTxn + EndTxn (raw, one connection)")
    if args.kafka:
        from compat_tests import kafka_ref

        with tempfile.TemporaryDirectory() as d:
            ref = kafka_ref.start_reference_kafka(Path(d))
            try:
                # Kafka writes its markers after answering EndTxn: the next AddPartitionsToTxn
                # may get CONCURRENT_TRANSACTIONS and is retried (what clients do).
                km = [round_trips(ref.bootstrap, args.txns // 4) for _ in range(args.rounds)]
            finally:
                ref.stop()
        print(f"kafka 4.3.1: {statistics.median(km):.0f} µs per AddPartitionsToTxn + EndTxn (raw, one connection)")


if __name__ == "__main__":
    main()
