"""The HTTP front (SPEC.md): `GET /health` now; `POST /rest/sql` joins it with the SQL front."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from broker.server import Broker


def make_app(broker: Broker) -> web.Application:
    app = web.Application()

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": broker.config.node_id,
                                  "topics": len(broker.topics.all())})

    app.router.add_get("/health", health)
    return app


async def start_http(broker: Broker) -> web.AppRunner:
    runner = web.AppRunner(make_app(broker), access_log=None)
    await runner.setup()
    host, port = broker.config.http_address
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner
