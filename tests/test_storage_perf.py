"""Storage figures for the TDengine model (printed with ``-s``; bounds are loose sanity checks
so a slow CI machine does not fail them): child-table catalog load, rows-entry appends."""

from __future__ import annotations

import time
from pathlib import Path

from tmqgate.storage import ChildTable, Store

N_TABLES = 100_000


def test_child_table_catalog_of_100k_tables_loads_fast(tmp_path: Path) -> None:
    path = tmp_path / "d"
    with Store(path) as s:
        s.create_database("power", 8, kind="tsdb")
        s.create_stable("power", "meters", {"name": "meters"})
        t0, c0 = time.perf_counter(), time.process_time()
        n = s.create_child_tables(
            "power",
            (
                (f"d{i}", "meters", {"location": f"city{i % 100}", "groupid": i % 10}, i % 8)
                for i in range(N_TABLES)
            ),
        )
        create_s, create_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert n == N_TABLES
    t0, c0 = time.perf_counter(), time.process_time()
    with Store(path) as s:
        load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
        tables = s.child_tables("power")
        assert len(tables) == N_TABLES
        assert tables["d12345"] == ChildTable("d12345", "meters", {"location": "city45", "groupid": 5}, 1)
        t0 = time.perf_counter()
        hits = sum(1 for i in range(0, N_TABLES, 7) if f"d{i}" in tables)
        lookup_us = (time.perf_counter() - t0) / hits * 1e6
    print(
        f"\n{N_TABLES} child tables: create (one WriteBatch) {create_s:.2f} s wall / {create_cpu:.2f} s CPU, "
        f"open+load {load_s:.2f} s wall / {load_cpu:.2f} s CPU, lookup {lookup_us:.2f} us"
    )
    assert load_s < 20.0  # a sanity bound for loaded CI machines; typically well under 1 s


def test_append_rows_of_64k_payloads(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 256  # 64 KiB
    n = 1000
    with Store(tmp_path / "d") as s:
        s.create_database("power", 2, kind="tsdb")
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            s.append_rows("power", i % 2, payload, 500, i, i)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert s.next_version("power", 0) == 500 * n // 2
        got = s.read_entries("power", 1, 0, 1 << 30)
        assert len(got) == n // 2 and got[-1].data == payload
    rate = n / dt
    print(
        f"\nappend_rows 64 KiB, wal_level 1: {rate:,.0f} entries/s = {rate * 64 / 1024:,.0f} MiB/s wall; "
        f"{n / cpu:,.0f} entries/s per CPU second"
    )
    assert rate > 100
