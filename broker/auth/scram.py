"""SCRAM-SHA-256 and SCRAM-SHA-512, server side (RFC 5802, RFC 7677), as Kafka's
ScramSaslServer speaks them; and the key derivation the credential store, PLAIN, the
AlterUserScramCredentials API and `tmqgate user add` share.

Rules (Kafka's where it has one):
- client-first is `gs2-header client-first-bare`; the gs2 header is `n,,` or `n,a=<user>,`
  (no channel binding: `y`/`p` are refused); the user name is a saslname (`=2C` is `,`,
  `=3D` is `=`); an authzid other than the user fails with Kafka's own message (the client
  sees it); the `tokenauth` extension (delegation tokens) is not served: fails;
- an unknown user, a credential below 4096 iterations, a bad message, a client-final whose
  nonce is not the server-first's, or whose channel binding is not its gs2 header, or whose
  proof is wrong: failure with Kafka's generic message (the client never learns which);
- server-first is `r=<client nonce><server nonce>,s=<salt>,i=<iterations>`; server-final
  `v=<ServerSignature>`; the proof is checked in constant time against StoredKey;
- only salt, iterations, StoredKey and ServerKey are ever stored (storage.users).

States (one checked transition, `_move`):
RECEIVE_CLIENT_FIRST -> RECEIVE_CLIENT_FINAL | FAILED;
RECEIVE_CLIENT_FINAL -> COMPLETE | FAILED; COMPLETE and FAILED are final.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from tmqgate.broker.auth.mechanism import AuthenticationFailed, MechanismBase
from tmqgate.protocol.transitions import from_moves
from tmqgate.storage import ScramCredential

#: Kafka's ScramMechanism: the hash of each mechanism, and Kafka's bounds on iterations
#: (AlterUserScramCredentials refuses outside [4096, 16384]; the server refuses below 4096).
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's ScramMechanism type codes in Describe/AlterUserScramCredentials.
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096

Lookup = Callable[[str, str], "ScramCredential | None"]  # (user, mechanism) -> credential


# key derivation (RFC 5802 section 3) ------------------------------------------------------------


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2-HMAC (Kafka normalizes to UTF-8 only)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def _hmac(mechanism: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, HASHES[mechanism]).digest()


def _h(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(HASHES[mechanism], data).digest()


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
    "Server Key") — what AlterUserScramCredentials turns the client's salted password into."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, iterations, _h(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"))


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for `password` (a random 32-byte salt unless given)."""
    check_iterations(iterations)
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations),
                                  salt, iterations)


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")


