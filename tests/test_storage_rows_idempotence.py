"""An idempotent producer's batch written as rows (a database topic's Produce): its window is
stored in the same WriteBatch as the rows entries, and records the versions the rows took.
Real LevelDB stores; a SIGKILLed writer for the both-or-neither property."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.test_storage_crash import writer_env
from tmqgate.protocol.errors import ErrorCode
from tmqgate.storage import ProducerAppend, RowsEntry, StorageError, Store
from tmqgate.storage.producers import BatchMeta, ProducerWindow, check_sequence


def _rows(n: int, ts: int = 1_700_000_000_000) -> RowsEntry:
    return RowsEntry(b"arrow-ipc" * n, n, ts + n, ts)


def test_rows_entries_and_the_window_take_the_rows_versions(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    with Store(path) as s:
        s.create_database("power", 2, kind="tsdb")
        s.append_meta("power", 1, b"create table")  # version 0: rows start at 1
        # a batch of 4 records (sequences 0..3) that became two supertables' rows: 3 + 5 rows
        p = ProducerAppend(77, 2, 0, 4, s.producer_window("power", 1, 77))
        base = s.append_rows_many("power", 1, [_rows(3), _rows(5)], producer=p)
        assert base == 1
        assert s.next_version("power", 1) == 9
        assert [(e.version, e.kind, e.count) for e in s.read_entries("power", 1, 0, 1 << 20)] == [
            (0, "meta", 1), (1, "rows", 3), (4, "rows", 5)]
        want = ProducerWindow(2, (BatchMeta(0, 3, 1, 8),))
        assert s.producer_window("power", 1, 77) == want
        assert s.producer_window("power", 0, 77) is None
        # the next batch (sequences 4..5, 2 rows) extends the window
        p = ProducerAppend(77, 2, 4, 2, s.producer_window("power", 1, 77))
        assert s.append_rows_many("power", 1, [_rows(2)], producer=p) == 9
    with Store(path) as s:  # durable: read back from LevelDB, not the cache
        window = s.producer_window("power", 1, 77)
        assert window == ProducerWindow(2, (BatchMeta(0, 3, 1, 8), BatchMeta(4, 5, 9, 10)))
        # a retry of either batch is answered with the version its rows took first
        assert check_sequence(window, 2, 0, 4) == (ErrorCode.NONE, 1)
        assert check_sequence(window, 2, 4, 2) == (ErrorCode.NONE, 9)
        assert check_sequence(window, 2, 7, 1).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert check_sequence(window, 1, 6, 1).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_producer_batch_without_entries_writes_nothing(tmp_path: Path) -> None:
    with Store(str(tmp_path / "data")) as s:
        s.create_database("power", 1, kind="tsdb")
        tx = s.wal.transaction(sync=False)
        tx.producer_batch("power", 0, ProducerAppend(5, 0, 0, 1, None))
        with pytest.raises(StorageError):
            tx.commit()
        with pytest.raises(ValueError):
            s.append_rows_many("power", 0, [], producer=ProducerAppend(5, 0, 0, 1, None))
        assert s.producer_window("power", 0, 5) is None
        assert s.next_version("power", 0) == 0


def test_window_survives_with_the_rows_or_not_at_all_on_a_full_disk(tmp_path: Path) -> None:
    from tests.diskfull import small_fs

    with small_fs(8) as where, Store(os.path.join(where, "data")) as s:
        s.create_database("power", 1, kind="tsdb")
        p = ProducerAppend(5, 0, 0, 1, None)
        assert s.append_rows_many("power", 0, [_rows(1)], producer=p) == 0
        big = RowsEntry(os.urandom(4 << 20), 1, 2, 1)
        failed = 0
        for i in range(1, 10):
            p = ProducerAppend(5, 0, i, 1, s.producer_window("power", 0, 5))
            try:
                s.append_rows_many("power", 0, [big], producer=p)
            except StorageError:
                failed = i
                break
        assert failed, "the disk never filled"
        # the refused batch left neither rows nor window: the window's last batch is the
        # last one written, and its rows end where the vnode ends
        window = s.producer_window("power", 0, 5)
        assert window is not None
        assert window.batches[-1].first_seq == failed - 1
        assert window.batches[-1].last_offset == s.next_version("power", 0) - 1


WRITER = textwrap.dedent(
    """
    import sys
    from tmqgate.storage import ProducerAppend, RowsEntry, Store

    s = Store(sys.argv[1], wal_level=1, fsync_period_ms=0)
    if s.get_database("power") is None:
        s.create_database("power", 2, kind="tsdb")
    i = 0
    while True:
        vnode = i % 2
        window = s.producer_window("power", vnode, 9)
        seq = 0 if window is None else window.batches[-1].last_seq + 1
        records = 1 + i % 3
        entries = [RowsEntry(b"r" * 300 * (1 + j), 1 + j, 1000 + i, 1000) for j in range(1 + i % 2)]
        base = s.append_rows_many("power", vnode, entries, producer=ProducerAppend(9, 0, seq, records, window))
        sys.stdout.write(f"{vnode} {base} {seq} {records}\\n")
        sys.stdout.flush()
        i += 1
    """
)


def test_sigkill_never_separates_the_rows_from_the_window(tmp_path: Path) -> None:
    path = tmp_path / "data"
    acked: dict[int, tuple[int, int, int]] = {}
    for _round in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                                env=writer_env())
        assert proc.stdout is not None
        lines = [proc.stdout.readline()]
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline or len(lines) < 20:
            lines.append(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        lines += proc.stdout.read().splitlines(keepends=True)
        proc.wait()
        for line in lines:
            if line.endswith(b"\n"):
                vnode, base, seq, records = map(int, line.split())
                acked[vnode] = (base, seq, records)
        with Store(path) as s:
            for vnode in (0, 1):
                window = s.producer_window("power", vnode, 9)
                assert window is not None
                last = window.batches[-1]
                # the window's last batch is the vnode's last rows: written together
                assert last.last_offset == s.next_version("power", vnode) - 1
                entries = s.read_entries("power", vnode, last.base_offset, 1 << 30)
                assert entries[0].version == last.base_offset
                # every acknowledged batch is there, answered with its first base on a retry
                base, seq, records = acked[vnode]
                assert check_sequence(window, 0, seq, records) == (ErrorCode.NONE, base)
