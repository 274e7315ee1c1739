"""One Kafka connection served: frames in, handlers run, responses out — one request at a time
per connection, in order, as Kafka answers a channel (it mutes it while a request is in flight).

Why a module of its own: the loop every client's request goes through is kept apart from the
composition root (broker/server.py, which builds the collaborators and hands them over in a
`ConnectionServices`); a `Connection` never sees the Broker.

A bad frame fails its own connection only: Kafka closes the connection when it cannot parse
a request header or body, or when the size prefix passes socket.request.max.bytes; an
unsupported ApiVersions version gets the v0 error response carrying our ranges (KIP-511).
A request that parses is always answered: an exception escaping its handler (or the encoding
of its answer) becomes Kafka's error answer for that API and version (protocol.error_response:
UNKNOWN_SERVER_ERROR, or a KafkaError's own code), and the connection lives on. Log lines about
bad input and failures are rate-limited (broker/ratelimit.py).

Framing is the StreamReader's own: `readexactly(4)` for the size, checked before the body is
read, then `readexactly(size)` — one copy out of the reader's buffer, nothing else buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from tmqgate.broker.apis import MAX_DEFERRED, ApiEntry, ApiKey, BoundHandler, Deferred, api_versions_body
from tmqgate.broker.auth.session import Action, Authenticator
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.identity.client import ANONYMOUS, ClientInfo, current_client
from tmqgate.broker.identity.principal import MappingRule, NoMatchingRule, certificate_principal
from tmqgate.broker.network.limits import ConnectionLimits, FrameMemory, MemoryPool
from tmqgate.broker.network.listeners import Listener
from tmqgate.broker.ops.metrics import Metrics
from tmqgate.broker.ops.quotas.client_quotas import MUTATION_APIS, ClientQuotaManagers
from tmqgate.broker.ratelimit import RateLimitedLog
from tmqgate.protocol.error_response import error_response
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.messages import (
    InvalidRequest,
    Request,
    UnknownApi,
    UnsupportedVersion,
    decode_request,
    encode_response,
    encode_response_parts,
)

# The logger names operators filter on (and tests): the server's, kept when the loop moved here.
log = logging.getLogger("tmqgate.server")
# Every completed request at DEBUG, as Kafka's kafka.request.logger (enable with --log-level DEBUG).
_request_log = logging.getLogger("tmqgate.request")


class _Close(Exception):
    """The connection ends here (why is logged where it is raised, if anywhere)."""
_SIZE = struct.Struct(">i")
#: The StreamReader pauses its socket past twice this many unread bytes: what a connection may
#: buffer outside the request pool (frames themselves are reserved in the pool first).
READ_LIMIT = 64 * 1024
#: How long a closing connection waits for the peer's side of the close (TLS close_notify), s.
_CLOSE_WAIT_S = 1.0
#: After a refusal answer, how long the broker waits for the client to close first (seconds).
_PEER_CLOSE_WAIT_S = 1.0
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16


def write_parts(transport: asyncio.WriteTransport, fd: int, parts: list[bytes | bytearray | memoryview]) -> None:
    """Send one response's buffers in order without joining them.

    `StreamWriter.writelines` joins its buffers (a full copy of a Fetch response), and a
    socket transport then copies whatever the socket did not take into its own buffer. Here,
    when the transport has nothing queued, one gathered write (`writev`) hands the parts to
    the kernel straight from the stored batches; only what the socket did not take is given
    to the transport, which queues it behind and sends it when the socket is writable. With
    `fd` -1 (no plain socket, e.g. TLS) or data already queued, each part goes to the
    transport as it is: sent at once or copied once into its buffer, in order either way.
    """
    if len(parts) == 1:
        transport.write(parts[0])
        return
    i = 0
    n = 0
    if fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
        count = len(parts)
        while i < count:
            chunk = parts[i:i + _IOV_MAX]
            try:
                n = os.writev(fd, chunk)
            except (BlockingIOError, InterruptedError):
                n = 0
            for part in chunk:
                if n < len(part):
                    break
                n -= len(part)
                i += 1
            else:
                continue  # the whole chunk went out
            break
        if i == count:
            return
    if n:  # the rest of a part the socket took in part: a view, not a copy of it
        transport.write(memoryview(parts[i])[n:])
        i += 1
    for part in parts[i:]:
        transport.write(part)


def _socket_fd(writer: asyncio.StreamWriter) -> int:
    """The plain socket under `writer` that `write_parts` may write to directly, or -1."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None:
        return -1
    return int(sock.fileno())


