"""The HTTP front trusts nothing that arrives (issue 11, findings 6 and 8), over real HTTP to a
real `tmqgate serve`:

* every refusal is JSON `{"code": <non-zero>, "desc": ...}` with a 4xx/5xx status — a SQL
  body that is not UTF-8, `/log-history?db=` an unknown database, an unknown path, a wrong
  method — never aiohttp's text/HTML page;
* a browser's cross-origin request (an `Origin` that is not the server's own, or
  `Sec-Fetch-Site: cross-site`/`same-site`) is refused with 403 before anything runs: the
  `text/plain` POST of `DROP DATABASE` a web page could send leaves the database in place;
  same-origin requests and requests without `Origin` (curl, `tmqgate sql`) still work;
* DNS rebinding: a request whose `Host` is not a name the front is served as (a page on
  evil.example whose name now resolves to 127.0.0.1 sends `Host: evil.example:6041`, and its
  requests are same-origin) is answered 421 Misdirected Request before anything runs, `/health`
  included; the bound address and `localhost`/`127.0.0.1`/`[::1]` with the bound port, and the
  names of `http_allowed_hosts` (`["*"]`: any), are served; `tmqgate sql` still works.

Kafka has no HTTP front: tmqgate only.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from .tdengine_helpers import TdBroker, td_broker_fixture, unique

pytestmark = pytest.mark.tmqgate_only

SYNTAX_ERROR = 0x2600
DB_NOT_EXIST = 0x0388
UNSUPPORTED_URL = 0x1101
FORBIDDEN = 0x1105


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-http")


def _call(td: TdBroker, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
    """(status, content type, JSON body) of one request; the body must be JSON."""
    host, port = td.http.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        raw = resp.read()
        ctype = resp.getheader("Content-Type", "")
        try:
            answer = json.loads(raw)
        except ValueError:
            raise AssertionError(f"{method} {path}: HTTP {resp.status} {ctype} not JSON: {raw[:300]!r}") from None
        return resp.status, ctype, answer
    finally:
        conn.close()


def _with_host(td: TdBroker, host: str, method: str = "GET", path: str = "/health",
               body: bytes | None = None) -> tuple[int, str, Any]:
    """A request to the broker's HTTP port carrying ``Host: host`` (as a rebound name sends)."""
    return _call(td, method, path, body, {"Host": host})


def _assert_refusal(got: tuple[int, str, Any], status: int, code: int, fragment: str) -> None:
    st, ctype, answer = got
    assert st == status, got
    assert ctype.startswith("application/json"), got
    assert answer["code"] == code and answer["code"] != 0, got
    assert fragment in answer["desc"], got


def _databases(td: TdBroker) -> set[str]:
    return {d["name"] for d in td.rows("SHOW DATABASES")}


def test_non_utf8_sql_body_is_a_json_400(td: TdBroker) -> None:
    _assert_refusal(_call(td, "POST", "/rest/sql", b"SHOW DATABASES \xff\xfe"), 400, SYNTAX_ERROR, "not UTF-8")
    # ... and the endpoint still serves the next statement
    assert td.sql("SHOW DATABASES")["code"] == 0


def test_log_history_of_an_unknown_database_is_a_json_404(td: TdBroker) -> None:
    _assert_refusal(_call(td, "GET", "/log-history?db=nope"), 404, DB_NOT_EXIST, "Database not exist: nope")
    db = unique("hist")
    td.sql(f"CREATE DATABASE {db} VGROUPS 2")
    status, _, answer = _call(td, "GET", f"/log-history?db={db}")
    assert status == 200 and [v["vnode"] for v in answer["vnodes"]] == [0, 1], answer


def test_unknown_path_and_wrong_method_are_json(td: TdBroker) -> None:
    _assert_refusal(_call(td, "GET", "/no/such/path"), 404, UNSUPPORTED_URL, "/no/such/path")
    _assert_refusal(_call(td, "GET", "/rest/sql"), 405, UNSUPPORTED_URL, "GET /rest/sql")
    _assert_refusal(_call(td, "DELETE", "/health"), 405, UNSUPPORTED_URL, "DELETE /health")


