"""Query topics over rows entries of different sizes (issue 28): what a Fetch's evaluation
costs per entry when sources write few rows at a time.

One broker in this process (its store, catalog and executor; no client in the way): a
supertable `st (ts TIMESTAMP, v DOUBLE, k BIGINT)` with `ROWS` rows in one vnode, written as
rows entries of 1, 10, 100 and 1,000 rows (a line-protocol source sending a line, ten lines …
per Produce makes entries of that size), and a topic `SELECT ts, v FROM st WHERE k < 10` (k
uniform over 0..99: 10 %). The whole vnode is read as Fetch reads it (`View.read_async`,
1 MiB a read, on from where the last read stopped), best of three; the process's CPU seconds
over the read are the evaluation's (the loop and the views' threads).

    python -m bench.view_entries_bench [--rows 200000] [--out bench/]   (view_entries_results.json, RESULTS.md)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
SIZES = (1, 10, 100, 1000)
TS0 = 1_700_000_000_000
MAX_BYTES = 1 << 20


async def _one(data_dir: str, rows: int, per_entry: int) -> dict[str, Any]:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.server import Broker
    from tmqgate.broker.tsdb.rows import build_rows_table
    from tmqgate.protocol.records import iter_batches

    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=data_dir))
    await broker.start()
    try:
        ex = broker.executor
        ex.execute("CREATE DATABASE ve VGROUPS 1")
        ex.execute("CREATE STABLE ve.st (ts TIMESTAMP, v DOUBLE, k BIGINT) TAGS (g INT)")
        ex.execute("CREATE TABLE ve.c1 USING ve.st TAGS (1)")
        schema = broker.catalog.schema("ve", "st")
        rnd = random.Random(1)
        picked = 0
        for base in range(0, rows, per_entry):
            n = min(per_entry, rows - base)
            k = [rnd.randrange(100) for _ in range(n)]
            picked += sum(x < 10 for x in k)
            ts = list(range(TS0 + base, TS0 + base + n))
            ex.append_rows_many("ve", 0, [("st", build_rows_table(schema, ["c1"] * n, {
                "ts": ts, "v": [rnd.random() for _ in range(n)], "k": k}))])
        ex.execute("CREATE TOPIC ve_sel AS SELECT ts, v FROM ve.st WHERE k < 10")
        view = broker.topics.get("ve_sel").view
        end = broker.store.next_version("ve", 0)
        best: dict[str, Any] = {}
        for _ in range(3):
            start, cpu = time.perf_counter(), time.process_time()
            offset = delivered = 0
            while offset < end:
                heads = [h for b in await view.read_async(0, offset, MAX_BYTES, end) for h in iter_batches(b)]
                delivered += sum(h.record_count for h in heads)
                offset = heads[-1].base_offset + heads[-1].last_offset_delta + 1
            seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
            if delivered != picked:
                raise AssertionError(f"{delivered} rows delivered, {picked} expected")
            if not best or seconds < best["seconds"]:
                best = {"rows_per_entry": per_entry, "entries": -(-rows // per_entry), "seconds": round(seconds, 3),
                        "cpu_s": round(cpu_s, 3), "scanned_per_s": round(rows / seconds),
                        "delivered": delivered, "delivered_per_s": round(delivered / seconds),
                        "us_per_entry": round(seconds / -(-rows // per_entry) * 1e6, 1)}
        return best
    finally:
        await broker.stop()


def run(rows: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": rows, "sizes": []}
    for per_entry in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            got = asyncio.run(_one(str(Path(tmp) / "data"), rows, per_entry))
        out["sizes"].append(got)
        print(f"{per_entry} rows an entry: {got['seconds']:.3f} s, {got['scanned_per_s'] / 1e6:.2f} M rows/s scanned",
              flush=True)
    return out


SECTION = "## Query topics over small rows entries (tmqgate only)"


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section (bench/run.py splices it in from view_entries_results.json)."""
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['cpus']} CPUs, pyarrow {res['pyarrow']}. Written by "
          f"`bench/view_entries_bench.py`: {res['rows']:,} rows of `st (ts TIMESTAMP, v DOUBLE, k BIGINT)` in one "
          "vnode, written as rows entries of the size below, read whole through the topic "
          "`SELECT ts, v FROM st WHERE k < 10` (10 %) as Fetch reads it (`View.read_async`, 1 MiB a read), in "
          "this process with no client in the way, best of three. CPU s: the process's over the read (the "
          "loop and the views' threads).", "",
          "| rows an entry | entries | seconds | CPU s | µs an entry | scanned rows/s | delivered rows/s |",
          "|---|---|---|---|---|---|---|"]
    for s in res["sizes"]:
        md.append(f"| {s['rows_per_entry']:,} | {s['entries']:,} | {s['seconds']:.3f} | {s['cpu_s']:.3f} | "
                  f"{s['us_per_entry']:,} | {s['scanned_per_s']:,} | {s['delivered_per_s']:,} |")
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    result = run(args.rows)
    result.update(command="python -m bench.view_entries_bench " + " ".join(sys.argv[1:] if argv is None else argv),
                  started=started, cpus=os.cpu_count(), pyarrow=pa.__version__)
    (args.out / "view_entries_results.json").write_text(json.dumps(result, indent=2) + "\n")
    from bench import security_bench

    security_bench.splice(args.out / "RESULTS.md", markdown(result), SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
