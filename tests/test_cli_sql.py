"""`tmqgate sql` as a new user meets it (issue 24, point 4): a password it cannot ask for is one
line, not a traceback; `-` reads the statements from stdin; timestamps print as the taos shell
prints them; DDL and INSERT say what they did ("Create OK, 0 row(s) affected", "Insert OK, 3
row(s) affected") and row results "Query OK, N row(s) in set". The CLI runs as its own process
against a real `tmqgate serve`."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from compat_tests.helpers import canned_http

CLI = [sys.executable, "-m", "tmqgate.broker.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TMQGATE_PASSWORD"}
    return {**env, **extra}


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker's SQL front, HOST:PORT (its ready line says the port it was given)."""
    work = tmp_path_factory.mktemp("cli-sql")
    proc = subprocess.Popen([*CLI, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--data-dir",
                             str(work / "data")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=work)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r", http (127\.0\.0\.1:\d+)$", line.strip())
        assert match, line
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def _sql(http: str, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "sql", "--http", http, *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=_env(**env))


def test_a_user_without_a_password_or_a_terminal_is_one_line() -> None:
    """No TMQGATE_PASSWORD and no terminal to ask on (stdin /dev/null, no controlling terminal):
    was a 25-line EOFError traceback from getpass."""
    done = subprocess.run([*CLI, "sql", "--user", "admin", "SHOW DATABASES"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, env=_env(), start_new_session=True)
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "tmqgate sql: --user admin needs a password: set TMQGATE_PASSWORD, or run tmqgate sql in a terminal "
               "to be asked for it\n")


def test_statements_from_stdin(http: str) -> None:
    """`tmqgate sql -` sends what stdin holds (it sent the statement "-")."""
    done = _sql(http, "-", stdin="CREATE DATABASE from_stdin;\nSHOW DATABASES\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split(" | ")[0].strip() == "name" and lines[-1].startswith("Query OK, ")
    assert "from_stdin" in [row.split(" | ")[0].strip() for row in lines[2:-1]]
    empty = _sql(http, "-", stdin="  \n")
    assert (empty.returncode, empty.stdout, empty.stderr) == (2, "", "tmqgate sql: no statement on stdin\n")
    helped = subprocess.run([*CLI, "sql", "--help"], capture_output=True, text=True, timeout=60,
                            env=_env(COLUMNS="200"))
    assert "one or more statements separated by ';', or - to read them from stdin" in helped.stdout


def test_what_ddl_insert_and_queries_say(http: str) -> None:
    """As the taos shell: "<Verb> OK, N row(s) affected" without a table for statements without
    rows (N = rows inserted for INSERT, 0 for DDL), a table and "Query OK, N row(s) in set"
    for SHOW and DESCRIBE; several statements: the last one's answer (the REST answer)."""
    for text, line in (
            ("CREATE DATABASE okdb", "Create OK, 0 row(s) affected"),
            ("CREATE STABLE okdb.meters (ts TIMESTAMP, current FLOAT, voltage INT) TAGS (location BINARY(64), "
             "groupid INT)", "Create OK, 0 row(s) affected"),
            ("INSERT INTO okdb.d1 USING okdb.meters TAGS ('SF', 2) VALUES (now, 10.3, 219) (now+1s, 12.6, 218) "
             "(now+2s, 12.3, 221)", "Insert OK, 3 row(s) affected"),
            # two tables; a ';' inside quotes ends no statement
            ("INSERT INTO okdb.d2 USING okdb.meters TAGS ('a;b', 3) VALUES (now, 1.0, 1) okdb.d1 VALUES "
             "(now+3s, 1.5, 220)", "Insert OK, 2 row(s) affected"),
            ("ALTER STABLE okdb.meters ADD COLUMN phase FLOAT", "Query OK, 0 row(s) affected"),
            ("USE okdb; INSERT INTO d1 VALUES (now+4s, 2.0, 222, 0.5);", "Insert OK, 1 row(s) affected"),
            ("-- a comment; then\nINSERT INTO okdb.d1 VALUES (now+5s, 2.0, 222, 0.5); USE okdb",
             "Query OK, 0 row(s) affected"),
            ("DROP TABLE okdb.d2", "Drop OK, 0 row(s) affected")):
        done = _sql(http, text)
        assert (done.returncode, done.stdout, done.stderr) == (0, line + "\n", ""), text
    # the REST answer itself: TDengine's affected_rows, the rows inserted
    raw = json.loads(_sql(http, "--json",
                          "INSERT INTO okdb.d1 VALUES (now+6s, 1.0, 1, 0.1) (now+7s, 1.0, 1, 0.1)").stdout)
    assert (raw["column_meta"], raw["data"], raw["rows"]) == ([["affected_rows", "INT", 4]], [[2]], 1)
    shown = _sql(http, "SHOW okdb.STABLES")
    assert shown.stdout.splitlines() == ["stable_name | db_name | columns | tags",
                                         "------------+---------+---------+-----",
                                         "meters      | okdb    | 4       | 2   ",
                                         "Query OK, 1 row(s) in set"]
    described = _sql(http, "--db", "okdb", "DESCRIBE meters").stdout.splitlines()
    assert described[0] == "field    | type      | length | note"
    assert described[-1] == "Query OK, 6 row(s) in set" and len(described) == 2 + 6 + 1


def test_timestamps_print_in_local_time(http: str) -> None:
    """SHOW's TIMESTAMP columns (create_time) as the taos shell prints them, local time to the
    millisecond (they printed as epoch milliseconds, the REST answer's integers)."""
    assert _sql(http, "CREATE DATABASE when_made").returncode == 0
    raw = json.loads(_sql(http, "--json", "SHOW DATABASES").stdout)
    assert ["create_time", "TIMESTAMP", 8] in raw["column_meta"]
    made = next(row[1] for row in raw["data"] if row[0] == "when_made")
    assert isinstance(made, int)  # the REST answer keeps epoch milliseconds
    for tz, offset in (("UTC0", datetime.timedelta(0)), ("IST-5:30", datetime.timedelta(hours=5, minutes=30))):
        local = datetime.datetime.fromtimestamp(made / 1000, datetime.UTC).replace(tzinfo=None) + offset
        expected = local.strftime("%Y-%m-%d %H:%M:%S.") + f"{made % 1000:03d}"
        lines = _sql(http, "SHOW DATABASES", TZ=tz).stdout.splitlines()
        assert [c.strip() for c in lines[0].split(" | ")[:2]] == ["name", "create_time"]
        row = next(line for line in lines if line.startswith("when_made "))
        assert [c.strip() for c in row.split(" | ")[:3]] == ["when_made", expected, "2"], (tz, row)


def test_timestamps_as_taosadapter_gives_them() -> None:
    """taosAdapter answers TIMESTAMP values as RFC 3339 text: printed the same way, in local
    time (a NULL as NULL), from a server that answers as taosAdapter does."""
    answer = json.dumps({"code": 0, "column_meta": [["ts", "TIMESTAMP", 8], ["v", "INT", 4]],
                         "data": [["2022-06-29T05:50:55.401Z", 1], ["2022-06-29T13:50:55.040+08:00", 2],
                                  [None, 3]], "rows": 3}).encode()

    with canned_http(200, answer) as port:
        done = _sql(f"127.0.0.1:{port}", "SELECT ts, v FROM power.meters", TZ="IST-5:30")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["ts                      | v",
                                        "------------------------+--",
                                        "2022-06-29 11:20:55.401 | 1",
                                        "2022-06-29 11:20:55.040 | 2",
                                        "NULL                    | 3",
                                        "Query OK, 3 row(s) in set"]
