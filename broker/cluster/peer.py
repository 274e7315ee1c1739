"""A Kafka connection from this broker to another one (a follower fetching from its
partitions' leader), on asyncio streams and the sans-IO codec: one request at a time, each
bounded by a timeout; any failure closes it and the caller connects again."""

from __future__ import annotations

import asyncio
import itertools
import struct
from typing import Any

from tmqgate.protocol.codec import DecodeError
from tmqgate.protocol.messages import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_FRAME = 256 << 20  # a peer's answer larger than this is refused (a broker never sends one)


class PeerError(Exception):
    """The peer could not be reached or answered something unreadable."""


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._corr = itertools.count(1)

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self._request(api_key, version, body), timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, DecodeError) as exc:
            self.close()
            raise PeerError(f"{self.host}:{self.port}: {exc!r}") from None

    async def _request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self._streams
        corr = next(self._corr)
        frame = bytearray(encode_request(api_key, version, corr, self.client_id, body))
        writer.write(frame)
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 0 < size <= MAX_FRAME:
            raise ValueError(f"answer of {size} bytes")
        got, answer = decode_response(api_key, version, await reader.readexactly(size))
        if got != corr:
            raise ValueError(f"correlation id {got}, expected {corr}")
        return dict(answer)

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
