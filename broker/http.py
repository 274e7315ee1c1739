"""The HTTP front (SPEC.md): `POST /rest/sql[/db]` in the shape of TDengine's REST API,
`GET /log-history` (each vnode's WAL ranges, collected ones included), and `GET /health`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from tmqgate.broker.tdengine import SqlError

if TYPE_CHECKING:
    from tmqgate.broker.tdengine import Executor
    from tmqgate.broker.topics import TopicRegistry
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.http")

# TDengine's error codes: a parse error (TSDB_CODE_PAR_SYNTAX_ERROR) and a statement the
# catalog refuses (TSDB_CODE_PAR_INVALID_... family); the message says which.
SYNTAX_ERROR = 0x2600
STATEMENT_ERROR = 0x2601
INTERNAL_ERROR = 0x0001


def make_app(executor: Executor, store: Store, topics: TopicRegistry, node_id: int,
             max_body_bytes: int = 1_048_576) -> web.Application:
    """The HTTP front over the broker's SQL executor, store and topic registry. A body over
    `max_body_bytes` (the broker's max_sql_length, TDengine's 1 MiB SQL limit) is answered
    413 before it is read whole, so no SQL text longer than that is ever parsed."""
    app = web.Application(client_max_size=max_body_bytes)

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": node_id, "topics": len(topics.all())})

    async def rest_sql(request: web.Request) -> web.Response:
        text = await request.text()
        db = request.match_info.get("db")
        try:
            result = await executor.execute_async(text, db)
        except SqlError as exc:
            desc = exc.message
            code = SYNTAX_ERROR if exc.position is not None else STATEMENT_ERROR
            return web.json_response({"code": code, "desc": desc}, status=400)
        except Exception as exc:  # a bug must not take the endpoint down; the statement failed alone
            log.exception("statement failed: %s", text[:200])
            return web.json_response({"code": INTERNAL_ERROR, "desc": f"internal error: {exc}"}, status=500)
        return web.json_response(result.to_json())

    async def log_history(request: web.Request) -> web.Response:
        return web.json_response({"vnodes": store.log_history(request.query.get("db"))})

    app.router.add_get("/health", health)
    app.router.add_post("/rest/sql", rest_sql)
    app.router.add_post("/rest/sql/{db}", rest_sql)
    app.router.add_get("/log-history", log_history)
    return app


async def start_http(app: web.Application, address: tuple[str, int]) -> web.AppRunner:
    """Serve `app` on `address` (host, port) until the runner is cleaned up."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = address
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner
