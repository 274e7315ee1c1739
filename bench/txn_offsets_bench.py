"""What transactional offsets cost in the group coordinator (issue 14, part T3), in process on
a real LevelDB store (no network; the wire adds the same decode/encode as OffsetCommit):

1. TxnOffsetCommit of P partitions vs a plain OffsetCommit of the same P (one WriteBatch each);
2. complete_transaction (commit) of those P partitions (one WriteBatch: delete + put);
3. OffsetFetch of P partitions with require_stable, with 0 and with 100 open transactions of
   other producers pending in the group (the per-partition check is in memory);
4. a plain OffsetCommit while 100 transactions are pending on the same partitions (it marks
   them superseded in its WriteBatch).

    PYTHONPATH=... python -m bench.txn_offsets_bench [--calls 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tmqgate.coordinator.coordinator import GroupCoordinator  # noqa: E402
from tmqgate.storage import Store  # noqa: E402

PARTITIONS = 16


class Topics:
    def lookup(self, name: str) -> tuple[bytes, int] | None:
        return (b"t" * 16, PARTITIONS) if name == "t" else None

    def name_of(self, topic_id: bytes) -> str | None:
        return "t"

    def names(self) -> list[str]:
        return ["t"]


def per_call_us(fn: Callable[[int], object], calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - start) / calls * 1e6


def run(calls: int) -> list[tuple[str, float]]:
    out = []
    with tempfile.TemporaryDirectory() as d, Store(str(Path(d) / "data")) as store:
        c = GroupCoordinator(store, Topics(), now_ms=0)
        wanted = [("t", list(range(PARTITIONS)))]
        entries = [("t", i, 100, -1, None) for i in range(PARTITIONS)]
        c.offsets.commit_offsets(0, "fetch", "", None, -1, 8, entries)
        out.append((f"OffsetFetch require_stable, {PARTITIONS} partitions, 0 open transactions",
                    per_call_us(lambda i: c.offsets.fetch_offsets("fetch", wanted, require_stable=True), calls)))
        out.append((f"OffsetFetch plain, {PARTITIONS} partitions, 0 open transactions",
                    per_call_us(lambda i: c.offsets.fetch_offsets("fetch", wanted), calls)))
        for pid in range(100):
            c.offsets.txn_offset_commit(0, "fetch", "x", pid, 0, "", -1, None, [("t", pid % PARTITIONS, 5, -1, None)])
        out.append((f"OffsetFetch require_stable, {PARTITIONS} partitions, 100 open transactions",
                    per_call_us(lambda i: c.offsets.fetch_offsets("fetch", wanted, require_stable=True), calls)))
        out.append((f"plain OffsetCommit, {PARTITIONS} partitions, 100 open transactions on them",
                    per_call_us(lambda i: c.offsets.commit_offsets(0, "fetch", "", None, -1, 8, entries), calls)))
        for p in (1, PARTITIONS):
            entries = [("t", i, 100, -1, None) for i in range(p)]
            out.append((f"plain OffsetCommit, {p} partition(s)",
                        per_call_us(lambda i, e=entries: c.offsets.commit_offsets(0, "plain", "", None, -1, 8, e),
                                    calls)))
            out.append((f"TxnOffsetCommit, {p} partition(s)",
                        per_call_us(lambda i, e=entries: c.offsets.txn_offset_commit(0, "txn", "x", 10_000 + i, 0, "",
                                                                                     -1, None, e), calls)))
            out.append((f"complete_transaction (commit), {p} partition(s)",
                        per_call_us(lambda i: c.offsets.complete_transaction("txn", 10_000 + i, 0, True), calls)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    for name, us in run(args.calls):
        print(f"{name:<75} {us:9.1f} µs/call")


if __name__ == "__main__":
    main()
