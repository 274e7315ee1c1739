"""What the log of ``__consumer_offsets`` (storage/group_log.py, key 0x52) costs an offset
commit, in process on a real LevelDB store (no network: the wire's decode/encode is the same
either way), and what reading it costs.

1. ``Store.commit_offsets`` of P partitions (one WriteBatch) with the log (its record batch
   built in Kafka's format and put in the same WriteBatch) and without it (the log's ``stage``
   replaced by a no-op), interleaved over rounds, medians;
2. reading the log back from offset 0 (``GroupLog.read``, 1 MiB per call): MB/s and records/s.

    PYTHONPATH=... python -m bench.group_log_bench [--calls 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tmqgate.storage import Store  # noqa: E402


def _commits(store: Store, calls: int, partitions: int) -> float:
    """µs per commit of `partitions` offsets."""
    t0 = time.perf_counter()
    for i in range(calls):
        store.commit_offsets(f"g{i % 100}", [("topic-a", p, i, -1, "") for p in range(partitions)])
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "data")
        log = store.group_log
        real_stage = log.stage
        for partitions in (1, 16):
            with_log, without = [], []
            for _ in range(args.rounds):
                log.stage = real_stage  # type: ignore[method-assign]
                with_log.append(_commits(store, args.calls, partitions))
                log.stage = lambda *a, **k: None  # type: ignore[method-assign]
                without.append(_commits(store, args.calls, partitions))
            log.stage = real_stage  # type: ignore[method-assign]
            a, b = statistics.median(with_log), statistics.median(without)
            print(f"commit of {partitions:2d} partition(s): {a:6.1f} µs with the log, {b:6.1f} µs without "
                  f"(+{a - b:.1f} µs, +{(a - b) / b * 100:.0f}%)")
        total_bytes = records = 0
        t0 = time.perf_counter()
        for p in range(log.partitions):
            offset, end = 0, log.next_offset(p)
            while offset < end:
                batches = log.read(p, offset, 1 << 20)
                for b in batches:
                    total_bytes += len(b)
                    n = int.from_bytes(b[57:61], "big")
                    records += n
                    offset = int.from_bytes(b[:8], "big") + n
        dt = time.perf_counter() - t0
        print(f"read back: {records} records, {total_bytes / 1e6:.1f} MB in {dt:.2f} s "
              f"({total_bytes / 1e6 / dt:.0f} MB/s, {records / dt / 1e3:.0f}k records/s)")
        store.close()


if __name__ == "__main__":
    main()
