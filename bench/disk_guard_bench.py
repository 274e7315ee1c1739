"""What the full-disk guard (storage/space.py) costs on the write path, and the reserve's start-up cost.

Run: ``python bench/disk_guard_bench.py [appends]`` — prints, interleaved over several rounds
(medians): µs per LevelDB put and per 2-key WriteBatch through plyvel directly and through
``GuardedDB``; µs per ``Store.append`` of a 100-byte and a 16 KB batch; and the time to
allocate the default 128 MiB reserve file in the data directory's filesystem (the current
directory's).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import plyvel

from tmqgate.storage import Store
from tmqgate.storage.space import DiskSpace


def per_op(fn, n: int) -> float:
    t = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t) / n * 1e6


def main(n: int = 50_000) -> None:
    root = tempfile.mkdtemp(prefix="guard-bench-", dir=".")
    try:
        space = DiskSpace(root, 0)
        guarded = space.open(os.path.join(root, "g"), write_buffer_size=64 << 20)
        raw = plyvel.DB(os.path.join(root, "r"), create_if_missing=True, write_buffer_size=64 << 20)
        value = bytes(100)
        results: dict[str, list[float]] = {k: [] for k in ("put plyvel", "put guarded", "batch plyvel",
                                                            "batch guarded")}
        off = [0]

        def puts(db):
            def run(k: int) -> None:
                base = off[0]
                off[0] += k
                for i in range(base, base + k):
                    db.put(i.to_bytes(8, "big"), value)
            return run

        def batches(db):
            def run(k: int) -> None:
                base = off[0]
                off[0] += k
                for i in range(base, base + k):
                    wb = db.write_batch()
                    wb.put(i.to_bytes(8, "big"), value)
                    wb.put(b"seq", value)
                    wb.write()
            return run

        for _ in range(7):
            results["put plyvel"].append(per_op(puts(raw), n))
            results["put guarded"].append(per_op(puts(guarded), n))
            results["batch plyvel"].append(per_op(batches(raw), n))
            results["batch guarded"].append(per_op(batches(guarded), n))
        for name, xs in results.items():
            print(f"{name:14s} {statistics.median(xs):6.2f} µs")
        guarded.close()
        raw.close()

        for size in (100, 16_000):
            store = Store(os.path.join(root, f"s{size}"))
            store.create_database("t", 1)
            batch = bytes(size)
            k = n // 5 if size > 1000 else n
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for i in range(k):
                    store.append("t", 0, batch, 1, 1_700_000_000_000 + i)
                times.append((time.perf_counter() - t) / k * 1e6)
            store.close()
            print(f"Store.append {size:>6} B  {statistics.median(times):6.2f} µs")

        t = time.perf_counter()
        space = DiskSpace(root, 128 << 20)
        space.settle_at_open()
        print(f"128 MiB reserve allocated in {(time.perf_counter() - t) * 1000:.1f} ms "
              f"(full: {space.full})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
