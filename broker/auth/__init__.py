"""Authentication, sans-IO: the SASL mechanisms (bytes in, bytes out, each a state machine
written as data, no sockets) and a connection's authentication state (`session.py`), which
the server asks whether a request may pass. Credentials come from `storage.users`.

- `mechanism.py` — what every mechanism server offers, and `AuthenticationFailed`;
- `scram.py` — SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) and the key derivation;
- `plain.py` — PLAIN (RFC 4616) checked against the SCRAM credentials;
- `oauthbearer.py` — OAUTHBEARER (RFC 7628): Kafka's unsecured tokens, or signed JWTs
  checked against a JWKS;
- `session.py` — Kafka's SaslServerAuthenticator as a table: which requests a connection may
  send in which state, re-authentication (KIP-368) and session expiry.
"""