@dataclass
class ConnectionServices:
    """What every connection of a broker shares, built by the composition root (broker/server.py).

    `open` gives it the bound handlers and each listener's advertised address once the
    listeners are bound (their addresses are what Metadata answers and a cluster registers)
    and sets `ready`: connections accepted earlier wait for it."""

    config: BrokerConfig
    apis: Mapping[int, ApiEntry]
    quotas: ClientQuotaManagers
    metrics: Metrics
    limited_log: RateLimitedLog
    pool: MemoryPool  # queued.max.request.bytes (broker/network/limits.py)
    limits: ConnectionLimits  # max.connections[.per.ip]
    mapping_rules: list[MappingRule]  # ssl.principal.mapping.rules
    authenticator: Authenticator | None  # with a SASL listener
    handlers: dict[int, BoundHandler] = field(default_factory=dict)
    advertised_by_listener: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Captures every request frame when set (tests use it for byte-for-byte round trips).
    frame_hook: Any = None
    # Set once the handlers are bound: on a cluster the listeners are open (their addresses
    # are what the broker registers) before etcd is joined; early connections wait.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The connections' tasks, cancelled by the broker's stop().
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # slow_request_ms: 0 = never (as infinity, which no request's time reaches).
    slow_request_ms: float = field(init=False)

    def __post_init__(self) -> None:
        self.slow_request_ms = self.config.slow_request_ms or float("inf")

    def open(self, handlers: dict[int, BoundHandler], advertised_by_listener: dict[str, tuple[str, int]]) -> None:
        """The broker is started: its connections are served from now on."""
        self.handlers.update(handlers)
        self.advertised_by_listener.update(advertised_by_listener)
        self.ready.set()


