"""OAUTHBEARER tokens with non-finite or out-of-range numeric claims (issue 25, point 6): an
unsecured token whose `exp`, `iat` or `nbf` is NaN, Infinity or 1e300 must not kill the
connection handler (it did: an unlimited ERROR traceback per connection). NaN and Infinity
are not JSON: Kafka's parser (Jackson) refuses the token, answered `{"status":"invalid_token"}`
and then SASL_AUTHENTICATION_FAILED (58), as for any invalid token; what Kafka does with a
finite but huge `exp` is asserted on both brokers too. Runs on both targets."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from .raw import Closed, RawConn
from .secure import SecureBroker, secure_broker_fixture
from .test_sasl_oauth import _attempt

sasl_broker = secure_broker_fixture(mechanisms=("OAUTHBEARER", "SCRAM-SHA-512"))
INVALID = '{"status":"invalid_token"}'


def _token(claims_text: str) -> str:
    """An unsecured JWS (alg none) whose claims are `claims_text` as written (NaN is not JSON)."""
    def enc(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{enc(json.dumps({'alg': 'none'}).encode())}.{enc(claims_text.encode())}."


def _claims(**values: str) -> str:
    now = int(time.time())
    fields: dict[str, Any] = {"sub": '"alice"', "iat": str(now), "exp": str(now + 600), **values}
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"


@pytest.mark.parametrize("claim,value", [
    ("exp", "NaN"), ("exp", "Infinity"), ("exp", "-Infinity"), ("iat", "NaN"), ("iat", "Infinity"),
    ("nbf", "NaN"),
])
def test_non_json_numbers_are_an_invalid_token(sasl_broker: SecureBroker, claim: str, value: str) -> None:
    first, second, closed = _attempt(sasl_broker, _token(_claims(**{claim: value})))
    assert (first["error_code"], first["auth_bytes"].decode()) == (0, INVALID)
    assert second is not None and (second["error_code"], second["error_message"]) == (58, INVALID)
    assert closed


@pytest.mark.parametrize("value", ["1e300", "1e400"])
def test_exp_past_a_long_of_milliseconds(sasl_broker: SecureBroker, value: str) -> None:
    """tmqgate refuses it as an invalid token; Kafka validates it, then fails converting the
    session lifetime (ArithmeticException: long overflow) and closes the connection unanswered."""
    token = _token(_claims(exp=value))
    if sasl_broker.target == "kafka":
        with RawConn(sasl_broker.sasl_bootstrap) as c:
            assert c.request(17, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
            with pytest.raises(Closed):
                c.request(36, 2, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
        return
    first, second, closed = _attempt(sasl_broker, token)
    assert (first["error_code"], first["auth_bytes"].decode()) == (0, INVALID)
    assert second is not None and (second["error_code"], second["error_message"]) == (58, INVALID)
    assert closed


@pytest.mark.tmqgate_only
def test_bad_tokens_leave_a_bounded_log(sasl_broker: SecureBroker) -> None:
    """30 attempts with such tokens: each answered, no traceback, at most log_rate_limit_messages
    (10) lines about them and one "suppressed" line; a good token still authenticates."""
    log_path = sasl_broker.proc.log_path  # type: ignore[attr-defined]
    before = log_path.stat().st_size
    for i in range(30):
        with RawConn(sasl_broker.sasl_bootstrap) as c:
            assert c.request(17, 1, {"mechanism": "OAUTHBEARER"})["error_code"] == 0
            token = _token(_claims(exp=("NaN", "Infinity", "1e300")[i % 3]))
            first = c.request(36, 2, {"auth_bytes": f"n,,\x01auth=Bearer {token}\x01\x01".encode()})
            assert first["auth_bytes"].decode() == INVALID
    first, second, _ = _attempt(sasl_broker, _token(_claims()))
    assert (first["error_code"], second) == (0, None)
    with open(log_path, "rb") as fh:
        fh.seek(before)
        text = fh.read().decode(errors="replace")
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    assert len(text.splitlines()) <= 11, text[-3000:]
