"""`tmqgate serve` refuses bad start-up input with one line naming the problem and the fix,
exit status 2, and nothing created on disk (issue 13, point 2). Each test spawns the real CLI."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from compat_tests.helpers import canned_http


def _serve(tmp_path: Path, *args: str, config: str | None = None, data: str = "data",
           timeout: float = 60) -> tuple[int, str, Path]:
    """Run `tmqgate serve` with the arguments (a free port for each listener unless given);
    return its exit status, stderr, and the data dir it was given."""
    argv = [sys.executable, "-m", "tmqgate.broker.cli", "serve", "--data-dir", str(tmp_path / data)]
    if config is not None:
        path = tmp_path / "broker.toml"
        path.write_text(config)
        argv += ["--config", str(path)]
    if "--listen" not in args:
        argv += ["--listen", "127.0.0.1:0"]
    if "--http" not in args:
        argv += ["--http", "127.0.0.1:0"]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return done.returncode, done.stderr, tmp_path / data


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_port_in_use_kafka(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err, data = _serve(tmp_path, "--listen", f"127.0.0.1:{port}")
    assert rc == 2
    assert _one_line(err) == (f"tmqgate: cannot listen on 127.0.0.1:{port} (Kafka listener PLAINTEXT): Address "
                              "already in use: stop what uses it or choose another port with --listen "
                              "(listen / listeners)")
    assert not data.exists()


def test_port_in_use_http(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err, data = _serve(tmp_path, "--http", f"127.0.0.1:{port}")
    assert rc == 2
    assert _one_line(err) == (f"tmqgate: cannot listen on 127.0.0.1:{port} (HTTP SQL front): Address already "
                              "in use: stop what uses it or choose another port with --http (http)")
    assert not data.exists()


def test_data_dir_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    rc, err, data = _serve(tmp_path)
    assert rc == 2
    assert _one_line(err) == (f"tmqgate: the data directory {data} is a file, not a directory: give --data-dir "
                              "(data_dir) a directory, or move the file away")
    assert data.read_text() == "not a directory"


def test_second_broker_on_the_same_data_dir(tmp_path: Path) -> None:
    from tmqgate.storage import Store

    with Store(str(tmp_path / "data")):  # holds the LevelDB LOCK, as a running broker does
        rc, err, data = _serve(tmp_path)
    assert rc == 2
    assert _one_line(err) == (f"tmqgate: the data directory {data} is in use by another tmqgate (its LevelDB "
                              "LOCK is held): stop that broker, or give this one another --data-dir")


def test_bad_toml_names_the_file_and_line(tmp_path: Path) -> None:
    rc, err, data = _serve(tmp_path, config="wal_level = 1\nnum_partitions = \n")
    assert rc == 2
    assert _one_line(err) == \
        f"tmqgate: {tmp_path / 'broker.toml'}: not valid TOML: Invalid value (at line 2, column 18)"
    assert not data.exists()


def test_missing_config_file(tmp_path: Path) -> None:
    rc, err, data = _serve(tmp_path, "--config", str(tmp_path / "nope.toml"))
    assert rc == 2
    assert _one_line(err) == (f"tmqgate: config file {tmp_path / 'nope.toml'} not found: give --config an "
                              "existing TOML file")
    assert not data.exists()


def test_listen_without_port(tmp_path: Path) -> None:
    rc, err, data = _serve(tmp_path, "--listen", "localhost")
    assert rc == 2
    assert _one_line(err) == ("tmqgate: --listen: listen = 'localhost' is not HOST:PORT (e.g. 127.0.0.1:9092; "
                              "a port is required, 0 to pick a free one)")
    assert not data.exists()


@pytest.mark.parametrize(("text", "line"), [
    ("num_partitions = -3\n", "num_partitions = -3 is out of range: must be at least 1"),
    ("wal_level = 3\n", "wal_level = 3 is out of range: must be between 1 and 2"),
    ('num_partitions = "4"\n', "num_partitions must be an integer, not '4'"),
    ("auto_create_topics_enable = 1\n", "auto_create_topics_enable must be true or false, not 1"),
    ('super_users = "User:admin"\n', "super_users must be a list of strings, not 'User:admin'"),
    ("max_connections = 0\n", "max_connections = 0 is out of range: must be at least 1"),
    ("http_max_connections = 0\n", "http_max_connections = 0 is out of range: must be at least 1"),
    ("http_header_timeout_ms = 0\n", "http_header_timeout_ms = 0 is out of range: must be at least 1"),
    ("retention_check_interval_ms = -1\n", "retention_check_interval_ms = -1 is out of range: must be at least 1"),
    ("disk_usage_max_percent = 150\n", "disk_usage_max_percent = 150 is out of range: must be between 1 and 100"),
    ("colour = 1\nnum_partition = 3\n", "unknown settings colour, num_partition (num_partition: did you mean "
                                        "num_partitions? the settings are listed in docs/CONFIG.md)"),
    ("wal_levle = 2\n", "unknown setting wal_levle (did you mean wal_level? the settings are listed in "
                        "docs/CONFIG.md)"),
    ('ssl_certfile = "/nonexistent/server.pem"\n', "ssl_certfile = '/nonexistent/server.pem': no such file"),
])
def test_bad_settings_name_the_file_and_key(tmp_path: Path, text: str, line: str) -> None:
    rc, err, data = _serve(tmp_path, config=text)
    assert rc == 2
    assert _one_line(err) == f"tmqgate: {tmp_path / 'broker.toml'}: {line}"
    assert not data.exists()


def test_tls_listener_without_certificate(tmp_path: Path) -> None:
    rc, err, data = _serve(tmp_path, config='listeners = ["SSL://127.0.0.1:0"]\n')
    assert rc == 2
    assert _one_line(err) == ("tmqgate: TLS listener SSL (SSL or SASL_SSL) needs ssl_certfile and ssl_keyfile "
                              "(or its own listener_ssl_certfile and listener_ssl_keyfile)")
    assert not data.exists()


def test_bad_log_level_is_a_usage_error(tmp_path: Path) -> None:
    rc, err, data = _serve(tmp_path, "--log-level", "verbose")
    assert rc == 2
    assert _one_line(err) == ("tmqgate serve: error: argument --log-level: invalid choice: 'VERBOSE' "
                              "(choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL') "
                              "(see tmqgate serve --help)")
    assert not data.exists()


def test_nested_data_dir_removed_when_start_fails(tmp_path: Path) -> None:
    """Start-up that fails after the store was opened leaves no folder behind (here a listener
    that passes the pre-flight but cannot be advertised)."""
    rc, err, _ = _serve(tmp_path, config='listeners = ["PLAINTEXT://127.0.0.1:0"]\n'
                                         'advertised_listeners = ["NOPE"]\n', data="a/b/data")
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tmqgate: "), err
    assert not (tmp_path / "a").exists()


def test_help_lists_log_options() -> None:
    done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "serve", "--help"], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"})
    assert "--log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}" in done.stdout
    assert "--log-format {text,json}" in done.stdout


def test_sql_on_a_non_json_error_body(tmp_path: Path) -> None:
    """`tmqgate sql` against something that is not the SQL front (a proxy's error page):
    the status and the body on one line, exit 1, no traceback."""
    body = b"<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>\n"
    with canned_http(502, body, "text/html") as port:
        done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "sql", "SHOW DATABASES",
                               "--http", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert _one_line(done.stderr) == (f"tmqgate sql: http://127.0.0.1:{port}/rest/sql answered HTTP 502 Bad Gateway: "
                                      "<html><body> <h1>502 Bad Gateway</h1> </body></html>")


# --- issue 24, point 4: a new user's first minutes ------------------------------------------------

def test_version() -> None:
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"tmqgate {version('tmqgate')}\n", "")
    assert version("tmqgate") == "0.1.0"  # pyproject.toml's, as installed


def test_an_unknown_tmqgate_variable_is_refused_like_a_files_key(tmp_path: Path) -> None:
    """TMQGATE_WAL_LEVLE=2 (a typo) was ignored while wal_levle in the file was refused."""
    env = {**os.environ, "TMQGATE_WAL_LEVLE": "2"}
    argv = [sys.executable, "-m", "tmqgate.broker.cli", "serve", "--data-dir", str(tmp_path / "data"),
            "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2
    assert _one_line(done.stderr) == (
        "tmqgate: environment: unknown setting TMQGATE_WAL_LEVLE (did you mean TMQGATE_WAL_LEVEL? the settings are "
        "listed in docs/CONFIG.md, each as TMQGATE_ + its key upper-cased)")
    assert not (tmp_path / "data").exists()


def test_cluster_with_etcd_down_is_one_line_within_seconds(tmp_path: Path) -> None:
    """--cluster naming an etcd that is not there: refused within seconds of trying etcd (it
    waited ~29 s, then printed a Python list of tuples), every endpoint named with why, nothing
    left on disk. Run at DEBUG for the timestamps of the tries: every line before the error is
    DEBUG, so at the default level the error is the one line printed. The span is the broker's
    own (its first try to its last), not the test's wall clock: on a loaded machine the start-up
    before the first try took 17 s (r10)."""
    import re
    from datetime import datetime

    from tmqgate.broker.cluster.membership import START_WAIT_S

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    rc, err, data = _serve(tmp_path, "--cluster", f"etcd://127.0.0.1:{port},etcd.invalid:2379", "--log-level",
                           "DEBUG", data="a/data")
    assert rc == 2
    *logged, last = err.strip().splitlines()
    reason = _resolve_error("etcd.invalid")
    assert last == (f"tmqgate: cannot reach etcd at 127.0.0.1:{port}: connection refused; at "
                    f"etcd.invalid:2379: the name does not resolve ({reason}): start etcd there, or give "
                    "--cluster (cluster) the address of a running one")
    line = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ")
    parsed = [line.match(text) for text in logged]
    assert all(m is not None and m[2] == "DEBUG" for m in parsed), err
    tries = [datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f")  # type: ignore[index]
             for m, text in zip(parsed, logged, strict=True) if "Starting new HTTP connection" in text]
    assert any(f"127.0.0.1:{port}" in text for text in logged) and any("etcd.invalid:2379" in t for t in logged)
    # tries for START_WAIT_S, then one more round at most (the old client retried for ~29 s)
    assert (tries[-1] - tries[0]).total_seconds() < START_WAIT_S + 3, err
    assert not (tmp_path / "a").exists()


def _resolve_error(host: str) -> str:
    try:
        socket.getaddrinfo(host, 2379)
    except socket.gaierror as exc:
        return str(exc.strerror)
    raise AssertionError(f"{host} resolves here")


def test_ready_line_is_json_under_log_format_json(tmp_path: Path) -> None:
    """stdout's ready line, which tools wait for: text as before, one JSON object under
    --log-format json (its message the text line, so a reader looking for "tmqgate ready: kafka
    ..." in the line still finds it)."""
    import json
    import signal

    for fmt in ("text", "json"):
        argv = [sys.executable, "-m", "tmqgate.broker.cli", "serve", "--data-dir", str(tmp_path / fmt),
                "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", fmt]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        if fmt == "text":
            assert re.fullmatch(r"tmqgate ready: kafka PLAINTEXT://127\.0\.0\.1:\d+, http 127\.0\.0\.1:\d+\n",
                                line), line
            continue
        ready = json.loads(line)
        kafka = re.search(r"PLAINTEXT://127\.0\.0\.1:\d+", ready["message"]).group(0)  # type: ignore[union-attr]
        http = re.search(r"http (127\.0\.0\.1:\d+)", ready["message"]).group(1)  # type: ignore[union-attr]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ready.pop("time"))
        assert ready == {"level": "INFO", "logger": "tmqgate", "message": f"tmqgate ready: kafka {kafka}, http {http}",
                         "event": "ready", "kafka": [kafka], "http": http}
