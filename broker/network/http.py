"""The HTTP front (README.md, docs/TDENGINE.md): `POST /rest/sql[/db]` in the shape of TDengine's
REST API, `GET /log-history` (each vnode's WAL ranges, collected ones included), and `GET /health`.

Every refusal is JSON `{"code": <non-zero>, "desc": "..."}` with a 4xx/5xx status, as
TDengine's REST API answers: the `_guard` middleware turns aiohttp's own answers (unknown
path, wrong method, body too large) and any unexpected exception into that shape.

A web page must not drive the SQL front (binding to loopback does not stop a page in a
browser on the same host from POSTing `text/plain` SQL, a "simple" request that needs no
CORS preflight): a request whose `Origin` header is not this server's own origin
(scheme://host:port the request came to), or whose `Sec-Fetch-Site` says `cross-site` or
`same-site`, is refused with 403 before any handler runs. Clients that send no `Origin`
(curl, `tmqgate sql`, TDengine's REST connectors) are unaffected.

DNS rebinding: a page on evil.example whose name is made to resolve to 127.0.0.1 sends
*same-origin* requests (its Origin is http://evil.example:6041, and so is its Host), so the
Origin check cannot see it; the Host header can. A request is served only when its Host is a
name this front is served as: the address the connection came to (the bound address, or the
interface's address when bound to 0.0.0.0/::), `localhost`, `127.0.0.1` or `[::1]`, each
with the bound port; the configured `http` host:port; or an entry of `http_allowed_hosts`
(`name` = any port, `name:port`, `*` = any Host — for a front behind a proxy or port map).
Anything else is answered 421 Misdirected Request (RFC 9110 §15.5.20: the request reached a
server that does not serve that authority) rather than 403: nothing is wrong with the caller's
rights, the name is — and a real client that sees 421 knows to use the server's own name.
A request with no Host at all (HTTP/1.0) is served: browsers always send one.

Authentication (`http_auth = "basic"`): every path but `/health` takes HTTP Basic credentials
of the broker's users, as TDengine's taosAdapter does (`Authorization: Basic base64(user:pass)`,
checked like SASL/PLAIN against the SCRAM credentials); a missing, malformed or wrong one is
answered 401 with `WWW-Authenticate: Basic` and the JSON error body. An authenticated
request carries its principal as `request[PRINCIPAL]` ("User:alice").
`GET /metrics` (broker/ops/metrics.py) is open like `/health` unless `metrics_auth = true`.

Authorization: each path needs what `PATH_NEEDS` says, in Kafka's ACL terms (checked with the
broker's authorizer when one is on, for the request's principal — `User:ANONYMOUS` on a path
served without credentials): `/rest/sql` runs each statement under broker/sql/access.py's
table, and the listings show only what the caller may DESCRIBE (`Visibility`), as Metadata
and ListGroups hide the rest.

Wrong credentials are answered only after `connection_failed_authentication_delay_ms` (the
delay Kafka puts on a failed SASL authentication): one connection guesses at most 1/delay a
second (aiohttp answers a connection's requests one at a time).

Connections (`FrontLimits`, issue 25): at most `http_max_connections` open at once — the
front's share of the process's file descriptors, so idle connects to it cannot take those
Kafka clients need; a connection over it is closed as soon as it is accepted. A request line
and headers must arrive within `http_header_timeout_ms` of the connection's start (or of the
request's first byte on a kept-alive connection): slow-loris connections are closed; a
kept-alive connection idle `http_idle_timeout_ms` after its last answer is closed (aiohttp's
keepalive_timeout). Each closing is logged through the broker's rate-limited log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from yarl import URL

from tmqgate.broker.apis import run_synced
from tmqgate.broker.identity.client import ANONYMOUS
from tmqgate.broker.ops.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from tmqgate.broker.ops.metrics_merge import SIBLING_TIMEOUT_S as METRICS_SIBLING_TIMEOUT_S
from tmqgate.broker.ops.metrics_merge import merge as merge_metrics
from tmqgate.broker.tdengine import (
    FORWARDED,
    PERMISSION_DENIED,
    Caller,
    ParseTimeout,
    ParseWorkerDied,
    SqlError,
    Visibility,
)
from tmqgate.storage import StorageIOError

if TYPE_CHECKING:
    from tmqgate.broker.apis import ClusterSync
    from tmqgate.broker.ops.metrics import Metrics
    from tmqgate.broker.ratelimit import RateLimitedLog
    from tmqgate.broker.tdengine import Executor
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.http")
# Where an authenticating middleware leaves the request's Kafka principal ("User:NAME").
PRINCIPAL = "tmqgate.principal"

# TDengine's error codes: a parse error (TSDB_CODE_PAR_SYNTAX_ERROR) and a statement the
# catalog refuses (TSDB_CODE_PAR_INVALID_... family); the message says which.
SYNTAX_ERROR = 0x2600
STATEMENT_ERROR = 0x2601
INTERNAL_ERROR = 0x0001
# TDengine's database-not-found (TSDB_CODE_MND_DB_NOT_EXIST), for /log-history?db=...
DB_NOT_EXIST = 0x0388
# TDengine's HTTP module codes (TSDB_CODE_HTTP_*): URL not served (404, and 405 here), request
# too big (413), no authority (403 here: a browser's cross-origin request)
UNSUPPORTED_URL = 0x1101
REQUEST_TOO_BIG = 0x1104
FORBIDDEN = 0x1105
# What TDengine answers a write when the vnode's disk lacks space (TSDB_CODE_NO_ENOUGH_DISKSPACE).
NO_ENOUGH_DISKSPACE = 0x012E
# 401: no credentials (TSDB_CODE_HTTP_NO_AUTH_INFO), wrong ones (TSDB_CODE_MND_AUTH_FAILURE)
NO_AUTH_INFO = 0x1105
AUTH_FAILURE = 0x0357
#: Paths served without credentials (a load balancer's or orchestrator's probe).
OPEN_PATHS = frozenset({"/health"})
#: What each route needs of the authorizer (tests/test_sql_access.py: every route has an entry).
PATH_NEEDS = {
    "/health": "nothing: liveness, the storage's state and a count of topics (no names)",
    "/rest/sql": "each statement's needs (broker/sql/access.py)",
    "/rest/sql/{db}": "each statement's needs with db as the session database (broker/sql/access.py); "
                      "the name alone reveals nothing",
    "/log-history": "nothing; vnodes shown only of the databases (topics) the caller may DESCRIBE, "
                    "and ?db=X needs DESCRIBE on topic X (403 otherwise, before X is looked up)",
    "/metrics": "nothing; with metrics_acl_filter (the default), series labelled with a topic, database "
                "or consumer group shown only if the caller may DESCRIBE each (a group: or the cluster)",
}
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="tmqgate", charset="UTF-8"'}

Authenticate = Callable[[str, str], Awaitable[bool]]  # (user, password) -> the password is the user's


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic ...` header, or None if absent/malformed."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


def _principal(request: web.Request) -> tuple[str, str]:
    """(principal, host) of a request: what an authenticating middleware put under PRINCIPAL
    ("User:NAME"), else User:ANONYMOUS; ACLs decide what it may do and see."""
    return request.get(PRINCIPAL, ANONYMOUS), request.remote or ""


def unauthorized(code: int, desc: str) -> web.Response:
    return web.json_response({"code": code, "desc": desc}, status=401, headers=_CHALLENGE)


def _auth_middleware(authenticate: Authenticate, open_paths: frozenset[str] = OPEN_PATHS,
                     failed_delay_ms: int = 0) -> Any:
    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path not in open_paths:
            credentials = basic_credentials(request.headers.get("Authorization"))
            if credentials is None:
                return unauthorized(NO_AUTH_INFO, "no auth info input: HTTP Basic credentials are required")
            if not await authenticate(*credentials):
                if failed_delay_ms > 0:  # connection.failed.authentication.delay.ms, as SASL: slows guessing
                    await asyncio.sleep(failed_delay_ms / 1000)
                return unauthorized(AUTH_FAILURE, "Authentication failure")
            request[PRINCIPAL] = f"User:{credentials[0]}"  # who runs the SQL (the ACLs' principal)
        response: web.StreamResponse = await handler(request)
        return response

    return auth


#: Loopback names served with the bound port whatever the front is bound to.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def split_host(text: str) -> tuple[str, int | None]:
    """A Host header (or an allowed-hosts entry) as (lower-case name, port or None); an IPv6
    name loses its brackets. ValueError if the port is not a number."""
    text = text.strip().lower()
    if text.startswith("["):
        name, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad host {text!r}")
    elif text.count(":") == 1:
        name, _, port = text.partition(":")
    else:
        name, port = text, ""
    return name, (int(port) if port else None)


class HostCheck:
    """Which Host headers the front answers (see the module docstring: DNS rebinding)."""

    def __init__(self, served_as: str | None = None, allowed_hosts: Sequence[str] = ()) -> None:
        self.any = "*" in allowed_hosts
        self.allowed = [split_host(h) for h in allowed_hosts if h != "*"]
        if served_as:
            self.allowed.append(split_host(served_as))

    def refusal(self, request: web.BaseRequest) -> str | None:
        """Why ``request``'s Host is not served here (None if it is)."""
        header = request.headers.get("Host")
        if header is None or self.any:
            return None
        try:
            name, port = split_host(header)
        except ValueError:
            name, port = "", None
        if name:
            port = 80 if port is None else port
            sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
            if sock and port == sock[1] and (name in LOOPBACK_NAMES or name == str(sock[0]).lower()):
                return None
            if any(name == n and (p is None or p == port) for n, p in self.allowed):
                return None
        return (f"misdirected request: Host {header[:100]!r} is not a name this server is served as "
                "(its address, localhost, or an entry of http_allowed_hosts)")

