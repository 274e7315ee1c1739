"""Who is on the other end of the connection a handler is serving (for group membership and
SHOW CONSUMERS). The server sets `current_client` as each connection starts; each
connection runs in its own task, so in its own context."""

from __future__ import annotations

from contextvars import ContextVar


class ClientInfo:
    """A connection's peer address."""

    __slots__ = ("host", "port")

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port


current_client: ContextVar[ClientInfo] = ContextVar("current_client")
