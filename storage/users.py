"""Users' SCRAM credentials (RFC 5802): per user and mechanism the salt, the iteration count,
StoredKey and ServerKey — what a SCRAM server needs, and nothing a client could log in with
(never the password, nor the salted password). PLAIN is checked against the same record.

Mechanism names are Kafka's ("SCRAM-SHA-256", "SCRAM-SHA-512"); the key derivation lives in
the broker (``broker/auth/scram.py``): storage only keeps the bytes. Reads are plain LevelDB
gets (an authentication is one), so nothing is cached and a change is seen at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from tmqgate.storage import keys

if TYPE_CHECKING:
    from tmqgate.storage.core import Core


class ScramCredential(NamedTuple):
    """One user's credential for one SCRAM mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class Users:
    """See the module docstring."""

    def __init__(self, core: Core) -> None:
        self._core = core
        #: told of every credential set (or removed: None) through this class (on a cluster:
        #: broker/cluster/catalog.py publishes it), not of one applied from the cluster
        self.observers: list[Callable[[str, str, ScramCredential | None], None]] = []

    def _observe(self, user: str, mechanism: str, credential: ScramCredential | None, observed: bool) -> None:
        if observed:
            for observer in self.observers:
                observer(user, mechanism, credential)

    def put_scram(self, user: str, mechanism: str, credential: ScramCredential, *, observed: bool = True) -> None:
        """Create or replace `user`'s credential for `mechanism`."""
        if not user:
            raise ValueError("empty user name")
        value = keys.pack_scram(credential.iterations, credential.salt,
                                credential.stored_key, credential.server_key)
        self._core.put(keys.scram_key(user, mechanism), value)
        self._observe(user, mechanism, credential, observed)

    def scram(self, user: str, mechanism: str) -> ScramCredential | None:
        raw = self._core.db.get(keys.scram_key(user, mechanism))
        if raw is None:
            return None
        iterations, salt, stored_key, server_key = keys.unpack_scram(raw)
        return ScramCredential(salt, iterations, stored_key, server_key)

    def delete_scram(self, user: str, mechanism: str, *, observed: bool = True) -> bool:
        """Remove one credential; False if there was none."""
        key = keys.scram_key(user, mechanism)
        if self._core.db.get(key) is None:
            return False
        self._core.delete(key)
        self._observe(user, mechanism, None, observed)
        return True

    def delete_user(self, user: str) -> int:
        """Remove every credential of `user`; how many there were."""
        wb = self._core.batch()
        gone = []
        for key in self._core.db.iterator(prefix=keys.scram_user_prefix(user), include_value=False):
            wb.delete(key)
            gone.append(keys.parse_scram_key(key)[1])
        if gone:
            self._core.write(wb)
            for mechanism in gone:
                self._observe(user, mechanism, None, True)
        return len(gone)

    def scram_users(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user with credentials: user -> mechanism -> credential (sorted by user)."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for key, value in self._core.db.iterator(prefix=keys.SCRAM):
            user, mechanism = keys.parse_scram_key(key)
            iterations, salt, stored_key, server_key = keys.unpack_scram(value)
            out.setdefault(user, {})[mechanism] = ScramCredential(salt, iterations, stored_key, server_key)
        return dict(sorted(out.items()))
