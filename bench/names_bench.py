"""Cost of the name rule (`broker/tsdb/names.py`) on the schemaless write path:
`python -m bench.names_bench [lines]`.

Parses line protocol (64 child tables named by a tag, 3 tags, 4 fields, two of them with keys
longer than 16 characters so the parser checks them), groups it and plans the supertable as
`sql/ingest.py` does for a produced batch, and prints lines per second, best of 5; then the
cost of one `name_problem` call. Nothing here asserts timings.
"""

from __future__ import annotations

import sys
import time

from tmqgate.broker.tsdb.line_protocol import parse_line_protocol
from tmqgate.broker.tsdb.names import name_problem
from tmqgate.broker.tsdb.schema_plan import group_rows, plan_schema


def _text(lines: int) -> str:
    out = []
    for i in range(lines):
        out.append(f"meters.power,device=dev{i % 64},site=site{i % 7},rack=r{i % 3} "
                   f"current_milliamperes={i % 1000}i32,voltage_millivolts_rms={220 + i % 10}i32,"
                   f"phase={i % 360}f32,note=\"n{i % 5}\" {1_700_000_000_000 + i}")
    return "\n".join(out)


def _best(fn: object, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    lines = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    text = _text(lines)

    def write_path() -> None:
        rows = parse_line_protocol(text, "ms", child_table_tag="device")
        for batch in group_rows(rows).values():
            plan_schema(None, batch)

    secs = _best(write_path)
    print(f"schemaless parse+group+plan: {lines} lines in {secs * 1000:.1f} ms = {lines / secs:,.0f} lines/s")
    n = 200_000
    names = ["current_milliamperes", "ünï😀", "a" * 192, "dev17"]
    for name in names:
        secs = _best(lambda name=name: [name_problem(name, "table") for _ in range(n)], 3)
        print(f"name_problem({name[:20]!r}{'...' if len(name) > 20 else ''}, 'table'): {secs / n * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