class Connection:
    """Serves one accepted connection of one listener, from its admission to its close."""

    def __init__(self, services: ConnectionServices, listener: Listener, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self._services = services
        self.config = services.config
        self.limited_log = services.limited_log
        self.metrics = services.metrics
        self._listener = listener
        self._reader = reader
        self._writer = writer

    async def serve(self) -> None:
        """Admit the connection (connection limits and quotas), then serve its requests until
        either side closes it; every failure ends this connection only."""
        services, listener, reader, writer = self._services, self._listener, self._reader, self._writer
        task = asyncio.current_task()
        assert task is not None
        services.tasks.add(task)
        if not services.ready.is_set():
            await services.ready.wait()
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else ""
        # connection_creation_rate of the ip: over it, Kafka closes the new connection unserved
        # once the throttle time has passed.
        delay_ms = services.quotas.connection_throttle(host) if services.quotas.ip_active else 0
        refused = services.limits.admit(host) if not delay_ms else "connection_creation_rate"
        if refused is not None:
            self.limited_log.warning("refused-connection", "closing new connection from %s: %s", peer, refused)
            if delay_ms:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(delay_ms / 1000)
            services.tasks.discard(task)
            writer.transport.abort()
            return
        memory = FrameMemory(services.pool)
        self.metrics.connection(listener.name, 1)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection from %s on listener %s", peer, listener.name)
        client = self._client_info(listener, peer, reader, writer)
        try:
            current_client.set(client)
            await self._connection_loop(reader, writer, peer, memory)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections: end quietly (a cancelled task would have
            # Python 3.11's start_server callback log a traceback per connection).
            pass
        except TimeoutError as exc:  # rate-limited: an attacker's sockets time out by the thousand
            self.limited_log.log(logging.INFO, "timed-out", "closing %s: %s", peer, exc)
        except NoMatchingRule as exc:  # Kafka fails the authentication of such a certificate
            self.limited_log.warning("authentication", "closing %s: %s", peer, exc)
        except Exception:  # a bug: its traceback, at most log_rate_limit_messages an interval
            self.limited_log.log(logging.ERROR, "connection-failed", "connection %s failed", peer, exc_info=True)
        finally:
            for closed in client.on_close:
                try:
                    closed()
                except Exception:  # a bug: logged, the connection's cleanup goes on
                    self.limited_log.log(logging.ERROR, "connection-failed", "closing %s failed", peer, exc_info=True)
            self.metrics.connection(listener.name, -1)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("connection from %s on listener %s closed", peer, listener.name)
            memory.free()
            services.limits.release(host)
            services.tasks.discard(task)
            writer.close()
            # A TLS close waits for the peer's close_notify (asyncio: up to 30 s); a client
            # that never sends it must not hold the connection, nor the broker's shutdown.
            try:
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await writer.wait_closed()
            except Exception:
                writer.transport.abort()

    def _client_info(self, listener: Listener, peer: Any, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> ClientInfo:
        """Who the new connection is: its listener, and on SSL its certificate's principal;
        `gone()` is true once the peer has closed (Kafka's broker closes a connection whose
        read ends: nothing more is answered on it)."""
        transport = writer.transport

        def gone() -> bool:
            return reader.at_eof() or transport.is_closing()

        principal = ANONYMOUS
        if listener.security_protocol == "SSL":
            ssl_object = writer.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                principal = certificate_principal(der, self._services.mapping_rules)
        return ClientInfo(host=peer[0] if peer else "", port=peer[1] if peer else 0,
                          listener=listener.name, security_protocol=listener.security_protocol,
                          principal=principal, advertised=self._services.advertised_by_listener[listener.name],
                          gone=gone)

    async def _connection_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               peer: Any, memory: FrameMemory) -> None:
        transport = writer.transport
        fd = _socket_fd(writer)
        # SASL listeners: the connection's authentication says which requests may pass (auth/session.py)
        session = self._services.authenticator.session(current_client.get()) if self._services.authenticator else None
        owed: list[asyncio.Future[None]] = []  # answers still to write (Deferred), oldest first
        try:
            await self._serve_requests(reader, writer, peer, memory, transport, fd, session, owed)
        finally:
            for answer in owed:  # the connection ends: nothing more is written to it
                if not answer.done():
                    answer.cancel()
                elif not answer.cancelled():
                    answer.exception()  # a failed write: the connection is gone anyway

    async def _serve_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any,
                              memory: FrameMemory, transport: Any, fd: int, session: Any,
                              owed: list[asyncio.Future[None]]) -> None:
        """Each request in turn: read (`_read_request`), then answered (`_answer`); either ends
        the connection by raising `_Close`."""
        # A SASL connection authenticates within sasl_authentication_timeout_ms; until it has,
        # its frames (at most 512 KiB) are read outside the request pool, as Kafka reads them:
        # sockets that never authenticate cannot hold the pool that everyone's requests need.
        deadline = (time.monotonic() + self.config.sasl_authentication_timeout_ms / 1000
                    if session is not None else None)
        with contextlib.suppress(_Close):
            while True:
                if deadline is not None and session.ever_authenticated:
                    deadline = None
                request, size = await self._read_request(reader, writer, peer, memory, session, owed, deadline)
                if request is not None:
                    await self._answer(request, size, writer, peer, memory, transport, fd, owed)

    async def _read_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any,
                            memory: FrameMemory, session: Any, owed: list[asyncio.Future[None]],
                            deadline: float | None) -> tuple[Request | None, int]:
        """The next frame as a request this connection may have served, and its size; None when
        the frame was answered here (a raw SASL token, ApiVersions at a version not served, a
        SASL step). `_Close` when the frame ends the connection (over the size limit, not
        parsed, an API or version not served, refused by the SASL session)."""
        (size,) = _SIZE.unpack(await self._read_size(reader, deadline))
        memory.free()  # the previous frame (alive until now in this loop) goes back
        max_size = self.config.socket_request_max_bytes if session is None else session.max_frame(
            self.config.socket_request_max_bytes)
        if size < 0 or size > max_size:
            self.limited_log.warning("bad-frame", "closing %s: frame of %d bytes is over "
                                     "socket.request.max.bytes (%d)", peer, size, max_size)
            raise _Close
        frame = await self._read_frame(reader, size, memory if session is None or session.authenticated
                                       else None, deadline)
        if self._services.frame_hook is not None:
            self._services.frame_hook(frame)
        if session is not None and session.raw_tokens:  # after SaslHandshake v0: raw SASL tokens
            token = await session.on_token(frame)
            if token is None:
                raise _Close
            await _written(owed)
            writer.write(_SIZE.pack(len(token)) + token)
            await writer.drain()
            return None, size
        try:
            request = decode_request(frame)
        except UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                assert exc.correlation_id is not None  # decode_request read the header
                await self._write_versions_error(writer, owed, exc.correlation_id)
                return None, size
            self.limited_log.warning("bad-frame", "closing %s: unsupported version %d of api %d",
                                     peer, exc.api_version, exc.api_key)
            raise _Close from None
        except (UnknownApi, InvalidRequest) as exc:
            self.limited_log.warning("bad-frame", "closing %s: %s", peer, exc)
            raise _Close from None
        entry = self._services.apis.get(request.api_key)
        if entry is None or not entry.min_version <= request.api_version <= entry.max_version:
            if request.api_key == ApiKey.API_VERSIONS:
                await self._write_versions_error(writer, owed, request.correlation_id)
                return None, size
            self.limited_log.warning("bad-frame", "closing %s: api %d v%d not served",
                                     peer, request.api_key, request.api_version)
            raise _Close
        if session is not None:
            step = await session.on_request(request)
            if step.action is not Action.PASS:
                if step.body is not None:
                    await _written(owed)
                    writer.write(encode_response(request.api_key, request.api_version,
                                                 request.correlation_id, step.body))
                    await writer.drain()
                if step.action is Action.ANSWER:
                    return None, size
                if step.body is not None:
                    await _let_peer_close_first(reader)
                raise _Close
        return request, size

    async def _write_versions_error(self, writer: asyncio.StreamWriter, owed: list[asyncio.Future[None]],
                                    correlation_id: int) -> None:
        """ApiVersions at a version not served: answered UNSUPPORTED_VERSION with the versions served."""
        await _written(owed)
        writer.write(api_versions_error(self._services.apis, correlation_id))
        await writer.drain()

    async def _answer(self, request: Request, size: int, writer: asyncio.StreamWriter, peer: Any,
                      memory: FrameMemory, transport: Any, fd: int, owed: list[asyncio.Future[None]]) -> None:
        """Run the request's handler and write its answer (or defer it, in order), with client
        quotas' throttle time and the request's metrics and log; `_Close` when no answer is owed
        after a failure (Kafka closes the connection: Produce acks=0)."""
        request_started = time.monotonic()  # for slow_request_ms and the request log
        quotas = self._services.quotas
        clock = quotas.clock() if quotas.active else None
        throttle_ms = 0
        metrics = self.metrics
        started = time.perf_counter()
        try:
            body = await self._services.handlers[request.api_key](request)
            if isinstance(body, Deferred):
                if clock is None:  # answered later, in order; the next requests are served meanwhile
                    for answer in [t for t in owed if t.done()]:
                        owed.remove(answer)
                        answer.result()  # a failed write (the connection is gone) ends the loop
                    owed.append(memory.hand_over(self._answer_later(
                        request, body.answer, owed[-1] if owed else None, writer, fd, peer,
                        request_started, started), body.answer))
                    if len(owed) >= MAX_DEFERRED:
                        await asyncio.wait([owed[0]])
                    return
                body = await body.answer  # client quotas charge the answer: not deferred
            if clock is not None:  # client quotas: the throttle time goes in the answer
                throttle_ms = quotas.charge(request, body, clock, size)
            if body is not None and quotas.mutation_active and request.api_key in MUTATION_APIS:
                throttle_ms = max(throttle_ms, body.get("throttle_time_ms") or 0)  # controller_mutation_rate
            metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
            started = 0.0
            if body is None:
                if throttle_ms:
                    await asyncio.sleep(throttle_ms / 1000)
                return
            # Large record payloads (Fetch's stored batches) go out uncopied.
            if body.get("error_code"):  # the answer's top-level error (partitions' are the handlers')
                metrics.error(request.api_key, body["error_code"])
            parts = encode_response_parts(request.api_key, request.api_version,
                                          request.correlation_id, body)
        except Exception as exc:  # every failure is an answer (CancelledError is not one)
            if started:  # the handler failed (not the encoding of its answer): not counted yet
                metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
            metrics.error(request.api_key, exc.code if isinstance(exc, KafkaError)
                          else ErrorCode.UNKNOWN_SERVER_ERROR)
            body = self._failed(request, peer, exc)
            if body is None:
                raise _Close from None  # Kafka closes a connection it owes no answer (Produce acks=0)
            parts = encode_response_parts(request.api_key, request.api_version,
                                          request.correlation_id, body)
        await _written(owed)
        write_parts(transport, fd, parts)
        await writer.drain()
        elapsed_ms = (time.monotonic() - request_started) * 1000
        if elapsed_ms >= self._services.slow_request_ms or _request_log.isEnabledFor(logging.DEBUG):
            self._log_request(request, peer, elapsed_ms, body)
        if throttle_ms:
            # Over a quota: the answer went out at once; the connection is not read for the
            # throttle time (Kafka mutes the channel, KIP-219).
            await asyncio.sleep(throttle_ms / 1000)

    async def _answer_later(self, request: Request, answer: Coroutine[Any, Any, dict[str, Any] | None],
                            before: asyncio.Future[None] | None, writer: asyncio.StreamWriter, fd: int, peer: Any,
                            request_started: float, started: float) -> None:
        """A deferred answer (``apis.Deferred``): awaited, then written once the answers owed
        before it are (its frame's memory stays taken from the pool until then: FrameMemory.hand_over)."""
        try:
            body = await answer
            self.metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
            assert body is not None  # an answer owed (acks=0 is never deferred)
            if body.get("error_code"):
                self.metrics.error(request.api_key, body["error_code"])
        except Exception as exc:  # every failure is an answer, as the loop's
            self.metrics.error(request.api_key, exc.code if isinstance(exc, KafkaError)
                               else ErrorCode.UNKNOWN_SERVER_ERROR)
            failed = self._failed(request, peer, exc)
            assert failed is not None
            body = failed
        parts = encode_response_parts(request.api_key, request.api_version, request.correlation_id, body)
        if before is not None and not before.done():
            await before
        write_parts(writer.transport, fd, parts)
        await writer.drain()
        elapsed_ms = (time.monotonic() - request_started) * 1000
        if elapsed_ms >= self._services.slow_request_ms or _request_log.isEnabledFor(logging.DEBUG):
            self._log_request(request, peer, elapsed_ms, body)

    async def _read_size(self, reader: asyncio.StreamReader, deadline: float | None) -> bytes:
        """The next frame's size prefix; a connection silent for connections.max.idle.ms is
        closed, and one not authenticated by `deadline` (time.monotonic()) too."""
        idle_ms = self.config.connections_max_idle_ms
        try:
            async with asyncio.timeout(self._timeout(idle_ms / 1000 if idle_ms > 0 else None, deadline)):
                return await reader.readexactly(4)
        except TimeoutError:
            self._check_deadline(deadline)
            raise TimeoutError(f"idle for connections.max.idle.ms ({idle_ms} ms)") from None

    async def _read_frame(self, reader: asyncio.StreamReader, size: int, memory: FrameMemory | None,
                          deadline: float | None) -> bytes:
        """A frame's body, read once `size` bytes are reserved in the pool (waiting for them,
        unread, as Kafka mutes the channel) — with no `memory`, before authentication, outside
        it; it must arrive within request_read_timeout_ms, and by the authentication deadline."""
        if memory is not None:
            await memory.take(size)
        timeout_ms = self.config.request_read_timeout_ms
        try:
            async with asyncio.timeout(self._timeout(timeout_ms / 1000 if timeout_ms > 0 else None, deadline)):
                return await reader.readexactly(size)
        except TimeoutError:
            self._check_deadline(deadline)
            raise TimeoutError(f"a frame of {size} bytes was not received within "
                               f"request_read_timeout_ms ({timeout_ms} ms)") from None

    @staticmethod
    def _timeout(timeout_s: float | None, deadline: float | None) -> float | None:
        if deadline is None:
            return timeout_s
        left = max(0.0, deadline - time.monotonic())
        return left if timeout_s is None else min(timeout_s, left)

    def _check_deadline(self, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("not authenticated within sasl_authentication_timeout_ms "
                               f"({self.config.sasl_authentication_timeout_ms} ms)") from None

    def _log_request(self, request: Request, peer: Any, elapsed_ms: float, body: dict[str, Any]) -> None:
        """A completed request at DEBUG (Kafka's kafka.request.logger), and a slow one at WARNING:
        one whose time, less what the client asked the broker to wait (Fetch's max_wait_ms; a
        JoinGroup or SyncGroup waits for the rebalance), reached slow_request_ms."""
        name = ApiKey(request.api_key).name
        client = current_client.get(None)
        principal = client.principal if client is not None else "?"
        if _request_log.isEnabledFor(logging.DEBUG):
            _request_log.debug("completed %s v%d in %.1f ms (client id %r, %s, peer %s)", name, request.api_version,
                               elapsed_ms, request.client_id, principal, peer)
        waited = (request.body.get("max_wait_ms", 0) if request.api_key == ApiKey.FETCH
                  else elapsed_ms if request.api_key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP) else 0)
        if self._services.slow_request_ms and elapsed_ms - max(waited, 0) >= self._services.slow_request_ms:
            self.limited_log.warning("slow-request", "slow request: %s v%d took %.0f ms (slow_request_ms %d; "
                                     "client id %r, %s, peer %s)", name, request.api_version, elapsed_ms,
                                     self._services.slow_request_ms, request.client_id, principal, peer)

    def _failed(self, request: Request, peer: Any, exc: Exception) -> dict[str, Any] | None:
        """Kafka's error answer to a request whose handler failed (KafkaApis' handleError):
        the KafkaError's code, else UNKNOWN_SERVER_ERROR with no message; one log line."""
        if isinstance(exc, KafkaError):  # a refusal a handler did not catch: its own code
            code, message, level = exc.code, exc.message, logging.INFO
        else:
            code, message, level = ErrorCode.UNKNOWN_SERVER_ERROR, None, logging.ERROR
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else ""
        name = ApiKey(request.api_key).name  # served, so one of ours
        if self.limited_log.log(level, "handler-error", "error handling %s v%d (client id %r, peer %s), "
                                "answered %s: %r%s", name, request.api_version, request.client_id, peer,
                                code.name, exc, where):
            log.debug("traceback of the failure above", exc_info=exc)
        return error_response(request.api_key, request.api_version, request.body, code, message)


