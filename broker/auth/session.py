"""A connection's SASL authentication, as Kafka's SaslServerAuthenticator and SocketServer
run it, sans-IO: the server hands each parsed request to `Session.on_request` and does what
the returned `Step` says (pass it to its handler, send the session's answer, close).

Rules (Kafka's):
- before authentication only ApiVersions and SaslHandshake are served; anything else closes
  the connection without an answer ("Unexpected Kafka request of type X during SASL
  handshake": a client speaking PLAINTEXT to a SASL listener);
- SaslHandshake names a mechanism: an enabled one is answered NONE with the enabled list,
  another UNSUPPORTED_SASL_MECHANISM with the list, and the connection is closed;
- then only SaslAuthenticate: any other request is answered ILLEGAL_SASL_STATE ("Unexpected
  Kafka request of type X during SASL authentication.") and the connection closed;
- a failed authentication is answered SASL_AUTHENTICATION_FAILED with the mechanism's own
  message where Kafka gives one, else "Authentication failed during authentication due to
  invalid credentials with SASL mechanism M", and the connection is closed; every such
  failure (a refused mechanism and a request out of turn too) is answered only after
  connection_failed_authentication_delay_ms, as Kafka delays it;
- success sets the connection's principal (`current_client`) and answers the session
  lifetime (SaslAuthenticate v1+): min(the credential's expiry - now,
  connections_max_reauth_ms), either one alone if the other is unset, 0 if neither;
- KIP-368: an authenticated client that used SaslAuthenticate v1+ re-authenticates with a
  new SaslHandshake (same mechanism, same principal, else it fails and is closed); a
  connection whose session has expired is closed at its next other request;
- SaslHandshake v0 (before KIP-152): the frames that follow are the mechanism's raw tokens and
  so are the answers (`on_token`); a failure closes the connection without an answer;
- once authenticated, SaslHandshake (when no re-authentication can start) and
  SaslAuthenticate go to their handlers (ILLEGAL_SASL_STATE, as KafkaApis answers).

States and the requests each takes (`ALLOWED`), moves in `_MOVES`, one checked `_move`:
HANDSHAKE_OR_VERSIONS -> HANDSHAKE | AUTHENTICATE | FAILED; HANDSHAKE -> AUTHENTICATE | FAILED;
AUTHENTICATE -> AUTHENTICATE | COMPLETE | FAILED; COMPLETE -> REAUTHENTICATE;
REAUTHENTICATE -> REAUTHENTICATE | COMPLETE | FAILED; FAILED is final.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.broker.apis import ApiKey
from tmqgate.broker.auth import scram
from tmqgate.broker.auth.mechanism import AuthenticationFailed, MechanismServer
from tmqgate.broker.auth.oauthbearer import OAuthBearerServer, OAuthSettings, make_validator
from tmqgate.broker.auth.plain import PlainServer
from tmqgate.broker.identity.client import ClientInfo
from tmqgate.broker.ratelimit import RateLimitedLog
from tmqgate.protocol.error_response import error_response
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.messages import Request
from tmqgate.protocol.transitions import check, from_moves

if TYPE_CHECKING:
    from tmqgate.broker.configs.config import BrokerConfig
    from tmqgate.storage import Store

log = logging.getLogger("tmqgate.auth")

SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER")
#: Kafka's sasl.server.max.receive.size: the largest frame a connection may send before it is
#: authenticated (a larger one closes it, as Kafka's "invalid receive size").
SASL_MAX_RECEIVE_SIZE = 524_288


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    REAUTHENTICATE = "re-authenticate"
    FAILED = "failed"


_ANY = None  # every request
ALLOWED: dict[State, frozenset[int] | None] = {
    State.HANDSHAKE_OR_VERSIONS: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    State.HANDSHAKE: frozenset({ApiKey.SASL_HANDSHAKE}),
    State.AUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    State.COMPLETE: _ANY,
    State.REAUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    State.FAILED: frozenset(),
}

_MOVES: dict[State, frozenset[State]] = {
    State.HANDSHAKE_OR_VERSIONS: frozenset({State.HANDSHAKE, State.AUTHENTICATE, State.FAILED}),
    State.HANDSHAKE: frozenset({State.AUTHENTICATE, State.FAILED}),
    State.AUTHENTICATE: frozenset({State.AUTHENTICATE, State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset({State.REAUTHENTICATE}),
    State.REAUTHENTICATE: frozenset({State.REAUTHENTICATE, State.COMPLETE, State.FAILED}),
    State.FAILED: frozenset(),
}
_VALID_PREVIOUS = from_moves(_MOVES)


class Action(enum.Enum):
    PASS = "pass"  # the request goes to its handler
    ANSWER = "answer"  # send `body`, keep the connection
    ANSWER_AND_CLOSE = "answer and close"  # send `body`, then close
    CLOSE = "close"  # close without an answer


@dataclass(frozen=True)
class Step:
    action: Action
    body: dict[str, Any] | None = None


PASS = Step(Action.PASS)
CLOSE = Step(Action.CLOSE)


def authenticator(config: BrokerConfig, store: Store, limited_log: RateLimitedLog | None = None) -> Authenticator:
    """The broker's Authenticator from its settings, over the store's SCRAM credentials."""
    oauth = OAuthSettings(
        jwks_endpoint_url=config.sasl_oauthbearer_jwks_endpoint_url,
        expected_audience=tuple(config.sasl_oauthbearer_expected_audience),
        expected_issuer=config.sasl_oauthbearer_expected_issuer,
        sub_claim_name=config.sasl_oauthbearer_sub_claim_name,
        scope_claim_name=config.sasl_oauthbearer_scope_claim_name,
        clock_skew_seconds=config.sasl_oauthbearer_clock_skew_seconds)
    if "OAUTHBEARER" in config.sasl_enabled_mechanisms and not oauth.jwks_endpoint_url:
        log.warning("OAUTHBEARER takes unsecured tokens (alg none; Kafka's default validator): "
                    "set sasl_oauthbearer_jwks_endpoint_url to require signed tokens")
    return Authenticator(config.sasl_enabled_mechanisms, store.users.scram,
                         max_reauth_ms=config.connections_max_reauth_ms, oauth=oauth, limited_log=limited_log,
                         failed_delay_ms=config.connection_failed_authentication_delay_ms)


class Authenticator:
    """The broker's SASL settings and credential source; makes a `Session` per connection."""

    def __init__(self, enabled: Sequence[str], lookup: scram.Lookup, *, max_reauth_ms: int = 0,
                 oauth: OAuthSettings | None = None, clock: Callable[[], float] = time.time,
                 limited_log: RateLimitedLog | None = None,
                 run: Callable[..., Awaitable[Any]] = asyncio.to_thread, failed_delay_ms: int = 0,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        unknown = [m for m in enabled if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"sasl_enabled_mechanisms: {', '.join(unknown)} not supported "
                             f"(supported: {', '.join(MECHANISMS)})")
        if not enabled:
            raise ValueError("No SASL mechanisms are enabled")
        self.enabled = list(enabled)
        self.lookup = lookup
        self.max_reauth_ms = max_reauth_ms
        self.clock = clock
        self.run = run  # where a mechanism's CPU-heavy step runs (PLAIN's key derivation)
        self.failed_delay_ms = failed_delay_ms
        self.sleep = sleep
        # failed authentications are logged as Kafka does (INFO), at most so many per interval
        self.limited_log = limited_log or RateLimitedLog(log)
        # failed authentications per listener since start (GET /metrics reads it)
        self.failures: dict[str, int] = {}
        self._oauth_validator = make_validator(oauth or OAuthSettings()) if "OAUTHBEARER" in enabled else None

    def mechanism(self, name: str) -> MechanismServer:
        if name in scram.HASHES:
            return scram.ScramServer(name, self.lookup)
        if name == "PLAIN":
            return PlainServer(self.lookup)
        assert self._oauth_validator is not None
        return OAuthBearerServer(self._oauth_validator, self.clock)

    def session(self, client: ClientInfo) -> Session | None:
        """The authentication of a new connection; None where it needs none (PLAINTEXT, SSL)."""
        if client.security_protocol not in SASL_PROTOCOLS:
            return None
        return Session(self, client)


class Session:
    """One connection's authentication (see the module docstring)."""

    def __init__(self, authenticator: Authenticator, client: ClientInfo) -> None:
        self.auth = authenticator
        self.client = client
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: MechanismServer | None = None
        self.mechanism_name = ""
        self.principal: str | None = None
        self.expires_ms: int | None = None  # session end (epoch ms), None = never
        self.supports_reauth = False
        self.raw_tokens = False  # after a SaslHandshake v0: frames are raw SASL tokens (on_token)
        self._reauth_bad_mechanism: str | None = None

    def _move(self, to: State) -> None:
        self.state = check("SASL session", _VALID_PREVIOUS, self.state, to)

    @property
    def authenticated(self) -> bool:
        """Its requests pass to the handlers (their frames are served from the request pool)."""
        return self.state is State.COMPLETE

    @property
    def ever_authenticated(self) -> bool:
        """Past its first authentication (the authentication deadline no longer applies)."""
        return self.principal is not None

    def max_frame(self, authenticated_limit: int) -> int:
        """The largest frame the connection may send now (Kafka bounds unauthenticated ones)."""
        if self.state is State.COMPLETE:
            return authenticated_limit
        return min(authenticated_limit, SASL_MAX_RECEIVE_SIZE)

    @property
    def _text(self) -> str:
        return "re-authentication" if self.state is State.REAUTHENTICATE else "authentication"

    async def on_request(self, request: Request) -> Step:
        step = await self._step(request)
        if step.action is Action.ANSWER_AND_CLOSE and self.auth.failed_delay_ms > 0:
            # connection.failed.authentication.delay.ms: the failure is answered (and the
            # connection closed) only after this delay, which slows password guessing
            await self.auth.sleep(self.auth.failed_delay_ms / 1000)
        return step

    async def _step(self, request: Request) -> Step:
        key = request.api_key
        allowed = ALLOWED[self.state]
        if self.state is State.COMPLETE:
            if key == ApiKey.SASL_HANDSHAKE and self.supports_reauth:
                self._move(State.REAUTHENTICATE)
                return self._handshake(request)
            if self.expires_ms is not None and self.auth.clock() * 1000 > self.expires_ms:
                self.auth.limited_log.log(logging.INFO, "authentication", "closing %s:%d: its SASL session "
                                          "expired (%s)", self.client.host, self.client.port, self.principal)
                return CLOSE
            return PASS
        if allowed is not None and key not in allowed:
            if self.state in (State.AUTHENTICATE, State.REAUTHENTICATE):
                name = ApiKey(key).name if key in ApiKey._value2member_map_ else str(key)
                self._move(State.FAILED)
                return Step(Action.ANSWER_AND_CLOSE, error_response(
                    key, request.api_version, request.body, ErrorCode.ILLEGAL_SASL_STATE,
                    f"Unexpected Kafka request of type {name} during SASL authentication."))
            self.state = State.FAILED
            return CLOSE
        if key == ApiKey.API_VERSIONS:
            self._move(State.HANDSHAKE)
            return PASS
        if key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(request)
        return await self._authenticate(request)

    def _handshake(self, request: Request) -> Step:
        name = request.body.get("mechanism", "")
        body = {"error_code": 0, "mechanisms": list(self.auth.enabled)}
        if name not in self.auth.enabled:
            self.state = State.FAILED
            body["error_code"] = int(ErrorCode.UNSUPPORTED_SASL_MECHANISM)
            return Step(Action.ANSWER_AND_CLOSE, body)
        if request.api_version < 1 and self.state is not State.REAUTHENTICATE:
            self.raw_tokens = True  # v0: raw SASL tokens follow, not SaslAuthenticate (on_token)
        if self.state is State.REAUTHENTICATE:
            self._reauth_bad_mechanism = None if name == self.mechanism_name else (
                f"SASL mechanism '{name}' requested by client is not supported for re-authentication "
                f"of mechanism '{self.mechanism_name}'")
        else:
            self._move(State.AUTHENTICATE)
            self.mechanism_name = name
        self.mechanism = self.auth.mechanism(name)
        return Step(Action.ANSWER, body)

    async def _authenticate(self, request: Request) -> Step:
        if request.api_version > 0:
            self.supports_reauth = True
        try:
            answer, principal = await self._respond(bytes(request.body.get("auth_bytes") or b""))
        except AuthenticationFailed as exc:
            return Step(Action.ANSWER_AND_CLOSE, {"error_code": int(ErrorCode.SASL_AUTHENTICATION_FAILED),
                                                  "error_message": self._failed(exc), "auth_bytes": b""})
        lifetime = 0
        if principal is not None:
            lifetime = self._complete(principal)
        return Step(Action.ANSWER, {"error_code": 0, "error_message": "", "auth_bytes": answer,
                                    "session_lifetime_ms": lifetime})

    async def on_token(self, token: bytes) -> bytes | None:
        """SaslHandshake v0: the frames after the handshake are the mechanism's raw tokens, and
        so are the answers; None = failed (Kafka closes without an answer, after the delay)."""
        try:
            answer, principal = await self._respond(token)
        except AuthenticationFailed as exc:
            self._failed(exc)
            if self.auth.failed_delay_ms > 0:
                await self.auth.sleep(self.auth.failed_delay_ms / 1000)
            return None
        if principal is not None:
            self._complete(principal)
            self.raw_tokens = False
        return answer

    async def _respond(self, token: bytes) -> tuple[bytes, str | None]:
        """The mechanism's answer to `token`, and the principal once it is complete."""
        assert self.mechanism is not None
        if self._reauth_bad_mechanism is not None:
            raise AuthenticationFailed("re-authentication with another mechanism", self._reauth_bad_mechanism)
        respond_async = getattr(self.mechanism, "respond_async", None)  # PLAIN: PBKDF2 off the loop
        answer = (await respond_async(token, self.auth.run) if respond_async is not None
                  else self.mechanism.respond(token))
        principal = self.mechanism.principal if self.mechanism.complete else None
        if principal is not None and self.state is State.REAUTHENTICATE and principal != self.principal:
            old, new = (self.principal or "").replace(":", ".", 1), principal.replace(":", ".", 1)
            raise AuthenticationFailed("principal changed", f"Cannot change principals during "
                                       f"re-authentication from {old}: {new}")
        return answer, principal

    def _failed(self, exc: AuthenticationFailed) -> str:
        """Log a failure, fail the session; the message the client is told."""
        message = exc.client_message or (f"Authentication failed during {self._text} due to invalid "
                                         f"credentials with SASL mechanism {self.mechanism_name}")
        self.auth.limited_log.log(logging.INFO, "authentication", "failed %s of %s:%d with SASL mechanism "
                                  "%s: %s", self._text, self.client.host, self.client.port,
                                  self.mechanism_name, exc.reason)
        self.state = State.FAILED
        failures = self.auth.failures
        failures[self.client.listener] = failures.get(self.client.listener, 0) + 1
        return message

    def _complete(self, principal: str) -> int:
        """Authenticated: the principal is the connection's; the session lifetime (ms) to send."""
        assert self.mechanism is not None
        now_ms = int(self.auth.clock() * 1000)
        credential_ms = self.mechanism.expires_ms
        max_ms = self.auth.max_reauth_ms
        lifetime = 0
        self.expires_ms = None
        if credential_ms is not None or max_ms > 0:
            if credential_ms is None:
                lifetime = max_ms
            elif max_ms <= 0:
                lifetime = max(0, credential_ms - now_ms)
            else:
                lifetime = max(0, min(credential_ms - now_ms, max_ms))
            self.expires_ms = now_ms + lifetime
        self._move(State.COMPLETE)
        self.principal = principal
        self.client.principal = principal
        self.mechanism = None
        return lifetime
