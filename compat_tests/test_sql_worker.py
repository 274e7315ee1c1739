"""Long SQL texts are parsed in a process of the broker's own (issue 11: CPU-heavy work never
blocks the Kafka listener; bench/listener_stall.py measures the listener, bench/STALL.md has
the figures). tmqgate only: the SQL front is tmqgate's.

Seen from outside: a child process of `tmqgate serve` appears with the first long text and
parses every long text; killed (kill -9), it is replaced and the text it had is parsed again by
the new one (a text that kills it twice is answered 500 in JSON: tests/test_sql_worker.py); a
parse past sql_parse_timeout_ms is answered 503 with TDengine's "Operation timeout" code, its
process replaced; the Kafka listener serves throughout.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .brokers import TmqgateProcess
from .helpers import child_pids, wait_until
from .raw import RawConn

pytestmark = pytest.mark.tmqgate_only

TIMEOUT_ERROR = 0x012C  # TSDB_CODE_TIMEOUT_ERROR, "Operation timeout"


@pytest.fixture(scope="module")
def proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    p = TmqgateProcess(tmp_path_factory.mktemp("sqlworker"))
    p.start()
    try:
        yield p
    finally:
        p.stop()


def sql(p: TmqgateProcess, text: str) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{p.http_port}/rest/sql", data=text.encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def parser_pids(p: TmqgateProcess) -> list[int]:
    """The broker's parsing processes: its children started by multiprocessing's spawn."""
    assert p.proc is not None
    out = []
    for pid in child_pids(p.proc.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"spawn_main" in fh.read():
                    out.append(pid)
        except FileNotFoundError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(pid: int) -> None:
    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped
        except FileNotFoundError:
            return True

    wait_until(gone, 30, 0.05, f"process {pid} gone")


def long_insert(table: str, rows: int) -> str:
    values = " ".join(f"({1_700_000_000_000 + i}, {i})" for i in range(rows))
    return f"INSERT INTO lw.{table} USING lw.st TAGS (1) VALUES {values}"


def slow_select(kib: int) -> str:
    """A long select list: seconds of parsing (~10 ms a KiB)."""
    return "SELECT " + ",".join(f"c{i}" for i in range(kib * 128)) + " FROM lw.st"


def test_long_sql_is_parsed_in_a_child_process_which_is_replaced_when_killed(proc: TmqgateProcess) -> None:
    assert parser_pids(proc) == []  # started on the first long text, not before
    assert sql(proc, "CREATE DATABASE lw VGROUPS 2")[0] == 200
    assert sql(proc, "CREATE STABLE lw.st (ts TIMESTAMP, v INT) TAGS (t INT)")[0] == 200
    assert parser_pids(proc) == []  # short texts are parsed in place
    status, answer = sql(proc, long_insert("t1", 3000))
    assert (status, answer["data"]) == (200, [[3000]]), answer
    [first] = parser_pids(proc)
    assert first != proc.proc.pid  # type: ignore[union-attr]
    os.kill(first, signal.SIGKILL)
    wait_gone(first)
    with RawConn(proc.bootstrap) as conn:
        conn.api_versions()
    status, answer = sql(proc, long_insert("t2", 3000))
    assert (status, answer["data"]) == (200, [[3000]]), answer
    [second] = parser_pids(proc)
    assert second != first
    status, answer = sql(proc, "SHOW lw.TABLES")
    assert [row[0] for row in answer["data"]] == ["t1", "t2"], answer


def test_killed_mid_parse_the_text_is_parsed_again(proc: TmqgateProcess) -> None:
    """kill -9 of the parsing process while it parses a ~600 KB INSERT: a new process parses
    it again and every row is inserted once; the Kafka listener serves meanwhile."""
    sql(proc, "CREATE DATABASE IF NOT EXISTS lw VGROUPS 2")
    sql(proc, "CREATE STABLE IF NOT EXISTS lw.st (ts TIMESTAMP, v INT) TAGS (t INT)")
    sql(proc, long_insert("t3", 100))  # a parsing process is there
    [pid] = parser_pids(proc)
    answer: list[tuple[int, dict]] = []
    text = long_insert("t4", 25_000)
    poster = threading.Thread(target=lambda: answer.append(sql(proc, text)))
    start = cpu_seconds(pid)
    poster.start()
    deadline = time.monotonic() + 60
    while cpu_seconds(pid) - start < 0.3 and time.monotonic() < deadline:  # it is parsing
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    with RawConn(proc.bootstrap) as conn:
        conn.api_versions()
    poster.join(120)
    [(status, body)] = answer
    assert (status, body["data"]) == (200, [[25_000]]), body
    assert parser_pids(proc) not in ([], [pid])
    status, body = sql(proc, "SHOW lw.TABLES")
    assert "t4" in [row[0] for row in body["data"]], body


def test_parse_timeout_is_answered_503_and_the_process_replaced(tmp_path: Path) -> None:
    p = TmqgateProcess(tmp_path / "hasty", config={"sql_parse_timeout_ms": 300})
    p.start()
    try:
        sql(p, "CREATE DATABASE lw VGROUPS 1")
        sql(p, "CREATE STABLE lw.st (ts TIMESTAMP, v INT) TAGS (t INT)")
        status, body = sql(p, long_insert("t1", 100))
        assert (status, body["data"]) == (200, [[100]]), body
        [pid] = parser_pids(p)
        status, body = sql(p, slow_select(600))
        assert status == 503, body
        assert body == {"code": TIMEOUT_ERROR, "desc": "Operation timeout: parsing took over 300 ms; stopped "
                        "(sql_parse_timeout_ms); nothing was run"}
        wait_gone(pid)
        with RawConn(p.bootstrap) as conn:
            conn.api_versions()
        status, body = sql(p, long_insert("t2", 100))
        assert (status, body["data"]) == (200, [[100]]), body
        assert parser_pids(p) not in ([], [pid])
    finally:
        p.stop()
