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
import hmac
import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from tmqgate.broker.auth import scram
from tmqgate.broker.auth.mechanism import AuthenticationFailed, MechanismBase
from tmqgate.protocol.transitions import from_moves
from tmqgate.storage import ScramCredential

INVALID = "Authentication failed: Invalid username or password"
#: Checked when the user is unknown, so that answering takes as long as for a known user.
_DUMMY = ScramCredential(b"\0" * 32, scram.DEFAULT_ITERATIONS, b"\0" * 64, b"\0" * 64)


class State(enum.Enum):
    RECEIVE_RESPONSE = "receive response"
    COMPLETE = "complete"
    FAILED = "failed"


_MOVES: dict[State, frozenset[State]] = {
    State.RECEIVE_RESPONSE: frozenset({State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset(),
    State.FAILED: frozenset(),
}


class PlainServer(MechanismBase):
    mechanism = "PLAIN"
    VALID_PREVIOUS = from_moves(_MOVES)
    COMPLETE = State.COMPLETE

    def __init__(self, lookup: scram.Lookup) -> None:
        self._lookup = lookup
        self.state = State.RECEIVE_RESPONSE
        self.user = ""

    def respond(self, token: bytes) -> bytes:
        """The whole check on the calling thread (tests, tools)."""
        authzid, user, password = self._parse(token)
        return self._finish(verify_password(self._lookup, user, password), authzid, user)

    async def respond_async(self, token: bytes, run: Runner) -> bytes:
        """The same, with the key derivation (PBKDF2: 4-40 ms of CPU) handed to `run` (the
        session passes asyncio.to_thread, so the event loop serves others meanwhile); the
        credential is looked up on the caller's thread."""
        authzid, user, password = self._parse(token)
        found = credential_for(self._lookup, user)
        return self._finish(await run(matches, user, found, password), authzid, user)

    def _parse(self, token: bytes) -> tuple[str, str, str]:
        if self.state is not State.RECEIVE_RESPONSE:
            raise AuthenticationFailed(f"unexpected PLAIN message in state {self.state.value}")
        parts = token.decode("utf-8", errors="replace").split("\0", 2)
        problem = None
        if len(parts) != 3:
            problem = f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}"
        elif not parts[1]:
            problem = "Authentication failed: username not specified"
        elif not parts[2]:
            problem = "Authentication failed: password not specified"
        if problem is not None:
            self._move(State.FAILED)
            raise AuthenticationFailed(problem)
        return parts[0], parts[1], parts[2]

    def _finish(self, ok: bool, authzid: str, user: str) -> bytes:
        if not ok:
            self._move(State.FAILED)
            raise AuthenticationFailed(f"invalid password or unknown user {user!r}", INVALID)
        if authzid and authzid != user:
            self._move(State.FAILED)
            raise AuthenticationFailed(
                "authzid differs from user",
                "Authentication failed: Client requested an authorization id that is different from username")
        self.user = user
        self._move(State.COMPLETE)
        return b""


Runner = Callable[..., Awaitable[Any]]  # runs a function elsewhere, e.g. asyncio.to_thread
Found = tuple[str, ScramCredential] | None

# Passwords already checked against a credential: HMAC(process key, user, mechanism, StoredKey,
# password), so a changed credential never matches an old entry and no password is kept.
_CACHE_KEY = secrets.token_bytes(32)
_VERIFIED: OrderedDict[bytes, None] = OrderedDict()
_VERIFIED_MAX = 1024
_LOCK = threading.Lock()


def credential_for(lookup: scram.Lookup, user: str) -> Found:
    """The user's credential PLAIN and HTTP Basic check: SCRAM-SHA-512's, else SCRAM-SHA-256's."""
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        credential = lookup(user, mechanism)
        if credential is not None:
            return mechanism, credential
    return None


def matches(user: str, found: Found, password: str) -> bool:
    """Whether `password` derives `found`'s StoredKey (CPU only: safe off the event loop). An
    unknown user costs the same derivation; a password once verified is remembered (above)."""
    mechanism, credential = found if found is not None else ("SCRAM-SHA-512", _DUMMY)
    key = hmac.new(_CACHE_KEY, b"\0".join((user.encode(), mechanism.encode(), credential.stored_key,
                                           password.encode())), "sha256").digest()
    with _LOCK:
        if found is not None and key in _VERIFIED:
            _VERIFIED.move_to_end(key)
            return True
    ok = scram.password_matches(mechanism, credential, password) and found is not None
    if ok:
        with _LOCK:
            _VERIFIED[key] = None
            while len(_VERIFIED) > _VERIFIED_MAX:
                _VERIFIED.popitem(last=False)
    return ok


def verify_password(lookup: scram.Lookup, user: str, password: str) -> bool:
    """Whether `password` is `user`'s (False for an unknown user, in about the same time)."""
    return matches(user, credential_for(lookup, user), password)


async def verify_password_async(lookup: scram.Lookup, user: str, password: str, run: Runner) -> bool:
    """`verify_password` with the derivation handed to `run` (HTTP Basic auth uses it)."""
    return bool(await run(matches, user, credential_for(lookup, user), password))
