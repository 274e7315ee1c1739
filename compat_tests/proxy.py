"""A recording TCP proxy between a client and the broker.

It keeps every request frame byte for byte and forwards it unchanged.  Responses pass
through unchanged too, except those that advertise broker addresses (Metadata,
FindCoordinator, DescribeCluster): those are decoded and re-encoded by our codec with the
proxy's own address, so the client keeps talking through the proxy instead of connecting
to the broker directly.

A target of several brokers (``nodes``: ``serve --workers 2``) gets one listener per broker,
each forwarding to its broker, and each advertised address is rewritten to the listener of that
broker, so the client routes by Metadata as it would without the proxy and every connection is
recorded.

``drop_first_response_of=<api key>`` loses a response: the first one of that API is not
forwarded and the client's connection is closed instead (the request was served; the client
sees the connection break and retries — what an idempotent producer must survive).

``hold()`` / ``release()`` pause and resume forwarding in both directions on every
connection (frames wait in the proxy, new connections are accepted but wait too): a
connection held up without being closed, as a stalled network path looks to a client.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .helpers import split_hostport

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


@dataclass
class Capture:
    requests: list[bytes] = field(default_factory=list)  # size prefix stripped
    responses: list[tuple[int, int, bytes]] = field(default_factory=list)  # (api key, version, frame)
    errors: list[str] = field(default_factory=list)


class RecordingProxy:
    """Listens on a free loopback port in a thread of its own; `bootstrap` is its address."""

    def __init__(self, upstream: str, drop_first_response_of: int | None = None, nodes: Sequence[str] = ()) -> None:
        self.upstream = split_hostport(upstream)
        self._upstreams = [self.upstream] + [a for a in map(split_hostport, nodes) if a != self.upstream]
        self._fronts: dict[tuple[str, int], int] = {}  # upstream -> the port of its listener here
        self._servers: list[asyncio.base_events.Server] = []
        self.capture = Capture()
        self.drop_first_response_of = drop_first_response_of
        self.dropped: list[tuple[int, int, bytes]] = []  # (api key, version, frame) not forwarded
        self.bootstrap = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._flowing: asyncio.Event | None = None  # created on the proxy's loop
        self._hold_requests = True  # hold(responses_only=True): requests still reach the broker

    def hold(self, responses_only: bool = False) -> None:
        """Stop forwarding (both directions, or only the broker's answers, on every connection)
        until ``release``."""
        self._hold_requests = not responses_only
        asyncio.run_coroutine_threadsafe(self._set_flowing(False), self._loop).result(10)

    def release(self) -> None:
        """Forward again, everything held first."""
        asyncio.run_coroutine_threadsafe(self._set_flowing(True), self._loop).result(10)

    async def _set_flowing(self, on: bool) -> None:
        assert self._flowing is not None
        if on:
            self._flowing.set()
        else:
            self._flowing.clear()

    def start(self) -> RecordingProxy:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        fut.result(10)
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        for upstream in self._upstreams:
            server = await asyncio.start_server(functools.partial(self._handle, upstream=upstream), "127.0.0.1", 0)
            self._servers.append(server)
            self._fronts[upstream] = server.sockets[0].getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self._fronts[self.upstream]}"

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter, upstream: tuple[str, int]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            ur, uw = await asyncio.open_connection(*upstream)
        except OSError as e:
            self.capture.errors.append(f"upstream connect: {e}")
            cw.close()
            return
        pending: dict[int, tuple[int, int]] = {}

        async def client_to_broker() -> None:
            while True:
                head = await cr.readexactly(4)
                (size,) = struct.unpack(">i", head)
                frame = await cr.readexactly(size)
                self.capture.requests.append(frame)
                if len(frame) >= 8:
                    api_key, version, corr = struct.unpack_from(">hhi", frame)
                    pending[corr] = (api_key, version)
                assert self._flowing is not None
                if self._hold_requests:
                    await self._flowing.wait()
                uw.write(head + frame)
                await uw.drain()

        async def broker_to_client() -> None:
            while True:
                head = await ur.readexactly(4)
                (size,) = struct.unpack(">i", head)
                frame = await ur.readexactly(size)
                (corr,) = struct.unpack_from(">i", frame)
                api_key, version = pending.pop(corr, (-1, -1))
                assert self._flowing is not None
                await self._flowing.wait()
                self.capture.responses.append((api_key, version, frame))
                if api_key == self.drop_first_response_of and not self.dropped:
                    self.dropped.append((api_key, version, frame))
                    return  # the pair ends: both connections are closed below
                out = head + frame
                if api_key in (METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER):
                    try:
                        out = self._rewrite(api_key, version, frame)
                    except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
                        self.capture.errors.append(f"rewrite api {api_key} v{version}: {e!r}")
                cw.write(out)
                await cw.drain()

        a = asyncio.ensure_future(client_to_broker())
        b = asyncio.ensure_future(broker_to_client())
        try:
            await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (a, b):
                t.cancel()
            for w in (cw, uw):
                w.close()
            self._tasks.discard(task)

    def _rewrite(self, api_key: int, version: int, frame: bytes) -> bytes:
        """Point every advertised broker address at this proxy: at the listener of that broker,
        or at the bootstrap's for one it does not front."""
        from tmqgate.protocol.messages import decode_response, encode_response

        def point(entry: dict[str, Any]) -> None:
            port = self._fronts.get((entry["host"], entry["port"]), self._fronts[self.upstream])
            entry["host"], entry["port"] = "127.0.0.1", port

        corr, body = decode_response(api_key, version, frame)
        if api_key in (METADATA, DESCRIBE_CLUSTER):
            for b in body.get("brokers") or []:
                point(b)
        elif api_key == FIND_COORDINATOR:
            if body.get("coordinators"):
                for c in body["coordinators"]:
                    if c.get("node_id", -1) >= 0:
                        point(c)
            elif body.get("node_id", -1) >= 0:
                point(body)
        return encode_response(api_key, version, corr, body)
