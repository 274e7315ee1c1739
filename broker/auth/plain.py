"""PLAIN (RFC 4616), server side, checked against the users' SCRAM credentials: the password
is derived with the stored salt and iterations and compared with StoredKey in constant time
(`scram.password_matches`), so PLAIN needs no password store of its own.

Rules (Kafka's PlainSaslServer): the message is `[authzid] NUL authcid NUL passwd`; not three
parts, an empty user or an empty password fail with the generic message; a wrong password or
an unknown user fail with "Authentication failed: Invalid username or password" (the client
sees it; an unknown user costs the same derivation as a known one); an authzid other than the
user fails with Kafka's message. The user's SCRAM-SHA-512 credential is used if it has one,
else its SCRAM-SHA-256 one.

States: RECEIVE_RESPONSE -> COMPLETE | FAILED (one message, one answer: empty).
"""

from __future__ import annotations

import enum

from tmqgate.broker.auth import scram
from tmqgate.broker.auth.mechanism import AuthenticationFailed
from tmqgate.storage import ScramCredential

INVALID = "Authentication failed: Invalid username or password"
#: Checked when the user is unknown, so that answering takes as long as for a known user.
_DUMMY = ScramCredential(b"\0" * 32, scram.DEFAULT_ITERATIONS, b"\0" * 64, b"\0" * 64)


class State(enum.Enum):
    RECEIVE_RESPONSE = "receive response"
    COMPLETE = "complete"
    FAILED = "failed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.RECEIVE_RESPONSE: frozenset({State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset(),
    State.FAILED: frozenset(),
}


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, lookup: scram.Lookup) -> None:
        self._lookup = lookup
        self.state = State.RECEIVE_RESPONSE
        self.user = ""

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    @property
    def expires_ms(self) -> int | None:
        return None

    def _move(self, to: State) -> None:
        if to not in TRANSITIONS[self.state]:
            raise scram.IllegalTransition(f"PLAIN: {self.state.value} -> {to.value}")
        self.state = to

    def respond(self, token: bytes) -> bytes:
        if self.state is not State.RECEIVE_RESPONSE:
            raise AuthenticationFailed(f"unexpected PLAIN message in state {self.state.value}")
        try:
            self._check(token)
        except AuthenticationFailed:
            self._move(State.FAILED)
            raise
        self._move(State.COMPLETE)
        return b""

    def _check(self, token: bytes) -> None:
        parts = token.decode("utf-8", errors="replace").split("\0", 2)
        if len(parts) != 3:
            raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if verify_password(self._lookup, user, password) is None:
            raise AuthenticationFailed(f"invalid password or unknown user {user!r}", INVALID)
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "authzid differs from user",
                "Authentication failed: Client requested an authorization id that is different from username")
        self.user = user


def verify_password(lookup: scram.Lookup, user: str, password: str) -> str | None:
    """The mechanism whose credential `password` matches for `user`, or None (a wrong
    password or an unknown user, in about the same time). HTTP Basic auth uses it too."""
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        credential = lookup(user, mechanism)
        if credential is not None:
            return mechanism if scram.password_matches(mechanism, credential, password) else None
    scram.password_matches("SCRAM-SHA-512", _DUMMY, password)
    return None