#: An SQL answer of at least this many rows is turned into JSON in a thread, not on the loop.
JSON_OFF_LOOP_ROWS = 10_000

# TDengine's "Operation timeout" (TSDB_CODE_TIMEOUT_ERROR): a long text's parse ran past
# sql_parse_timeout_ms and was stopped (503: the server gave up on it; nothing was run).
TIMEOUT_ERROR = 0x012C


def error_response(status: int, code: int, desc: str) -> web.Response:
    """A refusal in TDengine's REST shape."""
    return web.json_response({"code": code, "desc": desc}, status=status)


def cross_origin(request: web.BaseRequest) -> str | None:
    """Why `request` looks like a browser's cross-origin request (None if it does not)."""
    site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
    if site in ("cross-site", "same-site"):
        return f"cross-origin request refused (Sec-Fetch-Site: {site})"
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    try:
        own = URL.build(scheme=request.scheme, authority=request.host).origin()
        theirs = URL(origin.strip()).origin()
    except ValueError:
        return f"cross-origin request refused (Origin: {origin[:100]!r})"
    if theirs != own:
        return f"cross-origin request refused (Origin {origin[:100]!r} is not {str(own)!r})"
    return None


def _guard(hosts: HostCheck) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        misdirected = hosts.refusal(request)
        if misdirected is not None:
            return error_response(421, FORBIDDEN, misdirected)
        problem = cross_origin(request)
        if problem is not None:
            return error_response(403, FORBIDDEN, problem)
        return await _answer(request, handler)
    return guard


