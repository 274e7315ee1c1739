"""Cost of the transactional data plane in storage (`storage/wal_txns.py`):
`python -m bench.txn_bench [batches]`.

On a real LevelDB in a temporary directory (wal_level 1): appends of plain 10-record batches;
the same batches transactional, a commit marker after every 10 (one transaction per 10
batches); abort markers alone (markers per second); then the read side: the last stable
offset and an aborted-transactions lookup with 10,000 aborted transactions indexed. Prints
rates, best of 3. Nothing here asserts timings.
"""

from __future__ import annotations

import sys
import tempfile
import time

from tmqgate.protocol.records import build_batch, parse_header
from tmqgate.storage import Store

PID = 5000


def _best(fn: object, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    records = [(None, b"x" * 100, None, 1_700_000_000_000 + i) for i in range(10)]
    plain = build_batch(records)
    txn = build_batch(records, producer_id=PID, producer_epoch=0, base_sequence=0, is_transactional=True)
    h = parse_header(plain)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        runs = iter(range(1_000_000))

        def appends(batch: bytes, marker_every: int = 0) -> None:
            db = f"d{next(runs)}"
            store.create_database(db, 1)
            for i in range(n):
                store.append(db, 0, batch, 10, h.max_timestamp)
                if marker_every and i % marker_every == marker_every - 1:
                    store.write_txn_marker(db, 0, PID, 0, True, 0)

        def markers() -> None:
            db = f"d{next(runs)}"
            store.create_database(db, 1)
            for _ in range(n):
                store.write_txn_marker(db, 0, PID, 0, False, 0)

        t_plain = _best(lambda: appends(plain))
        t_txn = _best(lambda: appends(txn, 10))
        t_markers = _best(markers)
        print(f"plain appends:                      {n / t_plain:10.0f} batches/s")
        print(f"transactional appends + commit/10:  {n / t_txn:10.0f} batches/s "
              f"({n // 10} markers included)")
        print(f"abort markers alone:                {n / t_markers:10.0f} markers/s")
        db = "aborted"
        store.create_database(db, 1)
        for _ in range(10_000):
            store.append(db, 0, txn, 10, h.max_timestamp)
            store.write_txn_marker(db, 0, PID, 0, False, 0)
        end = store.next_version(db, 0)
        lookups = 10_000
        t_lso = _best(lambda: [store.last_stable_offset(db, 0) for _ in range(lookups)])
        t_ab = _best(lambda: [store.aborted_transactions(db, 0, end // 2, end // 2 + 1000) for _ in range(lookups)])
        print(f"last_stable_offset:                 {t_lso / lookups * 1e6:10.2f} us/call")
        print(f"aborted_transactions (10k indexed): {t_ab / lookups * 1e6:10.2f} us/call (a 1000-offset range)")
        store.close()


if __name__ == "__main__":
    main()
