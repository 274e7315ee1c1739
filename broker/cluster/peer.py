"""A Kafka connection from this broker to another one (a follower fetching from its
partitions' leader, transaction markers, verification), on asyncio streams and the sans-IO
codec: one request at a time (callers sharing one — concurrent Produce requests verifying their
transactions — wait their turn on its lock), each bounded by a timeout, its wait for the turn
included; any failure closes it and the caller connects again. It speaks the security protocol
of the listener it dials (each broker's first, the one it registers): TLS with the peer's
certificate checked (``PeerSecurity.tls``, with this broker's own for mutual TLS), and SASL as
the brokers' user with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's
sasl.mechanism.inter.broker.protocol; SaslHandshake then one SaslAuthenticate, or two for
SCRAM, as Kafka's clients) — so the brokers pass the others' authorizers."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from tmqgate.broker.auth.scram import ScramClient
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
    SASL (mechanism, user, password; None: no SASL)."""

    tls: ssl.SSLContext | None = None
    sasl: tuple[str, str, str] | None = field(default=None, repr=False)


class PeerConnection:
    def __init__(self, host: str, port: int, client_id: str, security: PeerSecurity | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.security = security or PeerSecurity()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._corr = itertools.count(1)
        self._turn = asyncio.Lock()

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            async with asyncio.timeout(timeout):
                return await self._request_in_turn(api_key, version, body)
        except PeerError:
            self.close()
            raise
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, DecodeError) as exc:
            self.close()
            raise PeerError(f"{self.host}:{self.port}: {exc!r}") from None

    async def _request_in_turn(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        async with self._turn:
            return await self._request(api_key, version, body)

    async def _request(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if self._streams is None:
            tls = self.security.tls
            self._streams = await asyncio.open_connection(self.host, self.port, ssl=tls,
                                                          server_hostname=self.host if tls is not None else None)
            if self.security.sasl is not None:
                await self._authenticate(*self.security.sasl)
        return await self._exchange(api_key, version, body)

    async def _authenticate(self, mechanism: str, user: str, password: str) -> None:
        """SASL on a new connection (PeerError when the peer refuses it or is not who it claims:
        a SCRAM server must prove it holds this user's credential)."""
        answer = await self._exchange(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if answer["error_code"]:
            raise PeerError(f"{self.host}:{self.port} refused SASL/{mechanism} (error {answer['error_code']}; it "
                            f"takes {answer.get('mechanisms')})")
        if mechanism == "PLAIN":
            await self._sasl_token(f"\0{user}\0{password}".encode())
            return
        client = ScramClient(mechanism, user, password)
        try:
            client.verify(await self._sasl_token(client.final(await self._sasl_token(client.first()))))
        except ValueError as exc:
            raise PeerError(f"{self.host}:{self.port}: SASL/{mechanism}: {exc}") from None

    async def _sasl_token(self, token: bytes) -> bytes:
        answer = await self._exchange(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if answer["error_code"]:
            raise PeerError(f"{self.host}:{self.port} refused this broker's credentials: {answer.get('error_message')}")
        return bytes(answer["auth_bytes"])

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
