"""What a SASL mechanism server is to the connection's session (broker/auth/session.py).

A mechanism server is fed the client's tokens one at a time (`respond`), answers the bytes to
send back, and is `complete` once the client is authenticated. It raises
`AuthenticationFailed` when the client is not; the session then answers
SASL_AUTHENTICATION_FAILED and closes, as Kafka's SaslServerAuthenticator does:

- `client_message=None` (Kafka's SaslException) — the client sees only Kafka's generic
  "Authentication failed during authentication due to invalid credentials with SASL mechanism
  M", never why (that would tell whether a user exists);
- `client_message="..."` (Kafka's SaslAuthenticationException) — the client sees that text.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from tmqgate.protocol.transitions import check


class AuthenticationFailed(Exception):
    """The client is not authenticated; `reason` is for the log, `client_message` (if any)
    for the client."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.client_message = client_message


class MechanismServer(Protocol):
    """One authentication exchange of one mechanism."""

    mechanism: str

    def respond(self, token: bytes) -> bytes:
        """The answer to the client's next token (raises AuthenticationFailed)."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def principal(self) -> str:
        """"User:<name>" once complete."""
        ...

    @property
    def expires_ms(self) -> int | None:
        """When the credential itself expires (epoch ms: an OAuth token's exp), or None."""
        ...


class MechanismBase:
    """What every mechanism server here shares: its state moves only as its table allows (one
    checked ``_move``), it is complete in its COMPLETE state, and its principal is the user's.
    A subclass sets ``mechanism``, ``VALID_PREVIOUS`` (``transitions.from_moves`` of its moves)
    and ``COMPLETE``, and keeps ``state`` and ``user``."""

    mechanism: str
    VALID_PREVIOUS: ClassVar[Mapping[Any, frozenset[Any]]]
    COMPLETE: ClassVar[enum.Enum]
    state: Any
    user: str

    @property
    def complete(self) -> bool:
        return self.state is self.COMPLETE

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    @property
    def expires_ms(self) -> int | None:
        return None

    def _move(self, to: enum.Enum) -> None:
        self.state = check(self.mechanism, self.VALID_PREVIOUS, self.state, to)