async def serve_connection(services: ConnectionServices, listener: Listener, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
    """A listener's callback (asyncio.start_server): one `Connection` per accepted socket."""
    await Connection(services, listener, reader, writer).serve()


def api_versions_error(apis: Mapping[int, ApiEntry], correlation_id: int) -> bytes:
    """The v0 UNSUPPORTED_VERSION answer a Kafka broker gives to an ApiVersions it can't parse."""
    # Kafka lists only its ApiVersions range in this answer; the client retries with it.
    body = api_versions_body(apis, ErrorCode.UNSUPPORTED_VERSION)
    body["api_keys"] = [k for k in body["api_keys"] if k["api_key"] == ApiKey.API_VERSIONS]
    return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


async def _written(owed: list[asyncio.Future[None]]) -> None:
    """Wait until the answers owed to a connection's earlier requests are written: answers go
    out in the order of the requests."""
    if owed and not owed[-1].done():
        await owed[-1]


async def _let_peer_close_first(reader: asyncio.StreamReader) -> None:
    """Give a refused client the chance to read the answer and close the connection itself.

    kafka-python 3.x drops the bytes it read when the same read ends in EOF (its
    ``_sock_recv`` returns them with the error, and the transport aborts), so a failure answer
    followed at once by the broker's FIN is lost whenever both arrive together — under load,
    often. Every client closes on a failed authentication, so waiting for its EOF (bounded in
    time and bytes) costs nothing; then the broker closes as Kafka does."""
    with contextlib.suppress(TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        async with asyncio.timeout(_PEER_CLOSE_WAIT_S):
            left = READ_LIMIT
            while left > 0 and (chunk := await reader.read(min(left, 4096))):
                left -= len(chunk)
