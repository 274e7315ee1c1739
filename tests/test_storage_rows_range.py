"""Store.rows_in_range (issue 29): a SELECT's read of a vnode — only rows entries, only those
whose header's [min ts, max ts] meets the asked range, below the asked version, in chunks of
about max_bytes, each payload as stored (the Arrow IPC bytes after storage's header)."""

from __future__ import annotations

from pathlib import Path

from tmqgate.storage import RowsEntry, Store


def test_rows_in_range_prunes_by_time_and_reads_in_chunks(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.create_database("db", 1, kind="tsdb")
        # entries over ts 0-9, 10-19, ..., 90-99, each of 5 rows; a meta entry among them
        bases = []
        for i in range(10):
            if i == 4:
                store.append_meta("db", 0, b'{"type":"create"}')
            bases.append(store.append_rows_many("db", 0, [RowsEntry(bytes([i]) * 100, 5, i * 10 + 9, i * 10)]))
        end = store.next_version("db", 0)

        def read(low: int | None, high: int | None, upto: int = end, max_bytes: int = 1 << 20) -> list[int]:
            version, out = 0, []
            while version < upto:
                entries, version = store.rows_in_range("db", 0, version, upto, low, high, max_bytes)
                out += [b for b, _ in entries]
                assert all(bytes(p) == bytes([bases.index(b)]) * 100 for b, p in entries)
            return out

        assert read(None, None) == bases
        assert read(25, 44) == bases[2:5]  # 20-29, 30-39, 40-49 meet 25..44
        assert read(100, None) == [] and read(None, -1) == []
        assert read(None, None, upto=bases[3]) == bases[:3]
        entries, nxt = store.rows_in_range("db", 0, 0, end, None, None, 250)  # chunks of ~250 bytes
        assert [b for b, _ in entries] == bases[:3] and nxt == bases[2] + 1
        assert read(None, None, max_bytes=1) == bases  # one entry a chunk
