"""Who is on the other end of the connection a handler is serving (for group membership,
SHOW CONSUMERS, authorization and quotas). The server sets `current_client` as each
connection starts; each connection runs in its own task, so in its own context.

A connection's listener and security protocol are fixed when it is accepted; its principal
is `User:ANONYMOUS` until TLS client authentication or SASL says otherwise (as Kafka's
KafkaPrincipal.ANONYMOUS on a PLAINTEXT listener)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

ANONYMOUS = "User:ANONYMOUS"


def _never() -> bool:
    return False


class ClientInfo:
    """A connection's peer address, the listener it came in on, and its principal."""

    __slots__ = ("host", "port", "listener", "security_protocol", "principal", "advertised", "gone", "on_close")

    def __init__(self, host: str, port: int, *, listener: str = "PLAINTEXT",
                 security_protocol: str = "PLAINTEXT", principal: str = ANONYMOUS,
                 advertised: tuple[str, int] | None = None, gone: Callable[[], bool] = _never) -> None:
        self.host = host
        self.port = port
        self.listener = listener  # the listener's name, e.g. "PLAINTEXT", "SASL_SSL", "INTERNAL"
        self.security_protocol = security_protocol  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
        self.principal = principal  # "User:NAME"
        self.advertised = advertised  # (host, port) Metadata gives this client for this node
        # whether the client has closed the connection (end of stream or reset): long work for
        # it (a Fetch's view evaluation) stops early, as nobody will read the answer
        self.gone = gone
        # called once the connection has closed (a share session's records go back at once)
        self.on_close: list[Callable[[], None]] = []


current_client: ContextVar[ClientInfo] = ContextVar("current_client")
