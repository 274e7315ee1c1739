"""A Kafka connection from this broker to another one (a follower fetching from its
partitions' leader, transaction markers, verification), on asyncio streams and the sans-IO
codec: one request at a time, each bounded by a timeout; any failure closes it and the caller
connects again. It speaks the security protocol of the listener it dials (each broker's first,
the one it registers): TLS with the peer's certificate checked (``PeerSecurity.tls``, with this
broker's own for mutual TLS), and SASL/PLAIN as the brokers' user (SaslHandshake then
SaslAuthenticate, as Kafka's clients) — so the brokers pass the others' authorizers."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from tmqgate.protocol.codec import DecodeError
from tmqgate.protocol.messages import decode_response, encode_request

_SIZE = struct.Struct(">i")
MAX_FRAME = 256 << 20  # a peer's answer larger than this is refused (a broker never sends one)


class PeerError(Exception):
    """The peer could not be reached or answered something unreadable."""


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass(frozen=True)
class PeerSecurity:
    """How this broker connects to the others: TLS (a client context, None: plaintext) and
    SASL/PLAIN credentials (None: no SASL)."""

    tls: ssl.SSLContext | None = None
    sasl_plain: tuple[str, str] | None = field(default=None, repr=False)


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, security: PeerSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security or PeerSecurity()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._corr = itertools.count(1)

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self._request(api_key, version, body), timeout)
        except PeerError:
            self.close()
            raise
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, DecodeError) as exc:
            self.close()
            raise PeerError(f"{self.host}:{self.port}: {exc!r}") from None

    async def _request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._streams is None:
            tls = self.security.tls
            self._streams = await asyncio.open_connection(self.host, self.port, ssl=tls,
                                                          server_hostname=self.host if tls is not None else None)
            if self.security.sasl_plain is not None:
                await self._authenticate(*self.security.sasl_plain)
        return await self._exchange(api_key, version, body)

    async def _authenticate(self, user: str, password: str) -> None:
        """SASL/PLAIN on a new connection (PeerError when the peer refuses it)."""
        answer = await self._exchange(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        if answer["error_code"]:
            raise PeerError(f"{self.host}:{self.port} refused SASL/PLAIN (error {answer['error_code']}; it takes "
                            f"{answer.get('mechanisms')})")
        answer = await self._exchange(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})
        if answer["error_code"]:
            raise PeerError(f"{self.host}:{self.port} refused this broker's credentials: {answer.get('error_message')}")

    async def _exchange(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert self._streams is not None
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
