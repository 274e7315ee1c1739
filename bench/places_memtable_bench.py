"""The payloads' places LevelDB's memtable size (storage/payloads.py, PLACES_WRITE_BUFFER): N
one-record batches appended to one vnode through `Store.append`, in a process of its own per
size; the process's CPU seconds (LevelDB's flush and compaction threads included) and peak RSS.
The places are 16-byte values, one per batch, so the memtable fills fastest with small batches.

    python -m bench.places_memtable_bench [--sizes-mib 64 8] [--appends 1500000]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def one(mib: int, appends: int) -> dict[str, float]:
    import tmqgate.storage.payloads as payloads
    from tmqgate.protocol.records import build_batch
    from tmqgate.storage import Store

    payloads.PLACES_WRITE_BUFFER = mib << 20
    data = tempfile.mkdtemp(prefix="places-memtable-")
    try:
        store = Store(data, write_buffer_size=max(64, mib) << 20)
        store.create_database("t", 1)
        batch = build_batch([(b"k", b"v" * 150, [], 1_700_000_000_000)])
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(appends):
            store.append("t", 0, batch, 1, 1_700_000_000_000)
        store.close()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return {"memtable_mib": mib, "appends": appends, "cpu_s": round(cpu, 2),
            "us_per_append": round(cpu / appends * 1e6, 2), "wall_s": round(wall, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 8])
    parser.add_argument("--appends", type=int, default=1_500_000)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child's size
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.appends)))
        return
    for mib in args.sizes_mib:  # a process each: peak RSS is the process's
        out = subprocess.run([sys.executable, "-m", "bench.places_memtable_bench", "--one", str(mib),
                              "--appends", str(args.appends)], capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
