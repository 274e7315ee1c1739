"""A raw Kafka connection for tests that drive a real Broker over TCP with tmqgate's own codec."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from tmqgate.protocol.messages import decode_response, encode_request


class Conn:
    """One client connection speaking raw Kafka frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.corr = 0

    @classmethod
    async def open(cls, port: int, client_id: str = "test", rcvbuf: int | None = None) -> Conn:
        """Connect; `rcvbuf` sets a small receive window (the broker's writev then takes part
        of a large response)."""
        if rcvbuf is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            return cls(reader, writer, client_id)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        return cls(*await asyncio.open_connection(sock=sock), client_id)

    async def call(self, api_key: int, version: int, body: dict[str, Any], pause: float = 0) -> dict[str, Any]:
        """Send a request and read its response; `pause` waits after the size prefix, letting
        the broker find the socket full before the rest is read."""
        self.corr += 1
        self.writer.write(encode_request(api_key, version, self.corr, self.client_id, body))
        await self.writer.drain()
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        if pause:
            await asyncio.sleep(pause)
        corr, resp = decode_response(api_key, version, await self.reader.readexactly(size))
        assert corr == self.corr
        return resp

    def close(self) -> None:
        self.writer.close()
