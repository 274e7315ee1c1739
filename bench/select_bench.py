"""SELECT over stored rows (issue 29): scan and aggregate rates over 10 M rows.

One broker in this process (its store, catalog and executor; no client in the way): a
supertable `meters` of 1,000 child tables, 10 M rows a second apart per table written through
the rows write path in entries of 1,000 rows (as a Produce of line protocol makes them), then
each query run through `execute_async` as the HTTP front runs it, best of three. Rates are
rows of the table per second of the query (what a user waits for), and for the time-range
COUNT also the rows in the range per second.

    python -m bench.select_bench [--rows 10000000] [--out bench/]   (select_results.json, RESULTS.md)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
T0 = 1_704_067_200_000
TABLES = 1000
ENTRY_ROWS = 1000

QUERIES = {
    "count": "SELECT COUNT(*) FROM meters",
    "count_time_range": "SELECT COUNT(*) FROM meters WHERE ts >= {lo} AND ts < {hi}",
    "count_last_tenth": "SELECT COUNT(*) FROM meters WHERE ts >= {last}",
    "avg_tag_filter": "SELECT AVG(current) FROM meters WHERE groupid = 3",
    "interval_1m": "SELECT _wstart, AVG(current), MAX(voltage), COUNT(*) FROM meters INTERVAL(1m)",
    "interval_1m_by_table": "SELECT _wstart, tbname, AVG(current) FROM meters WHERE groupid = 3 "
                            "PARTITION BY tbname INTERVAL(1m)",
}


def _load(broker: Any, rows: int) -> tuple[int, int, int]:
    """Write `rows` rows; returns the time range [lo, hi) of a tenth of them (the fifth tenth)
    and where the last tenth starts."""
    from tmqgate.broker.tsdb.rows import build_rows_table

    ex = broker.executor
    ex.execute("CREATE DATABASE b29 VGROUPS 4; CREATE STABLE b29.meters (ts TIMESTAMP, current FLOAT, voltage INT, "
               "phase FLOAT) TAGS (location VARCHAR(64), groupid INT)")
    ex.execute("CREATE TABLE " + " ".join(f"b29.d{i} USING b29.meters TAGS ('loc{i % 7}', {i % 10})"
                                           for i in range(TABLES)))
    schema = broker.catalog.schema("b29", "meters")
    children = broker.store.child_tables("b29")
    rng = np.random.default_rng(1)
    per_table = rows // TABLES
    per_entry_tables = ENTRY_ROWS // 10  # an entry: 10 rows of each of 100 tables, as a batch
    names = np.array([f"d{i}" for i in range(TABLES)])
    by_vnode: dict[int, list[int]] = {}
    for i in range(TABLES):
        by_vnode.setdefault(children[f"d{i}"].vnode, []).append(i)
    for step in range(0, per_table, 10):
        for vnode, tables in by_vnode.items():
            for lo in range(0, len(tables), per_entry_tables):
                group = np.array(tables[lo:lo + per_entry_tables])
                n = len(group) * 10
                ts = np.repeat(T0 + (step + np.arange(10)) * 1000, len(group)).reshape(10, len(group)).T.ravel()
                table = build_rows_table(schema, pa.array(np.repeat(names[group], 10)), {
                    "ts": pa.array(ts, pa.int64()), "current": pa.array(rng.random(n, np.float32) * 20),
                    "voltage": pa.array(rng.integers(200, 240, n, dtype=np.int32)),
                    "phase": pa.array(rng.random(n, np.float32))})
                ex.append_rows_many("b29", vnode, [("meters", table)])
    span = per_table * 1000
    return T0 + span * 4 // 10, T0 + span * 5 // 10, T0 + span * 9 // 10


async def _time(broker: Any, sql: str) -> tuple[float, dict[str, Any]]:
    best, answer = float("inf"), {}
    for _ in range(3):
        start = time.perf_counter()
        answer = (await broker.executor.execute_async(sql, "b29")).to_json()
        best = min(best, time.perf_counter() - start)
    return best, answer


def run(rows: int) -> dict[str, Any]:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.broker.server import Broker

    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(Path(tmp) / "data")))
        start = time.perf_counter()
        lo, hi, last = _load(broker, rows)
        loaded = time.perf_counter() - start
        out: dict[str, Any] = {"rows": rows, "tables": TABLES, "load_s": round(loaded, 1), "queries": {}}
        for name, text in QUERIES.items():
            sql = text.format(lo=lo, hi=hi, last=last)
            seconds, answer = asyncio.run(_time(broker, sql))
            entry = {"sql": sql, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds),
                     "answer_rows": answer["rows"]}
            if name.startswith("count_") and name != "count":
                entry["matched"] = answer["data"][0][0]
                entry["matched_per_s"] = round(answer["data"][0][0] / seconds)
            out["queries"][name] = entry
            print(f"{name}: {seconds:.3f} s, {rows / seconds / 1e6:.1f} M rows/s", flush=True)
        broker.executor.close()
        broker.store.close()
    return out


SECTION = "## SQL SELECT over stored rows (tmqgate only)"
LABELS = {"count": "full-table COUNT(*)", "count_time_range": "COUNT(*), WHERE on a tenth of the time range",
          "count_last_tenth": "COUNT(*), WHERE ts ≥ the start of the last tenth",
          "avg_tag_filter": "AVG, WHERE on a tag (a tenth of the tables)", "interval_1m": "INTERVAL(1m) aggregates",
          "interval_1m_by_table": "tag filter, PARTITION BY tbname INTERVAL(1m)"}


def markdown(res: dict[str, Any]) -> str:
    """The RESULTS.md section (bench/run.py splices it in from select_results.json)."""
    md = [SECTION, "",
          f"`{res['command']}` — {res['started']}, {res['cpus']} CPUs. Written by `bench/select_bench.py`: "
          f"{res['rows']:,} rows of a supertable (ts, current FLOAT, voltage INT, phase FLOAT; tags location, "
          f"groupid) over {res['tables']:,} child tables on 4 vnodes, written in entries of {ENTRY_ROWS:,} rows "
          f"through the rows write path ({res['load_s']} s), then each query through `execute_async` as the HTTP "
          "front runs it (WAL read, pruning, decoding, DuckDB, the JSON-shaped answer), best of three. rows/s: "
          "the table's rows per second of the query; for the time-range COUNTs also the rows in the range per "
          "second, about what is decoded and scanned once pruning skipped the rest (the targets: ≥ 20 M for a "
          "COUNT with a time range, ≥ 5 M for INTERVAL aggregates).", "",
          "| query | seconds | table rows/s | answer rows |", "|---|---|---|---|"]
    for name, q in res["queries"].items():
        extra = f" ({q['matched']:,} rows in range: {q['matched_per_s'] / 1e6:.1f} M/s)" if "matched" in q else ""
        md.append(f"| {LABELS.get(name, name)}{extra} | {q['seconds']:.3f} | {q['rows_per_s'] / 1e6:.1f} M | "
                  f"{q['answer_rows']:,} |")
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=BENCH_DIR)
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    result = run(args.rows)
    result.update(command="python -m bench.select_bench " + " ".join(sys.argv[1:] if argv is None else argv),
                  started=started, cpus=os.cpu_count())
    (args.out / "select_results.json").write_text(json.dumps(result, indent=2) + "\n")
    from bench import security_bench

    security_bench.splice(args.out / "RESULTS.md", markdown(result), SECTION)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
