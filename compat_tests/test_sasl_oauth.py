"""OAUTHBEARER with signed JWTs (issue 12, point 3): both brokers validate tokens against the
same JWKS file (tmqgate: sasl_oauthbearer_jwks_endpoint_url; Kafka 4.3: its
OAuthBearerValidatorCallbackHandler with sasl.oauthbearer.jwks.endpoint.url), expecting the
same audience and issuer. A token the JWKS signed works for confluent-kafka (oauth_cb) and
aiokafka; one signed by another key, for another audience, or unsigned (alg none) is answered
Kafka's `{"status":"invalid_token"}` and the connection closed. (Unsecured tokens, Kafka's
default validator, are in test_sasl.py.)"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from .raw import RawConn
from .secure import SecureBroker, start_secure_broker, unsecured_jwt
from .test_sasl import CLIENTS, _expected, _topic

ISSUER = "https://issuer.tmqgate.test"
AUDIENCE = "kafka-test"
INVALID = '{"status":"invalid_token"}'


class Keys:
    def __init__(self, directory: Path) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid="test-key", use="sig", alg="RS256")
        self.jwks = directory / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [jwk]}))

    def token(self, sub: str, *, key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": sub, "iat": now, "exp": now + 600, "iss": ISSUER, "aud": AUDIENCE, **claims}
        return jwt.encode(body, key or self.key, algorithm="RS256", headers={"kid": "test-key"})


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory, target: str,
          pytestconfig: pytest.Config) -> Iterator[tuple[SecureBroker, Keys]]:
    if pytestconfig.getoption("--bootstrap"):
        pytest.skip("--bootstrap given: these tests start a broker with SASL listeners")
    keys = Keys(tmp_path_factory.mktemp("jwks"))
    url = f"file://{keys.jwks}"
    if target == "kafka":
        config: dict[str, Any] = {
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": url, "sasl.oauthbearer.expected.audience": AUDIENCE,
            "sasl.oauthbearer.expected.issuer": ISSUER}
    else:
        config = {"sasl_oauthbearer_jwks_endpoint_url": url, "sasl_oauthbearer_expected_audience": [AUDIENCE],
                  "sasl_oauthbearer_expected_issuer": ISSUER}
    # Kafka 4 reads JWKS files and URLs only where these system properties allow
    saved = os.environ.get("KAFKA_OPTS")
    os.environ["KAFKA_OPTS"] = (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url} "
                                f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.files={keys.jwks}")
    try:
        sb = start_secure_broker(target, tmp_path_factory.mktemp(f"{target}-oauth"), users={},
                                 mechanisms=("OAUTHBEARER", "SCRAM-SHA-512"), extra_config=config)
    finally:
        if saved is None:
            os.environ.pop("KAFKA_OPTS", None)
        else:
            os.environ["KAFKA_OPTS"] = saved
    try:
        yield sb, keys
    finally:
        sb.proc.stop()


def test_signed_token_confluent(oauth: tuple[SecureBroker, Keys]) -> None:
    sb, keys = oauth
    topic = _topic(sb, "oauth-confluent")
    conf = {"bootstrap.servers": sb.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (keys.token("alice"), time.time() + 600)}
    assert CLIENTS["confluent"][1](conf, topic) == _expected()


def test_signed_token_aiokafka(oauth: tuple[SecureBroker, Keys]) -> None:
    from aiokafka.abc import AbstractTokenProvider

    sb, keys = oauth

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        async def token(self) -> str:
            return keys.token("alice")

    topic = _topic(sb, "oauth-aiokafka")
    conf = {"bootstrap_servers": sb.sasl_bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider()}
    assert CLIENTS["aiokafka"][1](conf, topic) == _expected()


def _attempt(sb: SecureBroker, token: str) -> tuple[dict, dict | None, bool]:
    """(first SaslAuthenticate answer, the answer to the client's ^A if any, closed after)."""
    with RawConn(sb.sasl_bootstrap) as c:
        assert c.request(17, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
        first = c.request(36, 2, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
        if first["error_code"] or first["auth_bytes"] == b"":
            return first, None, first["error_code"] != 0 and c.closed_within(10)
        second = c.request(36, 2, {"auth_bytes": b"\x01"})
        return first, second, c.closed_within(10)


def test_valid_token_raw(oauth: tuple[SecureBroker, Keys]) -> None:
    sb, keys = oauth
    first, second, _ = _attempt(sb, keys.token("alice"))
    assert (first["error_code"], first["auth_bytes"], second) == (0, b"", None)
    assert 0 < first["session_lifetime_ms"] <= 600_000  # bounded by the token's exp (KIP-368)


@pytest.mark.parametrize("case", ["other-key", "wrong-audience", "wrong-issuer", "expired", "unsigned"])
def test_invalid_tokens(oauth: tuple[SecureBroker, Keys], case: str) -> None:
    sb, keys = oauth
    token = {
        "other-key": lambda: keys.token("alice", key=keys.other),
        "wrong-audience": lambda: keys.token("alice", aud="someone-else"),
        "wrong-issuer": lambda: keys.token("alice", iss="https://evil.test"),
        "expired": lambda: keys.token("alice", exp=int(time.time()) - 3600, iat=int(time.time()) - 7200),
        "unsigned": lambda: unsecured_jwt("alice"),
    }[case]()
    first, second, closed = _attempt(sb, token)
    assert (first["error_code"], first["auth_bytes"].decode()) == (0, INVALID)
    assert second is not None and (second["error_code"], second["error_message"]) == (58, INVALID)
    assert closed
