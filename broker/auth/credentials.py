"""Setting a user's password from a clear-text one (TDengine's CREATE USER / ALTER USER ... PASS
on the SQL front, tools): SCRAM credentials for each mechanism, as `tmqgate user add` and
AlterUserScramCredentials store them (storage.users), so the user logs in over SASL (SCRAM or
PLAIN) and HTTP Basic alike."""

from __future__ import annotations

from collections.abc import Sequence

from tmqgate.broker.auth import scram
from tmqgate.storage.users import Users

#: What CREATE USER gives a new user: both SCRAM mechanisms, Kafka's default iterations.
DEFAULT_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


class UserExists(ValueError):
    """CREATE USER of a user that has credentials (TDengine: "User already exists")."""


class UnknownUser(KeyError):
    """ALTER USER of a user without credentials (TDengine: "User not exist")."""


def user_exists(users: Users, user: str) -> bool:
    return any(users.scram(user, m) is not None for m in scram.HASHES)


def set_password(users: Users, user: str, password: str, *, create: bool,
                 mechanisms: Sequence[str] = DEFAULT_MECHANISMS,
                 iterations: int = scram.DEFAULT_ITERATIONS) -> None:
    """Give `user` credentials for `password`: `create` refuses an existing user, otherwise an
    unknown one is refused (ALTER). Raises ValueError for an empty name or password."""
    if not user or not password:
        raise ValueError("a user needs a name and a password")
    exists = user_exists(users, user)
    if create and exists:
        raise UserExists(user)
    if not create and not exists:
        raise UnknownUser(user)
    for mechanism in mechanisms:
        users.put_scram(user, mechanism, scram.make_credential(mechanism, password, iterations))
