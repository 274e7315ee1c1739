"""The HTTP front trusts nothing that arrives (issue 11, findings 6 and 8), over real HTTP to a
real `tmqgate serve`:

* every refusal is JSON `{"code": <non-zero>, "desc": ...}` with a 4xx/5xx status — a SQL
  body that is not UTF-8, `/log-history?db=` an unknown database, an unknown path, a wrong
  method — never aiohttp's text/HTML page;
* a browser's cross-origin request (an `Origin` that is not the server's own, or
  `Sec-Fetch-Site: cross-site`/`same-site`) is refused with 403 before anything runs: the
  `text/plain` POST of `DROP DATABASE` a web page could send leaves the database in place;
  same-origin requests and requests without `Origin` (curl, `tmqgate sql`) still work.

Kafka has no HTTP front: tmqgate only.
"""

from __future__ import annotations

import http.client
import json
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
