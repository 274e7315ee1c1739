"""A full disk (issue 11, finding 5), on a real small filesystem the test mounts (a tmpfs,
unmounted after; skipped where mounting is not permitted).

A real `tmqgate serve` keeps its data directory there. Produce with acks=all until the disk is
full: the answer is KAFKA_STORAGE_ERROR (56) on the same connection, and every acknowledged
record stays readable at its offset. DeleteTopics of another topic succeeds on the full disk
and gives the space back (df), and produce works again. Killed (-9) and restarted on a disk a
file has filled, the broker starts, says it is read-only, serves reads and answers writes with
KAFKA_STORAGE_ERROR; once the file is gone it takes writes again.

tmqgate only: the reference Kafka would need its own log dir on the small filesystem.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest

from tmqgate.storage.space import RESERVE_FILE, RESERVE_TMP_FILE

from .brokers import TmqgateProcess
from .helpers import wait_until
from .raw import RawConn, fetched_values, one_record_batch
from .tdengine_helpers import METERS_DDL, TdBroker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from diskfull import fill, free_bytes, small_fs  # noqa: E402

pytestmark = pytest.mark.tmqgate_only

KAFKA_STORAGE_ERROR = 56
NO_ENOUGH_DISKSPACE = 0x012E  # TDengine's TSDB_CODE_NO_ENOUGH_DISKSPACE
VALUE = 20_000
CONFIG = {
    "disk_reserve_bytes": 4 << 20,
    "leveldb_write_buffer_bytes": 1 << 20,
    "disk_check_interval_ms": 200,
}


def value(topic: str, i: int) -> bytes:
    return f"{topic}-{i:06d}-".encode().ljust(VALUE, b"x")


def create_topics(conn: RawConn, *names: str) -> None:
    body = conn.request(19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": []} for n in names],
                                "timeout_ms": 10_000, "validate_only": False})
    assert [t["error_code"] for t in body["topics"]] == [0] * len(names), body


def room(fs: str) -> int:
    """Free bytes plus the broker's reserve file (released on a full disk, taken again once
    there is room — maybe between a DeleteTopics answer and our df; it is allocated as
    RESERVE_TMP_FILE first, then renamed)."""
    held = 0
    for name in (RESERVE_FILE, RESERVE_TMP_FILE):
        with contextlib.suppress(FileNotFoundError):
            held += (Path(fs) / "data" / name).stat().st_size
    return free_bytes(fs) + held


def listing(fs: str) -> str:
    """The small filesystem's files and sizes, for a failure's message."""
    return "\n".join(f"{p.stat().st_size:>10} {p.relative_to(fs)}"
                     for p in sorted(Path(fs).rglob("*")) if p.is_file())


def health(proc: TmqgateProcess) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.http_port}/health", timeout=10) as resp:
        return json.load(resp)


def read_all(conn: RawConn, topic: str) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    while True:
        got = fetched_values(conn.fetch(topic, 0, len(out)))
        if not got:
            return out
        out.extend(got)


def test_disk_full_produce_delete_restart(tmp_path: Path) -> None:
    with small_fs(48) as fs:
        proc = TmqgateProcess(tmp_path / "broker", config=CONFIG)
        proc.data_dir = Path(fs) / "data"  # the log stays off the small filesystem
        proc.start()
        td = TdBroker(proc)
        try:
            td.sql("CREATE DATABASE power VGROUPS 1")
            td.sql(METERS_DDL.format(db="power"))
            td.sql("INSERT INTO power.d1 USING power.meters TAGS ('SF', 1) VALUES (1000, 1.5, 220, 0.5)")
            with RawConn(proc.bootstrap) as conn:
                create_topics(conn, "other", "main")
                for i in range(300):  # ~6 MB to delete later
                    p = conn.produce("other", 0, one_record_batch(value("other", i)))
                    assert (p["error_code"], p["base_offset"]) == (0, i)
                acked: list[tuple[int, bytes]] = []
                while True:
                    v = value("main", len(acked))
                    p = conn.produce("main", 0, one_record_batch(v))
                    if p["error_code"] != 0:
                        break
                    assert p["base_offset"] == len(acked)
                    acked.append((p["base_offset"], v))
                    assert len(acked) < 5000, "the disk never filled"
                # The producer sees KAFKA_STORAGE_ERROR on a live connection, not a timeout.
                assert p["error_code"] == KAFKA_STORAGE_ERROR and len(acked) > 100
                assert conn.produce("main", 0, one_record_batch(b"again"))["error_code"] == KAFKA_STORAGE_ERROR
                assert read_all(conn, "main") == acked
                assert "read-only" in proc.log_tail(200)

                before = room(fs)
                body = conn.request(20, 6, {"topics": [{"name": "other", "topic_id": bytes(16)}],
                                            "timeout_ms": 10_000})
                assert [r["error_code"] for r in body["responses"]] == [0]
                # "other" held ~6 MB. The broker re-takes its reserve meanwhile (a file made,
                # then allocated, then renamed): a df between two of those steps misses it.
                wait_until(lambda: room(fs) > before + 4_000_000, 5, 0.1,
                           lambda: f"DeleteTopics to give back ~6 MB (before: {before}, now: "
                                   f"{room(fs)}):\n{listing(fs)}")

                def writable() -> bool:
                    return conn.produce("main", 0, one_record_batch(b"after-delete"))["error_code"] == 0

                wait_until(writable, 15, 0.2, "produce to work again after DeleteTopics")
                acked.append((len(acked), b"after-delete"))
                assert read_all(conn, "main") == acked

            # kill -9, fill the disk, restart: read-only, reads served, writes refused.
            proc.kill()
            filler = fill(fs)
            proc.start()
            # the ready line says so; it comes after the Kafka listener answers (start() returns then)
            since_restart = wait_until(lambda: proc.log_tail(200).rpartition("=== start")[2], 15, 0.1,
                                       "the restarted broker's ready line", ok=lambda log: "tmqgate ready" in log)
            assert "READ-ONLY" in since_restart
            assert health(proc)["storage"]["read_only"]  # why writes are refused: an operator's probe sees it
            with RawConn(proc.bootstrap) as conn:
                assert read_all(conn, "main") == acked
                p = conn.produce("main", 0, one_record_batch(b"refused"))
                assert p["error_code"] == KAFKA_STORAGE_ERROR
                assert read_all(conn, "main") == acked
                # SQL: an INSERT gets TDengine's disk-space error as JSON.
                status, answer = td.post("INSERT INTO power.d1 VALUES (2000, 2.5, 221, 0.5)")
                assert (status, answer["code"]) == (503, NO_ENOUGH_DISKSPACE), answer
                os.unlink(filler)

                def back() -> bool:
                    p = conn.produce("main", 0, one_record_batch(b"room again"))
                    if p["error_code"] == 0:
                        assert p["base_offset"] == len(acked)
                        return True
                    assert p["error_code"] == KAFKA_STORAGE_ERROR
                    return False

                wait_until(back, 15, 0.2, "produce to work once the disk has room")
                assert read_all(conn, "main") == [*acked, (len(acked), b"room again")]
                assert td.sql("INSERT INTO power.d1 VALUES (2000, 2.5, 221, 0.5)")["code"] == 0
                assert health(proc)["storage"] == {"read_only": None, "disk_guard_shortfall": None}
        finally:
            proc.stop()