async def _answer(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:  # aiohttp's 404/405/413...: the same JSON as every refusal
        if exc.status < 400:
            raise
        code = {413: REQUEST_TOO_BIG}.get(exc.status, UNSUPPORTED_URL if exc.status < 500 else INTERNAL_ERROR)
        return error_response(exc.status, code, f"{exc.reason}: {request.method} {request.path}"
                              if exc.status in (404, 405) else exc.text or exc.reason)
    except Exception as exc:  # a bug must not answer aiohttp's HTML page; logged once, here
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")


def make_app(executor: Executor, store: Store, topics: TopicRegistry, node_id: int,
             max_body_bytes: int = 1_048_576, served_as: str | None = None,
             allowed_hosts: Sequence[str] = (), authenticate: Authenticate | None = None,
             metrics: Metrics | None = None, metrics_auth: bool = False,
             metrics_acl_filter: bool = True, failed_auth_delay_ms: int = 0,
             sibling_fronts: Callable[[], list[str]] | None = None,
             sibling_tls: ssl.SSLContext | None = None, sync: ClusterSync | None = None) -> web.Application:
    """The HTTP front over the broker's SQL executor, store and topic registry. A body over
    `max_body_bytes` (the broker's max_sql_length, TDengine's 1 MiB SQL limit) is answered
    413 before it is read whole, so no SQL text longer than that is ever parsed. `served_as`
    (the configured `http` host:port) and `allowed_hosts` (`http_allowed_hosts`) are the Host
    names served besides the bound address and loopback. With `authenticate`, requests need
    HTTP Basic credentials it accepts (not /health, nor /metrics unless `metrics_auth`).
    With `metrics`, `GET /metrics` serves them in Prometheus' text format — with an authorizer
    and `metrics_acl_filter`, only the series of topics and groups the caller may DESCRIBE.
    Wrong credentials are answered after `failed_auth_delay_ms`. `sibling_fronts`: on a worker
    of `serve --workers N`, the other workers' HTTP fronts (HOST:PORT; https with `sibling_tls`),
    whose series `/metrics` merges with its own (broker/ops/metrics_merge.py). `sync`: on a
    cluster, a statement catches up with it first and is answered once the cluster has what it
    changed (a user, a grant), as the Kafka APIs (broker/apis.py ``bind``)."""
    guard = _guard(HostCheck(served_as, allowed_hosts))
    open_paths = OPEN_PATHS if metrics_auth else OPEN_PATHS | {"/metrics"}
    middlewares = [guard] if authenticate is None else [
        guard, _auth_middleware(authenticate, open_paths, failed_auth_delay_ms)]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)

    async def health(_request: web.Request) -> web.Response:
        """Liveness and the storage's state: `read_only` says why writes are refused (a full
        disk), `disk_guard_shortfall` the archiver's figures while it cannot bring usage under
        disk_usage_max_percent (null otherwise): an operator's probe sees both."""
        storage = {"read_only": store.read_only,
                   "disk_guard_shortfall": store.archiver.guard.shortfall}
        return web.json_response({"status": "ok", "node_id": node_id, "topics": len(topics.all()),
                                  "storage": storage})

    async def rest_sql(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return error_response(400, SYNTAX_ERROR, f"the SQL text is not UTF-8 (byte {exc.start})")
        db = request.match_info.get("db")
        try:
            # SQL runs as the request's principal (`_principal`).
            # On a cluster a statement may be sent on to the broker leading its database, with
            # these credentials (broker/cluster/sql.py); one sent here is never sent on.
            caller = Caller(*_principal(request), forwarded=request.headers.get(FORWARDED) == "1",
                            credentials=request.headers.get("Authorization"))
            if sync is None:
                result = await executor.execute_async(text, db, caller)
            else:
                result, settled = await run_synced(sync, lambda: executor.execute_async(text, db, caller))
                if not settled:
                    return error_response(503, TIMEOUT_ERROR, "Operation timeout: the change is not in the "
                                          "cluster's metadata yet; it is kept and retried")
        except SqlError as exc:
            desc = exc.message
            code = exc.code or (SYNTAX_ERROR if exc.position is not None else STATEMENT_ERROR)
            return error_response(400, code, desc)
        except ParseTimeout as exc:
            return error_response(503, TIMEOUT_ERROR, f"Operation timeout: {exc} (sql_parse_timeout_ms); "
                                  "nothing was run")
        except ParseWorkerDied as exc:  # the next long text gets a new parsing process
            return error_response(500, INTERNAL_ERROR, f"internal error: {exc}; nothing was run")
        except StorageIOError as exc:  # a full disk: nothing written, reads still work
            return error_response(503, NO_ENOUGH_DISKSPACE, f"No enough disk space: {exc}")
        if len(result.rows) < JSON_OFF_LOOP_ROWS:
            return web.json_response(result.to_json())
        # a big answer (a SELECT's, up to a million rows) is encoded off the loop: json.dumps
        # of it takes long enough to hold up every other client
        text = await asyncio.to_thread(json.dumps, result.to_json())
        return web.Response(text=text, content_type="application/json")

    async def log_history(request: web.Request) -> web.Response:
        db = request.query.get("db")
        visible = Visibility(executor.access, Caller(*_principal(request)))
        if db is not None and not visible("TOPIC", db):  # as Metadata of a named topic: refused, found or not
            return error_response(403, PERMISSION_DENIED,
                                  f"Permission denied: {visible.caller.principal} may not DESCRIBE topic {db!r}")
        if db is not None and store.get_database(db) is None:
            return error_response(404, DB_NOT_EXIST, f"Database not exist: {db}")
        return web.json_response({"vnodes": [v for v in store.log_history(db) if visible("TOPIC", v["db"])]})

    app.router.add_get("/health", health)
    app.router.add_post("/rest/sql", rest_sql)
    app.router.add_post("/rest/sql/{db}", rest_sql)
    app.router.add_get("/log-history", log_history)
    if metrics is not None:
        async def metrics_text(request: web.Request) -> web.Response:
            visible = (Visibility(executor.access, Caller(*_principal(request)))
                       if metrics_acl_filter and executor.access is not None else None)
            own = metrics.exposition(visible)
            if sibling_fronts is not None and request.query.get("scope") != "worker":
                texts = await _sibling_metrics(sibling_fronts(), request.headers.get("Authorization"), sibling_tls)
                found = [t for t in texts if t is not None]
                own = merge_metrics([own, *found], unreached=len(texts) - len(found))
            return web.Response(body=own, headers={"Content-Type": METRICS_CONTENT_TYPE})

        app.router.add_get("/metrics", metrics_text)
    return app


async def _sibling_metrics(fronts: list[str], authorization: str | None,
                           tls: ssl.SSLContext | None) -> list[bytes | None]:
    """Each sibling worker's own series (`/metrics?scope=worker`, asked with the caller's
    credentials); None for one that did not answer 200 in time."""
    headers = {} if authorization is None else {"Authorization": authorization}
    scheme = "https" if tls is not None else "http"
    timeout = aiohttp.ClientTimeout(total=METRICS_SIBLING_TIMEOUT_S)

    async def one(session: aiohttp.ClientSession, front: str) -> bytes | None:
        try:
            async with session.get(f"{scheme}://{front}/metrics", params={"scope": "worker"}, headers=headers,
                                   ssl=tls if tls is not None else False) as answer:
                return await answer.read() if answer.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None

    if not fronts:
        return []
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(one(session, f) for f in fronts)))