def test_cross_origin_drop_database_is_refused(td: TdBroker) -> None:
    """What a web page on any site can make a browser send: a text/plain POST (no preflight)."""
    db = unique("victim")
    td.sql(f"CREATE DATABASE {db}")
    page = {"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://evil.example"}
    _assert_refusal(_call(td, "POST", "/rest/sql", f"DROP DATABASE {db}".encode(), page),
                    403, FORBIDDEN, "http://evil.example")
    assert db in _databases(td), "the cross-origin DROP DATABASE ran"
    # the other ways a browser says the page is not ours
    for headers in ({"Origin": "null"},  # sandboxed frames, file: pages
                    {"Origin": f"http://{td.http.replace('127.0.0.1', 'localhost')}"},  # other host
                    {"Origin": f"https://{td.http}"},  # other scheme
                    {"Sec-Fetch-Site": "cross-site"},
                    {"Sec-Fetch-Site": "same-site"}):
        _assert_refusal(_call(td, "POST", f"/rest/sql/{db}", f"DROP DATABASE {db}".encode(), headers),
                        403, FORBIDDEN, "cross-origin")
        assert db in _databases(td), headers
    # a page may not read either (GET is a simple request too)
    _assert_refusal(_call(td, "GET", "/health", headers={"Origin": "http://evil.example"}), 403, FORBIDDEN,
                    "cross-origin")


def test_same_origin_and_originless_requests_still_work(td: TdBroker) -> None:
    db = unique("own")
    own = {"Origin": f"http://{td.http}", "Sec-Fetch-Site": "same-origin", "Content-Type": "text/plain"}
    status, _, answer = _call(td, "POST", "/rest/sql", f"CREATE DATABASE {db}".encode(), own)
    assert (status, answer["code"]) == (200, 0), answer
    assert db in _databases(td)
    # no Origin at all, as curl, `tmqgate sql` and TDengine's REST connectors send
    status, _, answer = _call(td, "POST", "/rest/sql", f"DROP DATABASE {db}".encode(),
                              {"Content-Type": "application/json"})
    assert (status, answer["code"]) == (200, 0), answer
    assert db not in _databases(td)
    status, _, answer = _call(td, "GET", "/health", headers={"Sec-Fetch-Site": "none"})  # typed in the bar
    assert status == 200 and answer["status"] == "ok", answer


def test_dns_rebinding_host_is_misdirected(td: TdBroker) -> None:
    """A page on evil.example, its name rebound to 127.0.0.1: same-origin, but not our Host."""
    port = td.http.split(":")[1]
    db = unique("rebound")
    td.sql(f"CREATE DATABASE {db}")
    page = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}",
            "Content-Type": "text/plain;charset=UTF-8"}
    _assert_refusal(_call(td, "POST", "/rest/sql", f"DROP DATABASE {db}".encode(), page),
                    421, FORBIDDEN, "evil.example")
    assert db in _databases(td), "the rebound DROP DATABASE ran"
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}",
                 f"localhost.evil.example:{port}", "localhost:1", "localhost", f"[::2]:{port}", ""):
        _assert_refusal(_with_host(td, host), 421, FORBIDDEN, "misdirected request")
        _assert_refusal(_with_host(td, host, "POST", "/rest/sql", b"SHOW DATABASES"), 421, FORBIDDEN,
                        "misdirected request")
    # What the front is served as: its bound address and the loopback names, with its port.
    for host in (td.http, f"localhost:{port}", f"LOCALHOST:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        status, _, answer = _with_host(td, host)
        assert (status, answer["status"]) == (200, "ok"), (host, answer)
        status, _, answer = _with_host(td, host, "POST", "/rest/sql", b"SHOW DATABASES")
        assert (status, answer["code"]) == (200, 0), (host, answer)
    # The command-line client, as the README shows it.
    done = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "sql", "--http", td.http,
                           f"DROP DATABASE {db}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert db not in _databases(td)


def test_http_allowed_hosts(tmp_path_factory: pytest.TempPathFactory) -> None:
    config = {"http_allowed_hosts": ["tmq.example", "proxy.example:8080"]}
    for td in td_broker_fixture(tmp_path_factory, "td-hosts", config):
        port = td.http.split(":")[1]
        for host in ("tmq.example", f"tmq.example:{port}", "TMQ.example:443", "proxy.example:8080",
                     f"localhost:{port}"):
            status, _, answer = _with_host(td, host, "POST", "/rest/sql", b"SHOW DATABASES")
            assert (status, answer["code"]) == (200, 0), (host, answer)
        for host in ("proxy.example:8081", "proxy.example", f"evil.example:{port}"):
            _assert_refusal(_with_host(td, host), 421, FORBIDDEN, "misdirected request")
    for td in td_broker_fixture(tmp_path_factory, "td-any-host", {"http_allowed_hosts": ["*"]}):
        status, _, answer = _with_host(td, "evil.example:1234")
        assert (status, answer["status"]) == (200, "ok"), answer
