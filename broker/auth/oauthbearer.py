"""OAUTHBEARER (RFC 7628), server side, with Kafka's two validators:

- unsecured tokens (Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, its default; for
  tests): a JWS with `"alg": "none"` and an empty signature; `exp` required (seconds), the
  principal claim (`sub` unless configured) required, `iat` optional;
- signed JWTs (Kafka's OAuthBearerValidatorCallbackHandler): the signature checked against a
  JWKS (`sasl_oauthbearer_jwks_endpoint_url`, an https:// URL or a file:// path, as Kafka's
  `sasl.oauthbearer.jwks.endpoint.url`), `exp`, `iat` and the principal claim required, `aud`
  checked against `expected_audience` and `iss` against `expected_issuer` when set, a clock
  skew allowed (`sasl.oauthbearer.clock.skew.seconds`, 30).

The principal is `User:<the principal claim>`; the token's `exp` bounds the session (KIP-368:
the session lifetime is min(exp - now, connections_max_reauth_ms)).

Numbers (issue 25): NaN and Infinity are not JSON, and Kafka's parser refuses a token that
holds them (invalid_token); an `exp` whose milliseconds do not fit a Kafka long (1e300,
1e400) is refused as invalid too — Kafka accepts it and then fails its session-lifetime
arithmetic, closing the connection unanswered with a WARN traceback per attempt.

Rules (Kafka's OAuthBearerSaslServer): the client's first message is
`n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]*^A`; a malformed message or a scheme other
than Bearer fails with the generic message; an invalid token is answered with the JSON error
`{"status":"invalid_token"}` and the client's next message (a lone ^A) then fails with that
JSON as the client's message; an authzid other than the principal fails with Kafka's message.

States: RECEIVE_CLIENT_FIRST -> COMPLETE | ERROR_SENT | FAILED; ERROR_SENT -> FAILED.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tmqgate.broker.auth.mechanism import AuthenticationFailed, MechanismBase
from tmqgate.protocol.transitions import from_moves

_KVSEP = "\x01"
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+))?,"
    r"\x01auth=(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)\x01"
    r"(?P<extensions>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")


@dataclass(frozen=True)
class OAuthSettings:
    """The broker's sasl_oauthbearer_* settings (Kafka's sasl.oauthbearer.* in snake_case)."""

    jwks_endpoint_url: str | None = None  # None: Kafka's unsecured-token mode
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    sub_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    clock_skew_seconds: int = 30


class InvalidToken(Exception):
    pass


def _b64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("not base64url") from None


def validate_unsecured(token: str, settings: OAuthSettings, now_s: float) -> tuple[str, int]:
    """(principal name, exp in ms) of an unsecured JWS, as Kafka's unsecured validator."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise InvalidToken("an unsecured JWS has three parts and an empty signature")
    try:
        header = _json(_b64url(parts[0]))
        claims = _json(_b64url(parts[1]))
    except ValueError:
        raise InvalidToken("header or claims are not JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "none":
        raise InvalidToken('unsecured JWS must have "alg": "none"')
    return _check_claims(claims, settings, now_s)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json(raw: bytes) -> Any:
    """JSON as Kafka's parser reads it: NaN, Infinity and -Infinity refused (Python's accepts them)."""
    return json.loads(raw, parse_constant=_not_json)


#: The largest `exp` whose milliseconds fit a Kafka long (a session lifetime in ms).
_MAX_EXP_S = (2**63 - 1) / 1000


def _check_claims(claims: Any, settings: OAuthSettings, now_s: float) -> tuple[str, int]:
    if not isinstance(claims, dict):
        raise InvalidToken("claims are not a JSON object")
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise InvalidToken("no numeric exp claim")
    if not (math.isfinite(exp) and abs(exp) < _MAX_EXP_S):  # 1e400 parses as inf
        raise InvalidToken("exp claim out of range")
    if exp + settings.clock_skew_seconds < now_s:
        raise InvalidToken("token expired")
    sub = claims.get(settings.sub_claim_name)
    if not isinstance(sub, str) or not sub.strip():
        raise InvalidToken(f"no {settings.sub_claim_name!r} claim")
    return sub, int(exp * 1000)


class JwksValidator:
    """Signed JWTs against a JWKS (PyJWT): file:// read once at start, https:// through
    PyJWKClient (which caches the keys and refetches on an unknown kid)."""

    def __init__(self, settings: OAuthSettings) -> None:
        import jwt

        self._jwt = jwt
        self.settings = settings
        url = settings.jwks_endpoint_url or ""
        self._client: Any = None
        self._keys: dict[str | None, Any] = {}
        if url.startswith("file:"):
            path = url[len("file://"):] if url.startswith("file://") else url[len("file:"):]
            with open(path, encoding="utf-8") as fh:
                keyset = jwt.PyJWKSet.from_json(fh.read())
            self._keys = {k.key_id: k for k in keyset.keys}
        else:
            self._client = jwt.PyJWKClient(url)

    def __call__(self, token: str, now_s: float) -> tuple[str, int]:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
            if self._client is not None:
                key = self._client.get_signing_key_from_jwt(token)
            else:
                kid = header.get("kid")
                key = (self._keys.get(kid) if kid is not None or len(self._keys) != 1
                       else next(iter(self._keys.values())))
                if key is None:
                    raise InvalidToken(f"no key {kid!r} in the JWKS")
            s = self.settings
            claims = jwt.decode(
                token, key=key, algorithms=[header.get("alg", "")] if header.get("alg") != "none" else [],
                audience=list(s.expected_audience) or None, issuer=s.expected_issuer,
                leeway=s.clock_skew_seconds,
                options={"require": ["exp", "iat"], "verify_aud": bool(s.expected_audience)})
        except jwt.PyJWTError as exc:
            raise InvalidToken(str(exc)) from None
        except (OverflowError, ValueError, TypeError) as exc:  # PyJWT's int() of an infinite exp/iat/nbf
            raise InvalidToken(f"bad numeric claim: {exc}") from None
        return _check_claims(claims, s, now_s)


Validator = Callable[[str, float], tuple[str, int]]  # (token, now s) -> (principal, exp ms)


def make_validator(settings: OAuthSettings) -> Validator:
    if settings.jwks_endpoint_url:
        return JwksValidator(settings)
    return lambda token, now_s: validate_unsecured(token, settings, now_s)


class State(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive client-first"
    ERROR_SENT = "error sent"
    COMPLETE = "complete"
    FAILED = "failed"


_MOVES: dict[State, frozenset[State]] = {
    State.RECEIVE_CLIENT_FIRST: frozenset({State.COMPLETE, State.ERROR_SENT, State.FAILED}),
    State.ERROR_SENT: frozenset({State.FAILED}),
    State.COMPLETE: frozenset(),
    State.FAILED: frozenset(),
}


@dataclass
class OAuthBearerServer(MechanismBase):
    VALID_PREVIOUS = from_moves(_MOVES)
    COMPLETE = State.COMPLETE

    validator: Validator
    clock: Callable[[], float] = time.time
    mechanism: str = "OAUTHBEARER"
    state: State = State.RECEIVE_CLIENT_FIRST
    user: str = ""
    _expires_ms: int | None = None
    _error: str = field(default="")

    @property
    def expires_ms(self) -> int | None:
        return self._expires_ms

    def respond(self, token: bytes) -> bytes:
        if self.state is State.ERROR_SENT and token == _KVSEP.encode():
            self._move(State.FAILED)
            raise AuthenticationFailed("invalid token", self._error)
        if self.state is not State.RECEIVE_CLIENT_FIRST:
            self._move(State.FAILED)
            raise AuthenticationFailed(f"unexpected OAUTHBEARER message in state {self.state.value}")
        m = _CLIENT_FIRST.fullmatch(token.decode("utf-8", errors="replace"))
        if m is None:
            self._move(State.FAILED)
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        if m["scheme"].lower() != "bearer":
            self._move(State.FAILED)
            raise AuthenticationFailed(f"Invalid scheme in OAUTHBEARER client first message: {m['scheme']}")
        try:
            name, exp_ms = self.validator(m["token"], self.clock())
        except InvalidToken as exc:
            self._error = '{"status":"invalid_token"}'
            self._move(State.ERROR_SENT)
            self.reason = str(exc)
            return self._error.encode()
        authzid = m["authzid"]
        if authzid and authzid != name:
            self._move(State.FAILED)
            raise AuthenticationFailed(
                "authzid differs", f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({name})")
        self.user = name
        self._expires_ms = exp_ms
        self._move(State.COMPLETE)
        return b""