@dataclass
class FrontLimits:
    """The front's connection limits (http_max_connections, http_header_timeout_ms,
    http_idle_timeout_ms), its open connections and how many it refused."""

    max_connections: int = 1000
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    limited_log: RateLimitedLog | None = None
    open: int = 0
    refused: int = 0
    timed_out: int = 0

    def _log(self, kind: str, msg: str, *args: object) -> None:
        if self.limited_log is not None:
            self.limited_log.warning(kind, msg, *args)
        else:
            log.warning(msg, *args)


class _Connection(RequestHandler):
    """aiohttp's per-connection protocol under `FrontLimits`: refused at once over the cap; a
    header deadline armed at the connection's start and at each later request's first byte,
    disarmed when a request's headers are whole (aiohttp's parser counts it)."""

    def __init__(self, limits: FrontLimits, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._admitted = False
        self._deadline: asyncio.TimerHandle | None = None
        self._armed_at = 0  # requests whole when the deadline was armed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        limits = self._limits
        if limits.open >= limits.max_connections:
            limits.refused += 1
            limits._log("http-refused-connection", "HTTP front: closing new connection from %s: "
                        "http_max_connections (%d) reached (%d refused so far)",
                        transport.get_extra_info("peername"), limits.max_connections, limits.refused)
            cast(asyncio.Transport, transport).abort()
            return
        self._admitted = True
        limits.open += 1
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return
        self._admitted = False
        self._limits.open -= 1
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._request_count != self._armed_at:  # a request's headers are whole
            self._disarm()
        if self._deadline is None and self._waiter is not None and not self._waiter.done():
            self._arm()  # the first bytes of the next request on a kept-alive connection

    def _arm(self) -> None:
        self._disarm()
        self._armed_at = self._request_count
        self._deadline = self._loop.call_later(self._limits.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self._request_count != self._armed_at or self.transport is None:
            return
        limits = self._limits
        limits.timed_out += 1
        limits._log("http-header-timeout", "HTTP front: closing %s: no whole request line and headers "
                    "within http_header_timeout_ms (%d ms)", self.transport.get_extra_info("peername"),
                    round(limits.header_timeout_s * 1000))
        self.force_close()


class _Runner(web.AppRunner):
    """An AppRunner whose sites make `_Connection`s (aiohttp's TCPSite takes `server` as its
    protocol factory)."""

    def __init__(self, app: web.Application, limits: FrontLimits) -> None:
        super().__init__(app, access_log=None)
        self.limits = limits

    @property
    def server(self) -> Any:
        base = super().server
        if base is None:
            return None
        limits = self.limits
        return lambda: _Connection(limits, base, loop=asyncio.get_running_loop(), access_log=None,
                                   keepalive_timeout=limits.idle_timeout_s)


async def start_http(app: web.Application, address: tuple[str, int],
                     ssl_context: ssl.SSLContext | None = None,
                     limits: FrontLimits | None = None) -> web.AppRunner:
    """Serve `app` on `address` (host, port) until the runner is cleaned up; HTTPS when
    given the TLS context (the Kafka listeners' certificates, `http_tls`); connections under
    `limits`."""
    runner = _Runner(app, limits or FrontLimits())
    await runner.setup()
    host, port = address
    await web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context).start()
    return runner
