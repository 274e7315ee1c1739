"""The SQL front's authentication (issue 12, point 5), over real HTTP to a real `tmqgate serve`:
HTTP Basic against the broker's users as TDengine's taosAdapter takes it — missing, malformed
or wrong credentials are answered 401 with `WWW-Authenticate: Basic` and the JSON error body,
`/health` stays open, `tmqgate sql --user` authenticates; the broker refuses to put an
unauthenticated SQL front on a non-loopback address unless told to. The first user is made
offline with `tmqgate user add`, and the same user authenticates over SASL/SCRAM.

Kafka has no HTTP front: tmqgate only.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .brokers import TmqgateProcess, _tmqgate_cmd, add_user_offline
from .helpers import free_port, unique_topic
from .raw import RawConn

pytestmark = pytest.mark.tmqgate_only

NO_AUTH_INFO = 0x1105
AUTH_FAILURE = 0x0357


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _tmqgate(*args: str, stdin: str = "", env: dict[str, str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_tmqgate_cmd(), *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TmqgateProcess]:
    workdir = tmp_path_factory.mktemp("http-auth")
    proc = TmqgateProcess(workdir, config={"http_auth": "basic", "sasl_enabled_mechanisms": ["SCRAM-SHA-512"]},
                          extra_listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"})
    # the first user, offline, before the broker ever ran (in the directory it will use)
    add_user_offline(proc, "alice", "alice-secret", iterations=8192)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _call(proc: TmqgateProcess, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", proc.http_port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("headers,code", [
    ({}, NO_AUTH_INFO),
    ({"Authorization": "Bearer abc"}, NO_AUTH_INFO),
    ({"Authorization": "Basic !!!not-base64"}, NO_AUTH_INFO),
    (_basic("alice", "wrong"), AUTH_FAILURE),
    (_basic("mallory", "alice-secret"), AUTH_FAILURE),
])
def test_missing_or_wrong_credentials_get_401(secured: TmqgateProcess, headers: dict[str, str], code: int) -> None:
    db = unique_topic("noauth").replace("-", "_")
    status, hdrs, body = _call(secured, "POST", "/rest/sql", f"CREATE DATABASE {db}".encode(), headers)
    assert status == 401
    assert hdrs.get("WWW-Authenticate", "").startswith("Basic realm=")
    assert body["code"] == code and body["desc"]
    # nothing ran: with the right credentials the database is not there
    status, _, body = _call(secured, "POST", "/rest/sql", b"SHOW DATABASES", _basic("alice", "alice-secret"))
    assert status == 200 and db not in [row[0] for row in body["data"]]


def test_right_credentials_run_sql_and_health_is_open(secured: TmqgateProcess) -> None:
    db = unique_topic("auth").replace("-", "_")
    auth = _basic("alice", "alice-secret")
    status, _, body = _call(secured, "POST", "/rest/sql", f"CREATE DATABASE {db}".encode(), auth)
    assert (status, body["code"]) == (200, 0)
    status, _, body = _call(secured, "POST", "/rest/sql", b"SHOW DATABASES", auth)
    assert status == 200 and db in [row[0] for row in body["data"]]
    status, _, body = _call(secured, "GET", "/health")
    assert status == 200 and body["status"] == "ok"
    status, _, _ = _call(secured, "GET", "/log-history")
    assert status == 401


def test_tmqgate_sql_with_a_user(secured: TmqgateProcess) -> None:
    http_addr = f"127.0.0.1:{secured.http_port}"
    ok = _tmqgate("sql", "--http", http_addr, "--user", "alice", "--json", "SHOW DATABASES",
                  env={"TMQGATE_PASSWORD": "alice-secret"})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["code"] == 0
    bad = _tmqgate("sql", "--http", http_addr, "--user", "alice", "SHOW DATABASES",
                   env={"TMQGATE_PASSWORD": "nope"})
    assert bad.returncode == 1 and f"error {AUTH_FAILURE}: Authentication failure" in bad.stderr
    anonymous = _tmqgate("sql", "--http", http_addr, "SHOW DATABASES")
    assert anonymous.returncode == 1 and f"error {NO_AUTH_INFO}:" in anonymous.stderr


def test_offline_user_authenticates_over_sasl(secured: TmqgateProcess) -> None:
    """`tmqgate user add` (made before the broker started) is a SASL/SCRAM user too."""
    from kafka.net.sasl.scram import ScramClient

    with RawConn(f"127.0.0.1:{secured.listener_ports['SASL_PLAINTEXT']}") as c:
        assert c.request(17, 1, {"mechanism": "SCRAM-SHA-512"})["error_code"] == 0
        client = ScramClient("alice", "alice-secret", "SCRAM-SHA-512")
        first = c.request(36, 2, {"auth_bytes": client.first_message()})
        client.process_server_first_message(first["auth_bytes"])
        assert b"i=8192" in first["auth_bytes"]
        final = c.request(36, 2, {"auth_bytes": client.final_message()})
        assert final["error_code"] == 0
        client.process_server_final_message(final["auth_bytes"])


def test_user_add_refused_while_the_broker_runs(secured: TmqgateProcess) -> None:
    out = _tmqgate("user", "add", "bob", "--data-dir", str(secured.data_dir), stdin="bob-secret\n")
    assert out.returncode == 1
    assert "is in use (a running broker holds its lock)" in out.stderr


def _serve(tmp_path: Path, http: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*_tmqgate_cmd(), "serve", "--listen", f"127.0.0.1:{free_port()}", "--http", http,
                             "--data-dir", str(tmp_path / "data"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _ready_or_exit(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
    """(exit code or None if it came up, what it printed up to then)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("tmqgate ready"):
            proc.terminate()
            proc.wait(30)
            return None, "".join(lines)
    return proc.wait(30), "".join(lines)


def test_refuses_an_open_sql_front_on_a_public_address(tmp_path: Path) -> None:
    rc, out = _ready_or_exit(_serve(tmp_path, f"0.0.0.0:{free_port()}"))
    assert rc == 2, out
    assert "with no authentication" in out and "allow_insecure_http" in out
    config = tmp_path / "insecure.toml"
    config.write_text("allow_insecure_http = true\n")
    rc, out = _ready_or_exit(_serve(tmp_path, f"0.0.0.0:{free_port()}", "--config", str(config)))
    assert rc is None, out
    rc, out = _ready_or_exit(_serve(tmp_path, f"0.0.0.0:{free_port()}", "--http-auth", "basic"))
    assert rc is None, out
