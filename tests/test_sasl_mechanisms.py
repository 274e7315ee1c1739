"""SASL mechanisms against the RFC test vectors and an independent client (kafka-python's
SCRAM client), and a connection's authentication session, all sans-IO (no sockets)."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest
from kafka.net.sasl.scram import ScramClient

from tmqgate.broker.apis import ApiKey
from tmqgate.broker.auth import scram
from tmqgate.broker.auth.mechanism import AuthenticationFailed
from tmqgate.broker.auth.oauthbearer import OAuthBearerServer, OAuthSettings, make_validator
from tmqgate.broker.auth.plain import PlainServer
from tmqgate.broker.auth.session import Action, Authenticator, State
from tmqgate.broker.identity.client import ClientInfo
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.messages import Request
from tmqgate.storage import ScramCredential

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC7677_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class Users:
    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {}

    def add(self, user: str, password: str, mechanism: str, iterations: int = 4096, salt: bytes | None = None) -> None:
        self.creds[(user, mechanism)] = scram.make_credential(mechanism, password, iterations, salt)

    def __call__(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.creds.get((user, mechanism))


def test_rfc7677_vector() -> None:
    users = Users()
    users.add("user", "pencil", "SCRAM-SHA-256", 4096, RFC7677_SALT)
    server = scram.ScramServer("SCRAM-SHA-256", users, nonce=lambda: RFC7677_SERVER_NONCE)
    assert server.respond(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.respond(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.complete and server.principal == "User:user"


def test_rfc5802_key_derivation() -> None:
    # RFC 5802 section 5 (SHA-1): SaltedPassword of "pencil" with its salt and 4096 iterations,
    # the proof and the server signature follow from the keys computed here.
    import hashlib
    import hmac
    salt = base64.b64decode("QSXCR+Q6sek8bf92")
    salted = hashlib.pbkdf2_hmac("sha1", b"pencil", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha1").digest()
    auth = (b"n=user,r=fyko+d2lbbFgONRv9qkxdawL,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
            b"s=QSXCR+Q6sek8bf92,i=4096,c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j")
    sig = hmac.new(hashlib.sha1(client_key).digest(), auth, "sha1").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
    assert base64.b64encode(proof) == b"v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    server_key = hmac.new(salted, b"Server Key", "sha1").digest()
    assert base64.b64encode(hmac.new(server_key, auth, "sha1").digest()) == b"rmF9pqV8S7suAoZWja4dJRkFsKQ="


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_kafka_python_client(mechanism: str) -> None:
    users = Users()
    users.add("alice", "alice-secret", mechanism, 8192)
    client = ScramClient("alice", "alice-secret", mechanism)
    server = scram.ScramServer(mechanism, users)
    client.process_server_first_message(server.respond(client.first_message()))
    client.process_server_final_message(server.respond(client.final_message()))  # checks v=
    assert server.complete and server.principal == "User:alice"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_scram_wrong_password_or_unknown_user_fails_generically(user: str, password: str) -> None:
    users = Users()
    users.add("alice", "alice-secret", "SCRAM-SHA-512")
    client = ScramClient(user, password, "SCRAM-SHA-512")
    server = scram.ScramServer("SCRAM-SHA-512", users)
    with pytest.raises(AuthenticationFailed) as exc:
        client.process_server_first_message(server.respond(client.first_message()))
        server.respond(client.final_message())
    assert exc.value.client_message is None  # the session sends Kafka's generic message
    assert server.state is scram.State.FAILED


def test_scram_rejects_bad_nonce_channel_binding_and_low_iterations() -> None:
    users = Users()
    users.add("alice", "s", "SCRAM-SHA-256")
    server = scram.ScramServer("SCRAM-SHA-256", users, nonce=lambda: "X")
    server.respond(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.respond(b"c=biws,r=abcY,p=AAAA")
    server = scram.ScramServer("SCRAM-SHA-256", users, nonce=lambda: "X")
    server.respond(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="channel binding"):
        server.respond(b"c=eSws,r=abcX,p=AAAA")
    for first in (b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n=alice,r=abc"):
        with pytest.raises(AuthenticationFailed, match="format"):
            scram.ScramServer("SCRAM-SHA-256", users).respond(first)
    users.creds[("bob", "SCRAM-SHA-256")] = scram.credential_from_salted("SCRAM-SHA-256", b"k" * 32, b"s", 1000)
    with pytest.raises(AuthenticationFailed, match="less than the minimum 4096"):
        scram.ScramServer("SCRAM-SHA-256", users).respond(b"n,,n=bob,r=abc")
    failed = AuthenticationFailed("")
    with pytest.raises(AuthenticationFailed) as exc:
        scram.ScramServer("SCRAM-SHA-256", users).respond(b"n,a=bob,n=alice,r=abc")
    failed = exc.value
    assert failed.client_message == ("Authentication failed: Client requested an authorization id that "
                                     "is different from username")


def test_scram_saslname_escapes() -> None:
    users = Users()
    users.add("a,b=c", "pw", "SCRAM-SHA-256")
    client = ScramClient("a=2Cb=3Dc", "pw", "SCRAM-SHA-256")
    server = scram.ScramServer("SCRAM-SHA-256", users)
    client.process_server_first_message(server.respond(client.first_message()))
    server.respond(client.final_message())
    assert server.principal == "User:a,b=c"


def test_iterations_bounds() -> None:
    for bad in (4095, 16385):
        with pytest.raises(ValueError):
            scram.make_credential("SCRAM-SHA-512", "pw", bad)
    cred = scram.make_credential("SCRAM-SHA-512", "pw", 16384)
    assert cred.iterations == 16384 and len(cred.salt) == 32 and len(cred.stored_key) == 64


def test_plain_against_scram_credentials() -> None:
    users = Users()
    users.add("alice", "alice-secret", "SCRAM-SHA-512")
    users.add("bob", "bob-secret", "SCRAM-SHA-256")
    for user, pw in (("alice", "alice-secret"), ("bob", "bob-secret")):
        server = PlainServer(users)
        assert server.respond(f"\0{user}\0{pw}".encode()) == b""
        assert server.principal == f"User:{user}"
    for token in (b"\0alice\0wrong", b"\0mallory\0alice-secret"):
        with pytest.raises(AuthenticationFailed) as exc:
            PlainServer(users).respond(token)
        assert exc.value.client_message == "Authentication failed: Invalid username or password"
    with pytest.raises(AuthenticationFailed) as exc:
        PlainServer(users).respond(b"alice")
    assert exc.value.client_message is None and "expected 3 tokens, got 1" in exc.value.reason
    with pytest.raises(AuthenticationFailed) as exc:
        PlainServer(users).respond(b"bob\0alice\0alice-secret")
    assert "authorization id" in (exc.value.client_message or "")


def _unsecured(claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc(claims)}."


def _oauth_message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured() -> None:
    now = time.time()
    server = OAuthBearerServer(make_validator(OAuthSettings()), clock=lambda: now)
    assert server.respond(_oauth_message(_unsecured({"sub": "alice", "exp": now + 60, "iat": now}))) == b""
    assert server.principal == "User:alice" and server.expires_ms == int((now + 60) * 1000)
    for claims in ({"sub": "alice", "exp": now - 120}, {"exp": now + 60}):
        server = OAuthBearerServer(make_validator(OAuthSettings()), clock=lambda: now)
        assert server.respond(_oauth_message(_unsecured(claims))) == b'{"status":"invalid_token"}'
        with pytest.raises(AuthenticationFailed) as exc:
            server.respond(b"\x01")
        assert exc.value.client_message == '{"status":"invalid_token"}'
    with pytest.raises(AuthenticationFailed, match="Invalid OAUTHBEARER client first message"):
        OAuthBearerServer(make_validator(OAuthSettings())).respond(b"n,,auth=Bearer x")


def test_oauthbearer_signed_jwt_against_jwks_file(tmp_path) -> None:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", use="sig", alg="RS256")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    settings = OAuthSettings(jwks_endpoint_url=f"file://{path}", expected_audience=("kafka",),
                             expected_issuer="https://issuer.test")
    now = time.time()
    good = {"sub": "alice", "exp": int(now) + 300, "iat": int(now), "aud": "kafka", "iss": "https://issuer.test"}

    def attempt(signing_key, claims) -> bytes:
        token = jwt.encode(claims, signing_key, algorithm="RS256", headers={"kid": "k1"})
        return OAuthBearerServer(make_validator(settings)).respond(_oauth_message(token))

    server = OAuthBearerServer(make_validator(settings))
    assert server.respond(_oauth_message(jwt.encode(good, key, algorithm="RS256", headers={"kid": "k1"}))) == b""
    assert server.principal == "User:alice"
    invalid = b'{"status":"invalid_token"}'
    assert attempt(other, good) == invalid  # not signed by the JWKS' key
    assert attempt(key, {**good, "aud": "other"}) == invalid
    assert attempt(key, {**good, "iss": "https://evil.test"}) == invalid
    assert attempt(key, {**good, "exp": int(now) - 3600}) == invalid
    assert attempt(key, {k: v for k, v in good.items() if k != "iat"}) == invalid  # Kafka requires iat
    assert OAuthBearerServer(make_validator(settings)).respond(
        _oauth_message(_unsecured(good))) == invalid  # alg none refused when signed tokens are required


# the session ------------------------------------------------------------------------------------


def _on(session, request: Request):
    return asyncio.run(session.on_request(request))


def _req(key: ApiKey, version: int, body: dict) -> Request:
    return Request(int(key), version, 7, "test", body)


def _session(clock=time.time, max_reauth_ms: int = 0, enabled=("SCRAM-SHA-512", "PLAIN")):
    users = Users()
    users.add("alice", "alice-secret", "SCRAM-SHA-512")
    users.add("bob", "bob-secret", "SCRAM-SHA-512")
    client = ClientInfo("127.0.0.1", 5555, listener="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
    auth = Authenticator(list(enabled), users, max_reauth_ms=max_reauth_ms, clock=clock)
    session = auth.session(client)
    assert session is not None
    return session, client


def _plain(session, user: str, password: str, version: int = 2):
    step = _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert step.action is Action.ANSWER and step.body["error_code"] == 0
    return _on(session, _req(ApiKey.SASL_AUTHENTICATE, version,
                                   {"auth_bytes": f"\0{user}\0{password}".encode()}))


def test_session_before_authentication_only_versions_and_handshake() -> None:
    session, client = _session()
    assert _on(session, _req(ApiKey.API_VERSIONS, 3, {})).action is Action.PASS
    assert _on(session, _req(ApiKey.METADATA, 12, {"topics": None})).action is Action.CLOSE
    assert client.principal == "User:ANONYMOUS"


def test_session_unsupported_mechanism() -> None:
    session, _ = _session()
    step = _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
    assert step.action is Action.ANSWER_AND_CLOSE
    assert step.body == {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": ["SCRAM-SHA-512", "PLAIN"]}


def test_session_scram_success_sets_principal() -> None:
    session, client = _session()
    _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}))
    c = ScramClient("alice", "alice-secret", "SCRAM-SHA-512")
    step = _on(session, _req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": c.first_message()}))
    assert step.action is Action.ANSWER and client.principal == "User:ANONYMOUS"
    c.process_server_first_message(step.body["auth_bytes"])
    step = _on(session, _req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": c.final_message()}))
    c.process_server_final_message(step.body["auth_bytes"])
    assert step.body["error_code"] == 0 and step.body["session_lifetime_ms"] == 0
    assert client.principal == "User:alice" and session.state is State.COMPLETE
    assert _on(session, _req(ApiKey.METADATA, 12, {"topics": None})).action is Action.PASS


def test_session_failure_message_and_close() -> None:
    session, client = _session()
    _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}))
    c = ScramClient("alice", "nope", "SCRAM-SHA-512")
    step = _on(session, _req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": c.first_message()}))
    c.process_server_first_message(step.body["auth_bytes"])
    step = _on(session, _req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": c.final_message()}))
    assert step.action is Action.ANSWER_AND_CLOSE
    assert step.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert step.body["error_message"] == ("Authentication failed during authentication due to invalid "
                                          "credentials with SASL mechanism SCRAM-SHA-512")
    assert client.principal == "User:ANONYMOUS"


def test_session_other_request_during_authentication() -> None:
    session, _ = _session()
    _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    step = _on(session, _req(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]}))
    assert step.action is Action.ANSWER_AND_CLOSE
    assert step.body["coordinators"][0]["error_code"] == ErrorCode.ILLEGAL_SASL_STATE


def test_session_lifetime_expiry_and_reauthentication() -> None:
    now = [1000.0]
    session, client = _session(clock=lambda: now[0], max_reauth_ms=5000)
    step = _plain(session, "alice", "alice-secret")
    assert step.body["session_lifetime_ms"] == 5000
    now[0] += 4
    assert _on(session, _req(ApiKey.METADATA, 12, {"topics": None})).action is Action.PASS
    # re-authentication before expiry renews the session
    step = _plain(session, "alice", "alice-secret")
    assert step.action is Action.ANSWER and step.body["session_lifetime_ms"] == 5000
    now[0] += 4
    assert _on(session, _req(ApiKey.METADATA, 12, {"topics": None})).action is Action.PASS
    now[0] += 2  # 6 s after the last authentication
    assert _on(session, _req(ApiKey.METADATA, 12, {"topics": None})).action is Action.CLOSE


def test_session_reauthentication_cannot_change_principal() -> None:
    session, client = _session()
    _plain(session, "alice", "alice-secret")
    step = _plain(session, "bob", "bob-secret")
    assert step.action is Action.ANSWER_AND_CLOSE
    assert step.body["error_message"] == "Cannot change principals during re-authentication from User.alice: User.bob"
    assert client.principal == "User:alice"


def test_session_v0_authenticate_no_reauthentication() -> None:
    session, _ = _session()
    _plain(session, "alice", "alice-secret", version=0)
    # the client cannot re-authenticate: a SaslHandshake goes to its handler (ILLEGAL_SASL_STATE)
    assert _on(session, _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})).action is Action.PASS


def test_plaintext_connections_need_no_session() -> None:
    auth = Authenticator(["PLAIN"], Users())
    assert auth.session(ClientInfo("h", 1)) is None
    with pytest.raises(ValueError, match="GSSAPI"):
        Authenticator(["GSSAPI"], Users())


def test_plain_async_hands_the_derivation_to_the_runner() -> None:
    from tmqgate.broker.auth import plain

    users = Users()
    users.add("carol", "carol-secret", "SCRAM-SHA-512")
    ran = []

    async def run(fn, *args):
        ran.append(fn)
        return fn(*args)

    server = PlainServer(users)
    assert asyncio.run(server.respond_async(b"\0carol\0carol-secret", run)) == b""
    assert ran == [plain.matches] and server.principal == "User:carol"
    with pytest.raises(AuthenticationFailed):
        asyncio.run(PlainServer(users).respond_async(b"\0carol\0wrong", run))


def test_verified_password_cache_follows_the_credential() -> None:
    from tmqgate.broker.auth.plain import verify_password

    users = Users()
    users.add("dave", "old-pw", "SCRAM-SHA-512")
    assert verify_password(users, "dave", "old-pw") and verify_password(users, "dave", "old-pw")
    users.add("dave", "new-pw", "SCRAM-SHA-512")  # a changed credential: the remembered check is void
    assert not verify_password(users, "dave", "old-pw")
    assert verify_password(users, "dave", "new-pw")
    del users.creds[("dave", "SCRAM-SHA-512")]
    assert not verify_password(users, "dave", "new-pw")


def test_failures_are_delayed() -> None:
    """connection.failed.authentication.delay.ms: every failure step waits before it is answered."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    users = Users()
    users.add("alice", "alice-secret", "SCRAM-SHA-512")
    client = ClientInfo("127.0.0.1", 1, listener="SASL_PLAINTEXT", security_protocol="SASL_PLAINTEXT")
    auth = Authenticator(["PLAIN"], users, failed_delay_ms=100, sleep=sleep)
    session = auth.session(client)
    assert _plain(session, "alice", "alice-secret").action is Action.ANSWER and slept == []
    session = auth.session(client)
    assert _plain(session, "alice", "bad").action is Action.ANSWER_AND_CLOSE and slept == [0.1]
    step = _on(auth.session(client), _req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
    assert step.action is Action.ANSWER_AND_CLOSE and slept == [0.1, 0.1]


def test_session_handshake_v0_raw_tokens() -> None:
    session, client = _session()
    step = _on(session, _req(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert step.action is Action.ANSWER and session.raw_tokens
    assert asyncio.run(session.on_token(b"\0alice\0alice-secret")) == b""
    assert not session.raw_tokens and client.principal == "User:alice"
    session, client = _session()
    _on(session, _req(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert asyncio.run(session.on_token(b"\0alice\0nope")) is None and session.state is State.FAILED


def test_scram_client_rfc7677_vector() -> None:
    """The broker's own SCRAM client (inter-broker SASL) gives RFC 7677's messages and accepts
    its server signature."""
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC7677_CLIENT_FIRST
    assert client.final(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.verify(RFC7677_SERVER_FINAL)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_against_the_server(mechanism: str) -> None:
    users = Users()
    users.add("broker,1=", "secret", mechanism)  # a saslname with escapes
    server = scram.ScramServer(mechanism, users)
    client = scram.ScramClient(mechanism, "broker,1=", "secret")
    client.verify(server.respond(client.final(server.respond(client.first()))))
    assert server.complete and server.principal == "User:broker,1="
    # a wrong password: the server refuses the proof
    server = scram.ScramServer(mechanism, users)
    client = scram.ScramClient(mechanism, "broker,1=", "wrong")
    final = client.final(server.respond(client.first()))
    with pytest.raises(AuthenticationFailed):
        server.respond(final)


def test_scram_client_refuses_a_server_that_does_not_hold_the_credential() -> None:
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    client.final(RFC7677_SERVER_FIRST)
    with pytest.raises(ValueError, match="signature"):  # a server signature from another password
        client.verify(b"v=" + base64.b64encode(bytes(32)))
    with pytest.raises(ValueError, match="refused"):
        client.verify(b"e=invalid-proof")
    for server_first, why in [
        (b"r=someoneElse123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),  # not extended
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1024", "iterations"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,i=4096", "invalid"),
        (b"\xff\xfe", "invalid"),
    ]:
        with pytest.raises(ValueError, match=why):
            scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO").final(server_first)
    with pytest.raises(ValueError, match="signature"):  # verify before final: nothing to check against
        scram.ScramClient("SCRAM-SHA-256", "user", "pencil").verify(RFC7677_SERVER_FINAL)