def password_matches(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """PLAIN's check: derive StoredKey from `password` with the stored salt and iterations and
    compare in constant time."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(credential_from_salted(mechanism, salted, credential.salt,
                                                      credential.iterations).stored_key,
                               credential.stored_key)


# messages (Kafka's ScramMessages patterns) ----------------------------------------------------

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = r"(?:,[A-Za-z0-9_]+=[\x01-\x2B\x2D-\x7F]+)*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}),p=(?P<proof>{_BASE64})")


def username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


class State(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive client-first"
    RECEIVE_CLIENT_FINAL = "receive client-final"
    COMPLETE = "complete"
    FAILED = "failed"


_MOVES: dict[State, frozenset[State]] = {
    State.RECEIVE_CLIENT_FIRST: frozenset({State.RECEIVE_CLIENT_FINAL, State.FAILED}),
    State.RECEIVE_CLIENT_FINAL: frozenset({State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset(),
    State.FAILED: frozenset(),
}


class ScramServer(MechanismBase):
    """One SCRAM exchange (see the module docstring)."""

    VALID_PREVIOUS = from_moves(_MOVES)
    COMPLETE = State.COMPLETE

    def __init__(self, mechanism: str, lookup: Lookup, nonce: Callable[[], str] | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce or (lambda: secrets.token_urlsafe(24))
        self.state = State.RECEIVE_CLIENT_FIRST
        self.user = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce_full = ""

    def respond(self, token: bytes) -> bytes:
        step = _STEPS.get(self.state)
        if step is None:
            raise AuthenticationFailed(f"unexpected SCRAM message in state {self.state.value}")
        try:
            return step(self, token)
        except AuthenticationFailed:
            self._credential = None
            self._move(State.FAILED)
            raise

    def _client_first(self, token: bytes) -> bytes:
        m = _CLIENT_FIRST.fullmatch(_text(token))
        if m is None:
            raise AuthenticationFailed("Invalid SCRAM client first message format")
        user = username(m["saslname"])
        extensions = dict(kv.split("=", 1) for kv in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed(f"Token Authentication failed: Invalid tokenId : {user}")
        credential = self._lookup(user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed(f"Authentication failed: Invalid user credentials (unknown user {user!r})")
        authzid = m["authzid"]
        if authzid and username(authzid) != user:
            raise AuthenticationFailed(
                "authzid differs from user",
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(f"Iterations {credential.iterations} is less than the minimum "
                                       f"{MIN_ITERATIONS} for {self.mechanism}")
        self.user = user
        self._credential = credential
        self._gs2 = m["gs2"]
        self._client_first_bare = _text(token)[len(self._gs2):]
        self._nonce_full = m["nonce"] + self._nonce()
        self._server_first = (f"r={self._nonce_full},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._move(State.RECEIVE_CLIENT_FINAL)
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        text = _text(token)
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise AuthenticationFailed("Invalid SCRAM client final message format")
        if m["nonce"] != self._nonce_full:
            raise AuthenticationFailed("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(m["channel"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise AuthenticationFailed("Invalid SCRAM client final message encoding") from None
        if channel != self._gs2.encode():
            raise AuthenticationFailed("channel binding does not match the gs2 header")
        credential = self._credential
        assert credential is not None
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_h(self.mechanism, client_key), credential.stored_key):
            raise AuthenticationFailed("Invalid client credentials")
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self._credential = None
        self._move(State.COMPLETE)
        return b"v=" + base64.b64encode(server_signature)


def _text(token: bytes) -> str:
    try:
        return token.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed("SCRAM message is not UTF-8") from None


_STEPS: dict[State, Callable[[ScramServer, bytes], bytes]] = {
    State.RECEIVE_CLIENT_FIRST: ScramServer._client_first,
    State.RECEIVE_CLIENT_FINAL: ScramServer._client_final,
}


# client side (a broker authenticating to the others of its cluster) ----------------------------

_SERVER_FIRST = re.compile(rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]{{1,9}})"
                           rf"{_EXTENSIONS}")


class ScramClient:
    """The client's side of one exchange, as Kafka's ScramSaslClient: ``first`` → the server's
    first → ``final`` → the server's final → ``verify``. ValueError whenever the server's
    message is malformed, its nonce is not this exchange's, it asks for fewer than 4096
    iterations, or its signature is not the one the password gives (a server that does not
    hold the credential)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        saslname = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={saslname},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode(errors="replace")
        m = _SERVER_FIRST.fullmatch(text)
        if m is None:
            raise ValueError(f"invalid SCRAM server first message: {text[:200]!r}")
        if not m["nonce"].startswith(self._nonce) or m["nonce"] == self._nonce:
            raise ValueError("the server's nonce does not extend this exchange's")
        iterations = int(m["iterations"])
        if iterations < MIN_ITERATIONS:
            raise ValueError(f"the server asks for {iterations} iterations, fewer than {MIN_ITERATIONS}")
        try:
            salt = base64.b64decode(m["salt"], validate=True)
        except binascii.Error:
            raise ValueError("invalid salt in the SCRAM server first message") from None
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={m['nonce']}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = _hmac(self.mechanism, _h(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode(errors="replace")
        if text.startswith("e="):
            raise ValueError(f"the server refused: {text[2:200]}")
        if not self._server_signature or not hmac.compare_digest(
                text.encode(), b"v=" + base64.b64encode(self._server_signature)):
            raise ValueError("the server's signature is not the one this password gives")
