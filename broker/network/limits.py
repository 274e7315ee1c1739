"""Bounded resources of the Kafka listener: the request memory pool and the connection caps.

`MemoryPool` is Kafka's `queued.max.request.bytes`: every request frame is reserved from one
broker-wide pool before its body is read, and given back when its connection reads its next
request. When the pool cannot hold a frame, its connection waits (nothing more is read from
it, so the kernel's socket buffer fills and TCP pushes back on the client) until memory is
freed — as Kafka's SocketServer mutes a channel whose buffer it cannot allocate. Waiters are
granted in arrival order among those that fit: a small frame (a normal client's request) is
not held up behind large frames waiting for room, as in Kafka, where any muted channel whose
allocation succeeds is read.

`ConnectionLimits` is Kafka's `max.connections` and `max.connections.per.ip`: a connection
over either is closed as soon as it is accepted.

Descriptors (issue 25): every connection holds one. The Kafka listeners hold at most
`max_connections`, the HTTP front at most `http_max_connections` (broker/network/http.py), and the
broker needs `RESERVED_DESCRIPTORS` more for itself; `tmqgate serve` raises the soft
RLIMIT_NOFILE to the hard limit and warns when their sum does not fit. When accept() fails
for want of descriptors anyway (EMFILE/ENFILE), `accept_error_handler` logs it once per
interval instead of a traceback per try.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tmqgate.broker.ratelimit import RateLimitedLog


class MemoryPool:
    """A byte budget shared by all connections; `capacity` <= 0 means unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def bounded(self) -> bool:
        return self.capacity > 0

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def reserve(self, size: int) -> None:
        """Take `size` bytes (at most the capacity), waiting until they are free."""
        if not self.bounded or self.used + size <= self.capacity:
            self.used += size
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(size)  # granted as we were cancelled: give it back
            elif entry in self._waiters:
                self._waiters.remove(entry)
            raise

    def release(self, size: int) -> None:
        self.used -= size
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        waiting = []
        for size, future in self._waiters:
            if future.done():
                continue
            if self.used + size <= self.capacity:
                self.used += size
                future.set_result(None)
            else:
                waiting.append((size, future))
        self._waiters = waiting


@dataclass
class ConnectionLimits:
    """Counts open connections, in total and per client address."""

    max_connections: int
    max_per_ip: int
    total: int = 0
    per_ip: dict[str, int] = field(default_factory=dict)

    def admit(self, host: str) -> str | None:
        """Count a new connection from `host`, or say why it must be closed (then not counted)."""
        if self.total >= self.max_connections:
            return f"max.connections ({self.max_connections}) reached"
        count = self.per_ip.get(host, 0)
        if count >= self.max_per_ip:
            return f"max.connections.per.ip ({self.max_per_ip}) reached for {host}"
        self.total += 1
        self.per_ip[host] = count + 1
        return None

    def release(self, host: str) -> None:
        self.total -= 1
        count = self.per_ip.get(host, 0) - 1
        if count > 0:
            self.per_ip[host] = count
        else:
            self.per_ip.pop(host, None)


class FrameMemory:
    """What one connection holds of the pool: the frame of the request it is answering."""

    def __init__(self, pool: MemoryPool) -> None:
        self.pool = pool
        self.held = 0

    async def take(self, size: int) -> None:
        assert not self.held
        await self.pool.reserve(size)
        self.held = size

    def free(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self.pool.release(held)

    def hand_over(self, writing: Coroutine[Any, Any, None], answer: Coroutine[Any, Any, Any]) -> asyncio.Future[None]:
        """The frame's memory stays taken for a deferred answer: the task ``writing`` it, which
        gives the memory back and closes the handler's ``answer`` when it ends, however it ends;
        the connection takes its next frame meanwhile. A task cancelled before its first step
        (its connection ends at once) never runs its body, so a ``finally`` inside it would not
        give the memory back."""
        held, self.held = self.held, 0
        pool = self.pool
        task = asyncio.ensure_future(writing)

        def ended(_: asyncio.Future[None]) -> None:
            if held:
                pool.release(held)
            answer.close()  # not started if the task was cancelled first: nothing else awaits it

        task.add_done_callback(ended)
        return task


#: accept() errors of an exhausted process or host: asyncio reports each through the loop's
#: exception handler (Python 3.11 once per backlog slot per try: ~4,000 tracebacks a second).
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Descriptors the broker needs besides connections (LevelDB's files, the WAL, the parser
#: process's pipes, listening sockets, etcd/peer connections on a cluster).
RESERVED_DESCRIPTORS = 256


def accept_error_handler(limited_log: RateLimitedLog) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """An event-loop exception handler that logs out-of-descriptor accept() errors through the
    broker's rate-limited log (one line per kind and interval, no traceback), and anything else
    as asyncio's default handler does. asyncio stops accepting on that socket for 1 s by itself."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES:
            sock = context.get("socket")
            where = sock.getsockname() if sock is not None else "?"
            limited_log.error("accept-out-of-resources", "cannot accept connections on %s: %s (the process's "
                              "descriptor limit RLIMIT_NOFILE, or the host's); retrying", where, exc)
            return
        loop.default_exception_handler(context)

    return handle


def raise_descriptor_limit(needed: int) -> tuple[int, str | None]:
    """Raise the soft RLIMIT_NOFILE to its hard limit (as the JVM does for Kafka at start):
    (the limit now, a warning when `needed` descriptors do not fit it, else None)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and needed > soft:
        return soft, (f"the descriptor limit (RLIMIT_NOFILE {soft}) is below max_connections + "
                      f"http_max_connections + {RESERVED_DESCRIPTORS} reserved ({needed}): at full load new "
                      "connections fail to be accepted; raise the limit (ulimit -n, LimitNOFILE=) or lower them")
    return soft, None
