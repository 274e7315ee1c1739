"""SIGKILL a writer mid-stream: every version it acknowledged must be readable after reopen."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from tmqgate.storage import Store

WRITER = textwrap.dedent(
    """
    import sys
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from tmqgate.storage import ProducerAppend, Store

    path, wal_level, period = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    s = Store(path, wal_level=wal_level, fsync_period_ms=period)
    if s.get_database("db") is None:
        s.create_database("db", 2)
    i = 0
    while True:
        n = 1 + i % 4
        b = DefaultRecordBatchBuilder(2, 0, 0, 9, 0, i * 4, 1 << 20)
        for j in range(n):
            b.append(j, timestamp=1000 + i, key=None, value=b"v%d" % i + b"x" * 200, headers=[])
        vnode = i % 2
        window = s.producer_window("db", vnode, 9)
        base = s.append("db", vnode, bytes(b.build()), n, 1000 + i,
                        producer=ProducerAppend(9, 0, i * 4, n, window)).base
        if i % 7 == 0:
            s.append_meta("db", vnode, b"meta%d" % i)
        sys.stdout.write(f"{vnode} {base} {n} {i}\\n")
        sys.stdout.flush()
        i += 1
    """
)


def writer_env() -> dict[str, str]:
    """The writer imports the tmqgate under test: the caller's PYTHONPATH (a worktree's) first."""
    paths = [os.environ.get("PYTHONPATH", ""), str(Path(__file__).resolve().parents[1])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@pytest.mark.parametrize("wal_level", [1, 2])
def test_acknowledged_appends_survive_sigkill(tmp_path: Path, wal_level: int) -> None:
    path = tmp_path / "data"
    env = writer_env()
    acked: list[tuple[int, int, int, int]] = []
    for _round in range(2):  # the second round appends after a crash recovery
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(wal_level), "0"],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]  # wait until it is running
        deadline = time.monotonic() + random.uniform(0.2, 0.8)
        while time.monotonic() < deadline or len(lines) < 20:
            lines.append(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()  # acknowledged before the kill landed
        proc.wait()
        lines += rest.splitlines(keepends=True)
        for line in lines:
            if line.endswith(b"\n"):
                vnode, base, n, i = map(int, line.split())
                acked.append((vnode, base, n, i))
    assert len(acked) >= 40
    with Store(path) as s:
        for vnode in (0, 1):
            mine = [a for a in acked if a[0] == vnode]
            last = max(mine, key=lambda a: a[1])
            assert s.next_version("db", vnode) >= last[1] + last[2]
        for vnode, base, n, i in acked:
            batches = s.read("db", vnode, base, 1)
            assert len(batches) == 1
            batch = DefaultRecordBatch(batches[0])
            assert batch.base_offset == base
            assert batch.validate_crc()
            records = list(batch)
            assert [r.offset for r in records] == list(range(base, base + n))
            assert records[0].value.startswith(b"v%dx" % i)
        window = s.producer_window("db", acked[-1][0], 9)
        assert window is not None and window.epoch == 0


TX_WRITER = textwrap.dedent(
    """
    import json, sys
    from tmqgate.storage import Store

    path = sys.argv[1]
    s = Store(path)
    if s.get_database("power") is None:
        s.create_database("power", 2, kind="tsdb")
        s.create_stable("power", "meters", {"name": "meters"})
    i = len(s.child_tables("power"))
    while True:
        name = f"t{i}"
        vnode = i % 2
        with s.transaction() as tx:
            tx.create_child_table("power", name, "meters", {"i": i}, vnode)
            v = tx.append_meta("power", vnode, json.dumps({"create": name}).encode())
            base = tx.append_rows("power", vnode, b"rows-%d" % i, 3, i, i)
        sys.stdout.write(f"{name} {vnode} {v} {base}\\n")
        sys.stdout.flush()
        i += 1
    """
)


def test_catalog_and_meta_entry_survive_sigkill_together(tmp_path: Path) -> None:
    """A child table is in the catalog exactly when its meta entry (and rows) is in the WAL."""
    path = tmp_path / "data"
    env = writer_env()
    acked: dict[str, tuple[int, int, int]] = {}
    for _round in range(2):
        proc = subprocess.Popen([sys.executable, "-c", TX_WRITER, str(path)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]
        deadline = time.monotonic() + random.uniform(0.2, 0.6)
        while time.monotonic() < deadline or len(lines) < 10:
            lines.append(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        lines += proc.stdout.read().splitlines(keepends=True)
        proc.wait()
        for line in lines:
            if line.endswith(b"\n"):
                name, vnode, v, base = line.decode().split()
                acked[name] = (int(vnode), int(v), int(base))
    assert len(acked) >= 20
    with Store(path) as s:
        tables = s.child_tables("power")
        logged: dict[str, tuple[int, int, int]] = {}
        for vnode in (0, 1):
            entries = s.read_entries("power", vnode, 0, 1 << 30)
            assert [e.kind for e in entries] == ["meta", "rows"] * (len(entries) // 2)
            for m, r in zip(entries[::2], entries[1::2], strict=True):
                name = json.loads(m.data)["create"]
                assert (r.version, r.count, r.data) == (m.version + 1, 3, b"rows-%d" % int(name[1:]))
                logged[name] = (vnode, m.version, r.version)
        assert set(tables) == set(logged)  # both or neither
        assert set(acked) <= set(logged)
        for name, where in acked.items():
            assert logged[name] == where
            assert tables[name].vnode == where[0] and tables[name].tags == {"i": int(name[1:])}
